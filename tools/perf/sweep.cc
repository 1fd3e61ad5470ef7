// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf's size sweep, the ranks' side: every size (and, with
// --compress, every codec) timed the way the peer drivers time theirs
// (tools/peers/sampling.h), and the ranks' reports as rows. sweep_print.cc
// prints them in nccl-tests' columns.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "tools/common/reference.h"
#include "tools/peers/sampling.h"
#include "tools/perf/sweep.h"

namespace gsync::perf {

namespace {

// How a compressed first op came out on this rank: its error against the
// exact result and the hash of its bits (every rank must have the same).
struct FirstOp {
  size_t wrong = 0;
  double rel_error = 0;
  uint64_t hash = 0;
};

FirstOp check_first(void* buf, size_t count, const Options& o, const CodecRun& codec, int rank) {
  FirstOp f;
  f.hash = bits_hash(buf, count * tools::elem_size(o.dtype_id));
  if (codec.none) {
    f.wrong = fill_and_count_wrong(buf, count, o, rank, true);
    return f;
  }
  std::vector<double> got(count), want(count);
  for (size_t i = 0; i < count; i++) {
    got[i] = tools::load(buf, o.dtype_id, i);
    want[i] = tools::expected(o.dtype_id, o.op_id, o.world(), i);
  }
  f.rel_error = relative_error(got, want);
  f.wrong = f.rel_error <= codec.bound ? 0 : count;
  return f;
}

// Parameter keys live apart from the allreduce keys of the same sweep,
// and so do the reproducible ones.
constexpr uint64_t kPsKeyBase = uint64_t{1} << 40;
constexpr uint64_t kReproKeyBase = uint64_t{1} << 39;

// A push_pull's first op: every rank pushed its test values with weight 1
// into parameters declared as zeros with SGD at learning rate 1, so what
// comes back is minus the mean of the ranks' values (in the dtype's
// precision: the servers keep fp32 and round once).
FirstOp check_push_pull(void* buf, size_t count, const Options& o) {
  FirstOp f;
  f.hash = bits_hash(buf, count * tools::elem_size(o.dtype_id));
  const double tol = o.dtype_id == GSYNC_FLOAT32 ? 1e-6 : 1e-2;
  for (size_t i = 0; i < count; i++) {
    double want = -tools::expected(o.dtype_id, GSYNC_AVG, o.world(), i);
    double got = tools::load(buf, o.dtype_id, i);
    if (!(std::abs(got - want) <= tol * std::max(1.0, std::abs(want)))) f.wrong++;
  }
  return f;
}

// A variant's key: apart from every other variant's and size's.
uint64_t key_of(const Options& o, const Variant& v, size_t s) {
  if (v.push_pull) return kPsKeyBase + s;
  if (v.reproducible) return kReproKeyBase + s;
  return s * o.codecs.size() + v.codec;
}

// Whose bytes a row counts: --reproducible every peer's (its ops are never
// compressed), a codec's run its own hop.
gsync_compression_t measured_hop(const Options& o, const CodecRun& codec) {
  gsync_compression_t hop = codec.c;
  if (o.reproducible) hop.hops = GSYNC_HOPS_CROSS_HOST;
  return hop;
}

// A rank of the size sweep. Reports one line per size and variant:
// "size <bytes> <variant> <wrong> <relative error> <hash hi> <hash lo> <wire
// bytes> <logical bytes> <rank cpu s> <daemon cpu s> <t_0 us> ... <t_S-1
// us>", the CPU over the samples (sampling.h; the daemon's from its host's
// local rank 0, 0 from the others, -1 when it could not be read), one time per op for each
// of S samples of k back-to-back ops after a barrier (tools/peers/sampling.h,
// the schedule the peer drivers use too). The first op of each is checked
// and, with --compress, bracketed by barriers so that the bytes its host's
// daemon put on the compressed hop are its alone.
int sweep_rank(const Options& o, int rank, const std::vector<uint64_t>& sizes) {
  gsync_comm_t* comm = nullptr;
  // A declaration is staged through the arena (its initial values beside
  // the buffer), so --ps needs room for the largest twice.
  // A reproducible op's scratch is 1.25x its fp32 tensor (codes and int32).
  const uint64_t arena = (o.ps ? 2 * o.max_bytes : o.max_bytes) +
                         (o.reproducible ? o.max_bytes / tools::elem_size(o.dtype_id) * 5 : 0) +
                         (16 << 20);
  if (connect(o, rank, arena, &comm) != 0) {
    tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
    return 1;
  }
  void* buf = nullptr;
  if (gsync_alloc(comm, o.max_bytes, &buf) != 0) {
    tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
    return 1;
  }
  size_t elem = tools::elem_size(o.dtype_id);
  uint64_t barrier_step = 0;
  const Place& me = o.places[size_t(rank)];
  const bool measures = o.measure_wire() && me.local_rank == 0 && !me.admin.empty();
  const std::vector<Variant> variants = variants_of(o);
  for (size_t s = 0; s < sizes.size(); s++) {
    size_t count = sizes[s] / elem;
    for (size_t vi = 0; vi < variants.size(); vi++) {
      const Variant& v = variants[vi];
      const CodecRun& codec = o.codecs[v.codec];
      const uint64_t key = key_of(o, v, s);
      uint64_t step = 0;
      auto op = [&] {
        return v.push_pull ? push_pull(comm, key, step++, buf, count, o, rank)
                           : allreduce(comm, key, step++, buf, count, o, rank, &codec.c,
                                       v.reproducible ? 1 : 0);
      };
      if (v.push_pull) {
        std::memset(buf, 0, sizes[s]);
        if (!ps_declare(comm, key, buf, count, o, rank)) return 1;
      }
      fill_and_count_wrong(buf, count, o, rank, false);
      Payload before, after;
      if (o.measure_wire() && !barrier(comm, &barrier_step, rank)) return 1;
      const gsync_compression_t hop = measured_hop(o, codec);
      if (measures) before = hop_payload(me.admin, hop);
      if (!op()) return 1;
      if (o.measure_wire() && !barrier(comm, &barrier_step, rank)) return 1;
      if (measures) after = hop_payload(me.admin, hop);
      FirstOp first = v.push_pull ? check_push_pull(buf, count, o)
                                  : check_first(buf, count, o, codec, rank);
      for (int w = 0; w < o.warmup; w++)
        if (!op()) return 1;
      const int k = gsync_ops_per_sample(sizes[s]), samples = gsync_samples_for(o.iters, sizes[s]);
      const bool reads_daemon = o.cpu && me.local_rank == 0 && !me.admin.empty();
      const double daemon0 = reads_daemon ? daemon_cpu_s(me.admin) : 0;
      const double cpu0 = gsync_process_cpu_s();
      std::string times;
      for (int i = 0; i < samples; i++) {
        if (!barrier(comm, &barrier_step, rank)) return 1;
        auto t0 = Clock::now();
        for (int j = 0; j < k; j++)
          if (!op()) return 1;
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        times += fmt::format(" {:.3f}", us / k);
      }
      const double rank_cpu = gsync_process_cpu_s() - cpu0;
      double daemon_cpu = 0;
      if (reads_daemon) {
        const double daemon1 = daemon_cpu_s(me.admin);
        daemon_cpu = daemon0 >= 0 && daemon1 >= 0 ? daemon1 - daemon0 : -1;
      } else if (o.cpu && me.local_rank == 0) {
        daemon_cpu = -1;  // a daemon whose admin socket is not known (--cluster)
      }
      tools::report(fmt::format("size {} {} {} {:.9g} {} {} {} {} {:.6f} {:.6f}{}\n", sizes[s], vi,
                                first.wrong, first.rel_error, first.hash >> 32,
                                first.hash & 0xffffffffu, after.wire - before.wire,
                                after.logical - before.logical, rank_cpu, daemon_cpu, times));
    }
  }
  gsync_close(comm);
  return 0;
}

}  // namespace

std::vector<Variant> variants_of(const Options& o) {
  std::vector<Variant> out;
  for (size_t c = 0; c < o.codecs.size(); c++) out.push_back({false, c});
  if (o.ps) out.push_back({true, 0});
  if (o.reproducible)
    for (size_t c = 0; c < o.codecs.size(); c++)
      if (o.codecs[c].none) out.push_back({false, c, true});
  return out;
}

std::vector<tools::ChildResult> run_sweep_ranks(const Options& o,
                                                const std::vector<uint64_t>& sizes) {
  return tools::run_ranks(o.world(), [&](int r) { return sweep_rank(o, r, sizes); }, 3600);
}

SweepRow sweep_row(const Options& o, const Reports& rows, size_t r, int samples) {
  SweepRow out;
  std::vector<double> per_sample(static_cast<size_t>(samples), 0.0);
  double hash_hi = -1, hash_lo = -1;
  int measured = 0;
  for (const auto& rank_rows : rows) {
    if (r >= rank_rows.size() || rank_rows[r].size() < kFirstTime) continue;
    const auto& v = rank_rows[r];
    out.reported++;
    out.wrong += static_cast<uint64_t>(v[2]);
    out.rel_error = std::max(out.rel_error, v[3]);
    if (hash_hi < 0) {
      hash_hi = v[4];
      hash_lo = v[5];
    }
    out.same_bits &= v[4] == hash_hi && v[5] == hash_lo;
    if (v[6] > 0 || v[7] > 0) measured++;
    out.wire += v[6];
    out.logical += v[7];
    if (out.cpu_s >= 0) out.cpu_s = v[9] < 0 ? -1 : out.cpu_s + v[8] + v[9];
    out.cpu_ranks += v[8];
    out.cpu_daemons += std::max(0.0, v[9]);
    for (int i = 0; i < samples && size_t(i) + kFirstTime < v.size(); i++)
      per_sample[size_t(i)] = std::max(per_sample[size_t(i)], v[size_t(i) + kFirstTime]);
  }
  out.wire /= std::max(1, o.hosts);
  out.logical /= std::max(1, o.hosts);
  (void)measured;
  out.us = median(per_sample);
  return out;
}

std::vector<uint64_t> sweep_sizes(const Options& o) {
  std::vector<uint64_t> sizes;
  size_t elem = tools::elem_size(o.dtype_id);
  for (uint64_t b = o.min_bytes; b <= o.max_bytes; b *= static_cast<uint64_t>(o.factor)) {
    sizes.push_back(b / elem * elem);
    if (o.factor < 2) break;
  }
  return sizes;
}

bool measure_sizes(const Options& o, const std::vector<uint64_t>& sizes, std::vector<double>* us) {
  auto res = run_sweep_ranks(o, sizes);
  Reports rows;
  bool ok = collect(res, "size", &rows);
  const size_t nv = variants_of(o).size();
  us->clear();
  for (size_t s = 0; s < sizes.size(); s++) {
    SweepRow r = sweep_row(o, rows, s * nv, gsync_samples_for(o.iters, sizes[s]));
    ok = ok && r.reported == o.world() && r.wrong == 0 && r.same_bits && r.us > 0;
    us->push_back(r.us);
  }
  return ok;
}

}  // namespace gsync::perf
