// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf: allreduce benchmark in the columns of nccl-tests'
// all_reduce_perf, run through a real gsyncd by real rank processes, with the
// machine's memory bandwidth measured in the same run as the reference.
//
// Without --socket it starts a private daemon and stops it at the end.
// --workload resnet50 replaces the size sweep with ResNet-50's gradients in
// DDP's 25 MiB buckets, averaged step after step.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "daemon/cluster/cluster_file.h"
#include "daemon/collective/schedule.h"
#include "daemon/config/config.h"
#include "gsync/gsync.h"
#include "tools/common/procs.h"
#include "tools/common/reference.h"
#include "tools/peers/launch.h"
#include "tools/peers/sampling.h"
#include "tools/perf/codecs.h"
#include "tools/perf/membw.h"
#include "tools/perf/resnet50.h"
#include "tools/testbed/testbed.h"

namespace gsync::perf {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// A sample's barrier waits this long for every rank before the run fails
// with the daemon's report of who is missing.
constexpr int kBarrierTimeoutMs = 60000;

// Where one rank runs: its host's daemon socket and its numbers.
struct Place {
  std::string socket;
  int host = 0, rank = 0, local_rank = 0, local_size = 1;
  std::vector<int> cpus;  // its host's CPUs on a pinned test bed, else empty
  std::string admin;      // its host's admin socket, where known
};

struct Options {
  std::string socket;
  int ranks = 4;  // per host
  int hosts = 1, racks = 1;
  bool loopback = false, pin = false;
  uint32_t uplink_mbit = 0;
  std::string cluster, sockets, algo = "auto", compare;
  std::vector<std::string> daemon_args;
  std::vector<Place> places;  // by rank
  std::vector<std::string> racks_of;  // rack per host
  int world() const { return static_cast<int>(places.size()); }
  uint64_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int factor = 4;
  std::string dtype = "float32", op = "sum";
  int iters = 20, warmup = 5;
  bool json_out = false;
  std::string workload;
  int steps = 10;
  int dtype_id = GSYNC_FLOAT32, op_id = GSYNC_SUM;
  // --compress, in order (one uncompressed run when none is given); when
  // given, every op's bytes on the compressed hop are measured too.
  std::vector<std::string> compress;
  std::vector<CodecRun> codecs;
  bool measure_wire() const { return !compress.empty() && hosts > 1; }
};

const std::map<std::string, int> kDtypes = {{"float32", GSYNC_FLOAT32}, {"float16", GSYNC_FLOAT16},
                                            {"bfloat16", GSYNC_BFLOAT16}, {"float64", GSYNC_FLOAT64},
                                            {"int32", GSYNC_INT32}};
const std::map<std::string, int> kOps = {{"sum", GSYNC_SUM}, {"avg", GSYNC_AVG},
                                         {"weighted_avg", GSYNC_WEIGHTED_AVG}, {"min", GSYNC_MIN},
                                         {"max", GSYNC_MAX}};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int connect(const Options& o, int rank, uint64_t arena, gsync_comm_t** comm) {
  const Place& p = o.places[size_t(rank)];
  if (!tools::pin_to(p.cpus)) {
    tools::report(fmt::format("error rank {}: pin to CPUs {}: {}\n", rank, tools::cpu_list(p.cpus),
                              strerror(errno)));
    return -1;
  }
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.socket_path = p.socket.c_str();
  std::string job = fmt::format("gsync-perf-{}", getppid());
  cfg.job_id = job.c_str();
  cfg.world_size = o.world();
  cfg.rank = rank;
  cfg.local_rank = p.local_rank;
  cfg.local_size = p.local_size;
  cfg.arena_bytes = arena;
  return gsync_connect(&cfg, comm);
}

// In a rank process: allreduce and wait, or report why not.
bool allreduce(gsync_comm_t* comm, uint64_t key, uint64_t step, void* buf, size_t count,
               const Options& o, int rank, const gsync_compression_t* codec = nullptr) {
  gsync_request_t* req = nullptr;
  gsync_allreduce_opts_t opts;
  gsync_allreduce_opts_init(&opts);
  opts.weight = rank + 1.0;
  if (codec) opts.compression = *codec;
  int rc = gsync_allreduce_ex(comm, key, step, buf, count, o.dtype_id, o.op_id, &opts, &req);
  if (rc == 0) rc = gsync_wait(req, -1);
  if (rc != 0) tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
  if (req) gsync_request_free(req);
  return rc == 0;
}

// Sums of small integers are exact in any order; a weighted average across
// hosts is folded in another order than the reference, so it may differ in
// the last bits.
bool same(double got, double want, const Options& o) {
  if (o.op_id != GSYNC_WEIGHTED_AVG || o.places.back().host == 0) return got == want;
  return std::abs(got - want) <= 1e-2 * std::max(1.0, std::abs(want));
}

size_t fill_and_count_wrong(void* buf, size_t count, const Options& o, int rank, bool check) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (!check)
      tools::store(buf, o.dtype_id, i, tools::test_value(rank, i));
    else if (!same(tools::load(buf, o.dtype_id, i), tools::expected(o.dtype_id, o.op_id, o.world(), i), o))
      wrong++;
  }
  return wrong;
}

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

// A barrier of the sweep, or a report of why not.
bool barrier(gsync_comm_t* comm, uint64_t* step, int rank) {
  if (gsync_barrier(comm, (*step)++, kBarrierTimeoutMs) == 0) return true;
  tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
  return false;
}

// A rank of the size sweep. Reports one line per size and codec:
// "size <bytes> <codec> <wrong> <relative error> <hash hi> <hash lo> <wire
// bytes> <logical bytes> <t_0 us> ... <t_S-1 us>", one time per op for each
// of S samples of k back-to-back ops after a barrier (tools/peers/sampling.h,
// the schedule the peer drivers use too). The first op of each is checked
// and, with --compress, bracketed by barriers so that the bytes its host's
// daemon put on the compressed hop are its alone.
int sweep_rank(const Options& o, int rank, const std::vector<uint64_t>& sizes) {
  gsync_comm_t* comm = nullptr;
  if (connect(o, rank, o.max_bytes + (16 << 20), &comm) != 0) {
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
  for (size_t s = 0; s < sizes.size(); s++) {
    size_t count = sizes[s] / elem;
    for (size_t ci = 0; ci < o.codecs.size(); ci++) {
      const CodecRun& codec = o.codecs[ci];
      const uint64_t key = s * o.codecs.size() + ci;
      fill_and_count_wrong(buf, count, o, rank, false);
      uint64_t step = 0;
      Payload before, after;
      if (o.measure_wire() && !barrier(comm, &barrier_step, rank)) return 1;
      if (measures) before = hop_payload(me.admin, codec.c);
      if (!allreduce(comm, key, step++, buf, count, o, rank, &codec.c)) return 1;
      if (o.measure_wire() && !barrier(comm, &barrier_step, rank)) return 1;
      if (measures) after = hop_payload(me.admin, codec.c);
      FirstOp first = check_first(buf, count, o, codec, rank);
      for (int w = 0; w < o.warmup; w++)
        if (!allreduce(comm, key, step++, buf, count, o, rank, &codec.c)) return 1;
      std::string line = fmt::format("size {} {} {} {:.9g} {} {} {} {}", sizes[s], ci, first.wrong,
                                     first.rel_error, first.hash >> 32, first.hash & 0xffffffffu,
                                     after.wire - before.wire, after.logical - before.logical);
      const int k = gsync_ops_per_sample(sizes[s]), samples = gsync_samples_for(o.iters, sizes[s]);
      for (int i = 0; i < samples; i++) {
        if (!barrier(comm, &barrier_step, rank)) return 1;
        auto t0 = Clock::now();
        for (int j = 0; j < k; j++)
          if (!allreduce(comm, key, step++, buf, count, o, rank, &codec.c)) return 1;
        double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        line += fmt::format(" {:.3f}", us / k);
      }
      tools::report(line + "\n");
    }
  }
  gsync_close(comm);
  return 0;
}

// A rank of the ResNet-50 workload. Reports "step <wrong> <us>" per step.
int workload_rank(const Options& o, int rank, const std::vector<size_t>& buckets) {
  size_t elem = tools::elem_size(o.dtype_id), total = 0;
  for (size_t b : buckets) total += b;
  gsync_comm_t* comm = nullptr;
  if (connect(o, rank, total * elem + (16 << 20), &comm) != 0) {
    tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
    return 1;
  }
  std::vector<void*> bufs(buckets.size());
  for (size_t b = 0; b < buckets.size(); b++) {
    if (gsync_alloc(comm, buckets[b] * elem, &bufs[b]) != 0) {
      tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
      return 1;
    }
  }
  for (int step = 0; step < o.steps; step++) {
    for (size_t b = 0; b < buckets.size(); b++) fill_and_count_wrong(bufs[b], buckets[b], o, rank, false);
    // As DDP does: every bucket handed over as soon as it is ready, then a
    // wait for all of them before the optimizer step.
    auto t0 = Clock::now();
    std::vector<gsync_request_t*> reqs(buckets.size());
    for (size_t b = 0; b < buckets.size(); b++) {
      if (gsync_allreduce(comm, b, static_cast<uint64_t>(step), bufs[b], buckets[b], o.dtype_id,
                          o.op_id, rank + 1.0, &reqs[b]) != 0) {
        tools::report(fmt::format("error rank {}: {}\n", rank, gsync_last_error()));
        return 1;
      }
    }
    for (auto* r : reqs) {
      if (gsync_wait(r, -1) != 0) {
        tools::report(fmt::format("error rank {}: {}\n", rank, gsync_request_error(r)));
        return 1;
      }
      gsync_request_free(r);
    }
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    size_t wrong = 0;
    for (size_t b = 0; b < buckets.size(); b++) wrong += fill_and_count_wrong(bufs[b], buckets[b], o, rank, true);
    tools::report(fmt::format("step {} {:.3f}\n", wrong, us));
  }
  gsync_close(comm);
  return 0;
}

// Per line kind, the ranks' reports as rows of numbers.
bool collect(const std::vector<tools::ChildResult>& res, const std::string& kind,
             std::vector<std::vector<std::vector<double>>>* rows) {
  bool ok = true;
  rows->assign(res.size(), {});
  for (size_t r = 0; r < res.size(); r++) {
    std::istringstream in(res[r].output);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string k;
      ls >> k;
      if (k == "error") {
        std::fprintf(stderr, "gsync-perf: %s\n", line.c_str());
        ok = false;
      } else if (k == kind) {
        std::vector<double> v;
        double x;
        while (ls >> x) v.push_back(x);
        (*rows)[r].push_back(v);
      }
    }
    if (res[r].code != 0) {
      std::fprintf(stderr, "gsync-perf: rank %zu exited with %d\n", r, res[r].code);
      ok = false;
    }
  }
  return ok;
}

double bus_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

// The algorithm the daemons use for a tensor of bytes (the same rule).
std::string algo_for(const Options& o, uint64_t bytes) {
  if (o.hosts <= 1) return "local";
  if (o.algo != "auto") return o.algo;
  std::vector<collective::Participant> parts;
  for (int h = 0; h < o.hosts; h++) parts.push_back({h, o.racks_of[size_t(h)]});
  return collective::algo_name(collective::choose_algo(parts, bytes));
}

// Peer results in the same run, for the ratio columns.
struct Peers {
  peers::Result gloo, mpi;
  double tcp_gbps = -1;
  double uplink_gbps = -1;  // one plain TCP stream across a shaped uplink
};

// The first host outside host 1's rack, or -1.
int first_host_elsewhere(const Options& o) {
  for (size_t h = 1; h < o.racks_of.size(); h++)
    if (o.racks_of[h] != o.racks_of[0]) return static_cast<int>(h);
  return -1;
}

// Racks in the run, from the host -> rack list.
int rack_count(const Options& o) {
  std::vector<std::string> seen;
  for (const auto& r : o.racks_of)
    if (std::find(seen.begin(), seen.end(), r) == seen.end()) seen.push_back(r);
  return static_cast<int>(seen.size());
}

// What every rack's uplink must carry each way for an allreduce of `bytes`
// across R racks: each rack holds one partial sum of the whole tensor, and
// a bandwidth-optimal exchange moves 2(R-1)/R of it over each uplink each
// way (S for two racks). 0 when the run is not shaped or has one rack.
double uplink_floor_bytes(const Options& o, double bytes) {
  int racks = rack_count(o);
  if (o.uplink_mbit == 0 || racks < 2) return 0;
  return 2.0 * (racks - 1) / racks * bytes;
}

// Those bytes at the nominal shaped rate: the time no algorithm can beat.
double uplink_floor_s(const Options& o, double bytes) {
  double floor_bytes = uplink_floor_bytes(o, bytes);
  return floor_bytes > 0 ? floor_bytes / (o.uplink_mbit * 1e6 / 8) : 0;
}

// One row of the sweep (a size, a codec) over all ranks.
struct Row {
  double us = 0;       // median over samples of the slowest rank's time per op
  uint64_t wrong = 0;  // elements wrong (for a codec: all, if its bound was broken)
  double rel_error = 0;  // the worst rank's relative error (a codec's first op)
  bool same_bits = true;  // every rank got the same bits
  double wire = 0, logical = 0;  // bytes per host on the compressed hop, one op
};

// The reports' fields: bytes, codec, wrong, error, hash hi, hash lo, wire,
// logical, then the samples' times.
constexpr size_t kFirstTime = 8;

Row row_of(const Options& o, const std::vector<std::vector<std::vector<double>>>& rows,
           size_t r, int samples) {
  Row out;
  std::vector<double> per_sample(static_cast<size_t>(samples), 0.0);
  double hash_hi = -1, hash_lo = -1;
  int measured = 0;
  for (const auto& rank_rows : rows) {
    if (r >= rank_rows.size() || rank_rows[r].size() < kFirstTime) continue;
    const auto& v = rank_rows[r];
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
    for (int i = 0; i < samples && size_t(i) + kFirstTime < v.size(); i++)
      per_sample[size_t(i)] = std::max(per_sample[size_t(i)], v[size_t(i) + kFirstTime]);
  }
  out.wire /= std::max(1, o.hosts);
  out.logical /= std::max(1, o.hosts);
  (void)measured;
  out.us = median(per_sample);
  return out;
}

int run_sweep(const Options& o, const MemoryReference& ref, const std::string& isa,
              const Peers& peer) {
  std::vector<uint64_t> sizes;
  size_t elem = tools::elem_size(o.dtype_id);
  for (uint64_t b = o.min_bytes; b <= o.max_bytes; b *= static_cast<uint64_t>(o.factor)) {
    sizes.push_back(b / elem * elem);
    if (o.factor < 2) break;
  }
  auto res = tools::run_ranks(o.world(), [&](int r) { return sweep_rank(o, r, sizes); }, 3600);
  std::vector<std::vector<std::vector<double>>> rows;
  bool ok = collect(res, "size", &rows);
  if (!o.json_out) {
    std::printf("# gsync-perf: %d hosts x %d ranks (world %d), %s %s, %d timed ops per size in "
                "samples of up to 32 after a barrier (+%d warm-up), kernels %s\n",
                o.hosts, o.ranks, o.world(), o.dtype.c_str(), o.op.c_str(), o.iters, o.warmup,
                isa.c_str());
    std::printf("# %12s %12s %9s %7s %12s %11s %11s %11s %7s %8s %8s%s\n", "bytes", "count",
                "dtype", "algo", "time_us", "algbw_GB/s", "busbw_GB/s", "reduce_GB/s", "wrong",
                "vs_gloo", "vs_mpi",
                o.compress.empty() ? ""
                                   : fmt::format(" {:>22} {:>10} {:>8} {:>9}", "compress",
                                                 "wire_MB", "x_fewer", "x_none")
                                         .c_str());
  }
  double last_reduce = 0;
  uint64_t wrong_total = 0;
  const size_t nc = o.codecs.size();
  for (size_t rix = 0; rix < sizes.size() * nc; rix++) {
    const size_t s = rix / nc, ci = rix % nc;
    const CodecRun& codec = o.codecs[ci];
    const int samples = gsync_samples_for(o.iters, sizes[s]);
    Row stats = row_of(o, rows, rix, samples);
    uint64_t wrong = stats.wrong;
    if (!stats.same_bits) {
      std::fprintf(stderr, "gsync-perf: %s at %llu bytes: the ranks ended with different bits\n",
                   codec.text.c_str(), static_cast<unsigned long long>(sizes[s]));
      wrong += sizes[s] / elem;
    }
    wrong_total += wrong;
    double us = stats.us;
    // Against the uncompressed row of the same size in this run: how many
    // times faster the codec made it.
    double vs_none = 0;
    for (size_t cj = 0; cj < nc; cj++)
      if (o.codecs[cj].none && cj != ci && us > 0)
        vs_none = row_of(o, rows, s * nc + cj, samples).us / us;
    double bytes = double(sizes[s]);
    double algbw = us > 0 ? bytes / us / 1e3 : 0;
    // Memory the local reduce moves: every rank's tensor read once and the
    // result written once into every rank's tensor (docs/reduce.md).
    double reduce_gbps = us > 0 ? 2.0 * o.ranks * bytes / us / 1e3 : 0;
    last_reduce = reduce_gbps;
    double busbw = algbw * bus_factor(o.world());
    auto ratio_to = [&](const peers::Result& r) {
      auto it = r.rows.find(sizes[s]);
      return it != r.rows.end() && it->second.busbw_gbps > 0 ? busbw / it->second.busbw_gbps : 0.0;
    };
    double vs_gloo = ratio_to(peer.gloo), vs_mpi = ratio_to(peer.mpi);
    std::string algo = algo_for(o, sizes[s]);
    if (o.json_out) {
      json row{{"bytes", sizes[s]}, {"count", sizes[s] / elem}, {"dtype", o.dtype}, {"op", o.op},
               {"hosts", o.hosts}, {"ranks", o.world()}, {"algo", algo}, {"time_us", us},
               {"algbw_gbps", algbw}, {"busbw_gbps", busbw}, {"reduce_gbps", reduce_gbps},
               {"wrong", wrong}, {"samples", samples},
               {"ops_per_sample", gsync_ops_per_sample(sizes[s])}, {"compress", codec.text}};
      if (!codec.none) row["rel_error"] = stats.rel_error;
      if (o.measure_wire()) {
        row["wire_bytes"] = stats.wire;
        row["logical_bytes"] = stats.logical;
      }
      if (vs_none > 0) row["vs_uncompressed"] = vs_none;
      if (!peer.gloo.rows.empty()) row["vs_gloo"] = vs_gloo;
      if (!peer.mpi.rows.empty()) row["vs_mpi"] = vs_mpi;
      if (peer.tcp_gbps > 0) row["tcp_fraction"] = o.hosts * busbw / peer.tcp_gbps;
      if (double floor = uplink_floor_s(o, bytes); floor > 0) {
        row["uplink_floor_s"] = floor;
        row["vs_uplink_floor"] = us / 1e6 / floor;
      }
      std::printf("%s\n", row.dump().c_str());
    } else {
      auto ratio_text = [](const peers::Result& r, double v) {
        return r.rows.empty() ? std::string("-") : fmt::format("{:.2f}", v);
      };
      std::string codec_cols;
      if (!o.compress.empty())
        codec_cols = fmt::format(
            " {:>22} {:>10.3f} {:>8} {:>9}", codec.text, stats.wire / 1e6,
            stats.wire > 0 ? fmt::format("{:.2f}", stats.logical / stats.wire) : "-",
            vs_none > 0 ? fmt::format("{:.2f}", vs_none) : "-");
      std::printf("  %12llu %12llu %9s %7s %12.1f %11.3f %11.3f %11.2f %7llu %8s %8s%s\n",
                  static_cast<unsigned long long>(sizes[s]),
                  static_cast<unsigned long long>(sizes[s] / elem), o.dtype.c_str(), algo.c_str(),
                  us, algbw, busbw, reduce_gbps, static_cast<unsigned long long>(wrong),
                  ratio_text(peer.gloo, vs_gloo).c_str(), ratio_text(peer.mpi, vs_mpi).c_str(),
                  codec_cols.c_str());
      if (double floor = uplink_floor_s(o, bytes); floor > 0) {
        // The same bytes at the rate a plain TCP stream got across the uplink.
        double stream_s = uplink_floor_bytes(o, bytes) / (peer.uplink_gbps * 1e9);
        std::string vs_stream =
            peer.uplink_gbps > 0
                ? fmt::format(" ({:.3f}x a plain stream's time across it)", us / 1e6 / stream_s)
                : "";
        std::printf("#   uplink floor for %llu bytes: %.3f s at %u Mbit/s; this took %.3fx it%s\n",
                    static_cast<unsigned long long>(sizes[s]), floor, o.uplink_mbit,
                    us / 1e6 / floor, vs_stream.c_str());
      }
    }
  }
  double ratio = ref.add_gbps > 0 ? last_reduce / ref.add_gbps : 0;
  if (o.json_out) {
    std::printf("%s\n", json{{"memcpy_gbps", ref.memcpy_gbps}, {"add_gbps", ref.add_gbps},
                             {"reduce_gbps", last_reduce}, {"reduce_vs_add", ratio},
                             {"reference_bytes", o.max_bytes}, {"isa", isa}, {"wrong", wrong_total},
                             {"tcp_stream_gbps", peer.tcp_gbps}, {"gloo_algo", peer.gloo.algo}}
                            .dump()
                            .c_str());
  } else {
    std::printf("# memory reference (1 thread, %llu MiB buffers): memcpy %.2f GB/s, fp32 a+=b %.2f "
                "GB/s\n",
                static_cast<unsigned long long>(o.max_bytes >> 20), ref.memcpy_gbps, ref.add_gbps);
    std::printf("# reduce at %llu MiB: %.2f GB/s of memory traffic = %.2f x the a+=b reference\n",
                static_cast<unsigned long long>(sizes.empty() ? 0 : sizes.back() >> 20), last_reduce,
                ratio);
    if (peer.tcp_gbps > 0)
      std::printf("# one plain TCP stream between hosts 1 and 2: %.2f GB/s (the ceiling T; "
                  "hosts x busbw / T is the fraction of it gsync reaches)\n",
                  peer.tcp_gbps);
    if (peer.uplink_gbps > 0)
      std::printf("# one plain TCP stream across the shaped uplink (host 1 to host %d): %.1f "
                  "Mbit/s of payload against %u nominal\n",
                  first_host_elsewhere(o) + 1, peer.uplink_gbps * 8e3, o.uplink_mbit);
    for (const auto* r : {&peer.gloo, &peer.mpi})
      if (!r->error.empty()) std::printf("# peer run failed: %s\n", r->error.c_str());
    std::printf("# wrong elements in total: %llu\n", static_cast<unsigned long long>(wrong_total));
  }
  return ok && wrong_total == 0 ? 0 : 1;
}

int run_workload(const Options& o) {
  auto tensors = resnet50_tensor_sizes();
  size_t elem = tools::elem_size(o.dtype_id), params = 0;
  for (size_t t : tensors) params += t;
  auto buckets = ddp_buckets(tensors, 25 << 20, elem);
  auto res = tools::run_ranks(o.world(), [&](int r) { return workload_rank(o, r, buckets); }, 3600);
  std::vector<std::vector<std::vector<double>>> rows;
  bool ok = collect(res, "step", &rows);
  std::vector<double> per_step(static_cast<size_t>(o.steps), 0.0);
  uint64_t wrong = 0;
  for (auto& rank_rows : rows)
    for (size_t s = 0; s < rank_rows.size() && s < per_step.size(); s++) {
      wrong += static_cast<uint64_t>(rank_rows[s][0]);
      per_step[s] = std::max(per_step[s], rank_rows[s][1]);
    }
  double bytes = double(params * elem);
  double us = median(per_step);
  // Step to step: the slowest step over the fastest (issue #16 wants it
  // under 1.5x: a spread says the workload does not get what the transport
  // can give, whatever the median says).
  double lo = per_step.empty() ? 0 : *std::min_element(per_step.begin(), per_step.end());
  double hi = per_step.empty() ? 0 : *std::max_element(per_step.begin(), per_step.end());
  double spread = lo > 0 ? hi / lo : 0;
  double algbw = us > 0 ? bytes / us / 1e3 : 0;
  if (o.json_out) {
    std::printf("%s\n", json{{"workload", "resnet50"}, {"ranks", o.world()}, {"tensors", tensors.size()},
                             {"params", params}, {"buckets", buckets.size()}, {"steps", o.steps},
                             {"bytes_per_step", params * elem}, {"step_comm_us", us},
                             {"algbw_gbps", algbw}, {"busbw_gbps", algbw * bus_factor(o.world())},
                             {"hosts", o.hosts}, {"wrong", wrong}, {"step_min_us", lo},
                             {"step_max_us", hi}, {"spread", spread}}
                            .dump()
                            .c_str());
  } else {
    std::printf("# ResNet-50 gradients: %zu tensors, %zu parameters (%.1f MB %s), %zu DDP buckets "
                "of <= 25 MiB, %d hosts x %d ranks, op %s\n",
                tensors.size(), params, bytes / 1e6, o.dtype.c_str(), buckets.size(), o.hosts,
                o.ranks, o.op.c_str());
    std::printf("# %6s %14s %12s %12s %8s\n", "step", "comm_time_us", "algbw_GB/s", "busbw_GB/s",
                "wrong");
    for (size_t s = 0; s < per_step.size(); s++) {
      double a = per_step[s] > 0 ? bytes / per_step[s] / 1e3 : 0;
      uint64_t w = 0;
      for (auto& rank_rows : rows)
        if (s < rank_rows.size()) w += static_cast<uint64_t>(rank_rows[s][0]);
      std::printf("  %6zu %14.1f %12.3f %12.3f %8llu\n", s, per_step[s], a, a * bus_factor(o.world()),
                  static_cast<unsigned long long>(w));
    }
    std::printf("# median step: %.1f us, algbw %.3f GB/s, busbw %.3f GB/s; spread %.2fx (slowest "
                "%.1f us / fastest %.1f us); every element of every step checked: %llu wrong\n",
                us, algbw, algbw * bus_factor(o.world()), spread, hi, lo,
                static_cast<unsigned long long>(wrong));
  }
  return ok && wrong == 0 ? 0 : 1;
}

std::string daemon_isa(const std::string& admin_socket) {
  std::string reply = tools::admin_query(admin_socket, "status");
  auto j = json::parse(reply, nullptr, false);
  return j.is_object() && j.contains("isa") ? j["isa"].get<std::string>() : "unknown";
}

}  // namespace
}  // namespace gsync::perf

// Ctrl-C, SIGTERM or SIGHUP while a test bed is up: tear it down (its
// daemons, namespaces and files) instead of leaving it behind. The signals
// are blocked in every thread and taken by a watcher thread; children
// unblock them (tools/common/procs.cc). g_bed_mu keeps the watcher and
// main's own teardown at the end from running at once: whichever takes it
// first tears down, and the process ends before the other gets it.
namespace {
std::mutex g_bed_mu;
gsync::testbed::Testbed* g_bed = nullptr;

void take_stop_signals() {
  static sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread([] {
    int sig = 0;
    sigwait(&stop, &sig);
    std::lock_guard<std::mutex> lock(g_bed_mu);
    std::fprintf(stderr, "\ngsync-perf: %s: tearing the test bed down\n", strsignal(sig));
    if (g_bed) g_bed->teardown();
    _exit(128 + sig);
  }).detach();
}
}  // namespace

int main(int argc, char** argv) {
  using namespace gsync;
  using namespace gsync::perf;
  Options o;
  std::string min_s = "4K", max_s = "256M", admin_socket;
  CLI::App app{"gsync-perf: allreduce benchmark through gsyncd (nccl-tests columns)"};
  app.add_option("--socket", o.socket, "daemon socket; none: start a private daemon");
  app.add_option("--admin-socket", admin_socket, "admin socket of that daemon (for its ISA)");
  app.add_option("-n,--ranks,--ranks-per-host", o.ranks, "rank processes per host")
      ->check(CLI::Range(1, 256));
  app.add_option("--hosts", o.hosts, "hosts of a test bed built for this run")
      ->check(CLI::Range(1, 64));
  app.add_option("--racks", o.racks, "racks of that test bed")->check(CLI::Range(1, 64));
  app.add_flag("--loopback", o.loopback, "test bed on 127.0.0.1 instead of namespaces");
  app.add_option("--uplink-mbit", o.uplink_mbit, "shape each rack's uplink (tbf), Mbit/s");
  app.add_flag("--pin", o.pin,
               "give each test bed host its own share of the CPUs (daemon, ranks, and the "
               "peers' ranks on that host)");
  app.add_option("--cluster", o.cluster, "drive a running cluster (with --sockets)");
  app.add_option("--sockets", o.sockets, "client sockets of the cluster's hosts, comma-separated");
  const std::string algos = "auto ring hier direct tree doubling";
  app.add_option("--algo", o.algo, algos + " (test bed daemons)");
  app.add_option("--compare", o.compare, "also run peers in the same run: gloo,mpi");
  app.add_option("--daemon-arg", o.daemon_args, "extra gsyncd argument for test bed daemons")
      ->allow_extra_args(false);
  app.add_option("-b,--min-bytes", min_s, "smallest size (K/M/G suffixes)");
  app.add_option("-e,--max-bytes", max_s, "largest size (K/M/G suffixes)");
  app.add_option("-f,--factor", o.factor, "size multiplier")->check(CLI::Range(1, 1024));
  app.add_option("-d,--dtype", o.dtype, "float32 float16 bfloat16 float64 int32");
  app.add_option("-o,--op", o.op, "sum avg weighted_avg min max");
  app.add_option("--iters", o.iters, "timed ops per size (rounded up to whole samples)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed iterations per size")->check(CLI::Range(0, 100000));
  app.add_flag("--json", o.json_out, "one JSON object per line");
  app.add_option("--compress", o.compress,
                 "run each size with this codec too (none fp16 bf16 int8[:BLOCK] "
                 "topk[:FRACTION], @cross_rack|@cross_host|@all, ,noef); may be given "
                 "several times: one row each")
      ->allow_extra_args(false);
  app.add_option("--workload", o.workload, "resnet50: ResNet-50 gradients in DDP buckets");
  app.add_option("--steps", o.steps, "steps of the workload")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  if (o.pin && (o.hosts < 2 || !o.cluster.empty())) {
    std::fprintf(stderr, "gsync-perf: --pin splits the CPUs among the hosts of a test bed built "
                         "for this run (--hosts N, N > 1)\n");
    return 2;
  }

  if (!parse_byte_size(min_s, &o.min_bytes) || !parse_byte_size(max_s, &o.max_bytes) ||
      o.min_bytes == 0 || o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "gsync-perf: bad size range '%s'..'%s'\n", min_s.c_str(), max_s.c_str());
    return 2;
  }
  if (!kDtypes.count(o.dtype) || !kOps.count(o.op)) {
    std::fprintf(stderr, "gsync-perf: unknown dtype '%s' or op '%s'\n", o.dtype.c_str(), o.op.c_str());
    return 2;
  }
  if (!o.workload.empty() && o.workload != "resnet50") {
    std::fprintf(stderr, "gsync-perf: unknown workload '%s' (known: resnet50)\n", o.workload.c_str());
    return 2;
  }
  collective::Algo unused;
  if (o.algo != "auto" && !collective::parse_algo(o.algo, &unused)) {
    std::fprintf(stderr, "gsync-perf: unknown --algo '%s' (%s)\n", o.algo.c_str(), algos.c_str());
    return 2;
  }
  o.dtype_id = kDtypes.at(o.dtype);
  o.op_id = kOps.at(o.op);
  std::string codec_error = parse_codecs(o.compress, &o.codecs);
  if (codec_error.empty()) codec_error = codecs_allowed(o.codecs, o.dtype_id, o.op_id);
  if (codec_error.empty() && !o.compress.empty() && !o.workload.empty())
    codec_error = "--compress is for the size sweep, not --workload";
  if (!codec_error.empty()) {
    std::fprintf(stderr, "gsync-perf: %s\n", codec_error.c_str());
    return 2;
  }

  // The reference is measured before any rank or daemon runs, on the
  // largest buffers of the sweep.
  MemoryReference ref;
  if (o.workload.empty()) ref = measure_memory(o.max_bytes, 5);

  std::unique_ptr<tools::DaemonProcess> daemon;
  std::unique_ptr<testbed::Testbed> bed;
  std::vector<peers::HostSlot> slots;  // per host, for peer drivers
  if (!o.cluster.empty()) {
    // A running cluster: ranks on every host, through the sockets given.
    std::vector<std::string> socks;
    std::stringstream ss(o.sockets);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty()) socks.push_back(item);
    if (socks.empty()) {
      std::fprintf(stderr, "gsync-perf: --cluster needs --sockets S1,S2,... (one per host)\n");
      return 2;
    }
    o.hosts = static_cast<int>(socks.size());
    ClusterFile cf;
    std::string first_id;
    if (Status st = load_cluster_file(o.cluster, "", &cf); !st) {
      // Not this machine's cluster (or several of its hosts are here, as on
      // a test bed): any host id will do to read the racks.
      ClusterFile probe;
      std::ifstream in(o.cluster);
      std::string line;
      while (std::getline(in, line) && first_id.empty())
        if (auto p = line.find("id = \""); p != std::string::npos)
          first_id = line.substr(p + 6, line.find('"', p + 6) - p - 6);
      if (Status st2 = load_cluster_file(o.cluster, first_id, &cf); !st2) {
        std::fprintf(stderr, "gsync-perf: %s\n", st2.message().c_str());
        return 2;
      }
    }
    if (cf.hosts.size() != socks.size()) {
      std::fprintf(stderr, "gsync-perf: %zu sockets for %zu hosts in %s\n", socks.size(),
                   cf.hosts.size(), o.cluster.c_str());
      return 2;
    }
    for (int h = 0; h < o.hosts; h++) {
      o.racks_of.push_back(cf.hosts[size_t(h)].rack);
      for (int k = 0; k < o.ranks; k++)
        o.places.push_back({socks[size_t(h)], h, h * o.ranks + k, k, o.ranks, {}, {}});
    }
  } else if (o.hosts > 1) {
    take_stop_signals();
    testbed::Options t;
    t.hosts = o.hosts;
    t.racks = std::min(o.racks, o.hosts);
    t.loopback = o.loopback;
    t.uplink_mbit = o.uplink_mbit;
    t.pin = o.pin;
    t.log_level = "warn";
    if (o.algo != "auto") t.daemon_args = {"--algo", o.algo};
    t.daemon_args.insert(t.daemon_args.end(), o.daemon_args.begin(), o.daemon_args.end());
    if (Status st = testbed::Testbed::create(t, &bed); !st) {
      std::fprintf(stderr, "gsync-perf: cannot build the test bed: %s\n", st.message().c_str());
      return 1;
    }
    {
      std::lock_guard<std::mutex> lock(g_bed_mu);
      g_bed = bed.get();
    }
    if (!o.json_out)
      std::printf("# test bed: %d hosts in %d racks, %s%s\n", o.hosts, t.racks,
                  bed->namespaces() ? "network namespaces" : "loopback",
                  o.uplink_mbit ? fmt::format(", uplinks {} Mbit/s", o.uplink_mbit).c_str() : "");
    std::string pins;
    for (int h = 0; h < o.hosts; h++) {
      o.racks_of.push_back(bed->rack(h));
      slots.push_back({bed->netns(h), bed->address(h), bed->cpus(h)});
      for (int k = 0; k < o.ranks; k++)
        o.places.push_back(
            {bed->socket(h), h, h * o.ranks + k, k, o.ranks, bed->cpus(h), bed->admin_socket(h)});
      pins += fmt::format("{}{} {}", h ? ", " : "", bed->host_id(h), tools::cpu_list(bed->cpus(h)));
    }
    if (o.pin && !o.json_out) std::printf("# hosts pinned to CPUs: %s\n", pins.c_str());
    admin_socket = bed->admin_socket(0);
  } else {
    if (o.socket.empty()) {
      try {
        daemon = std::make_unique<tools::DaemonProcess>(std::vector<std::string>{}, "", "warn");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gsync-perf: cannot start a private gsyncd: %s\n", e.what());
        return 1;
      }
      o.socket = daemon->socket();
      admin_socket = daemon->admin_socket();
    }
    o.racks_of = {"r1"};
    for (int k = 0; k < o.ranks; k++) o.places.push_back({o.socket, 0, k, k, o.ranks, {}, admin_socket});
  }
  std::string isa = admin_socket.empty() ? "unknown" : daemon_isa(admin_socket);

  // Peers run before gsync, each alone on the machine, over the same hosts.
  Peers peer;
  if (o.workload.empty()) {
    int timeout = 600;
    // The peers' ranks where gsync's are: rank i on the host of place i.
    std::vector<peers::HostSlot> rank_slots;
    for (const auto& p : o.places)
      rank_slots.push_back(slots.empty() ? peers::HostSlot{} : slots[size_t(p.host)]);
    if (o.compare.find("gloo") != std::string::npos)
      peer.gloo = peers::run_gloo(rank_slots, o.min_bytes, o.max_bytes, o.iters, timeout);
    if (o.compare.find("mpi") != std::string::npos)
      peer.mpi = peers::run_mpi_tcp(rank_slots, o.min_bytes, o.max_bytes, o.iters, timeout);
    if (slots.size() >= 2) peer.tcp_gbps = peers::tcp_stream_gbps(slots[0], slots[1], 2.0);
    if (int far = first_host_elsewhere(o); o.uplink_mbit > 0 && far > 0 && size_t(far) < slots.size())
      peer.uplink_gbps = peers::tcp_stream_gbps(slots[0], slots[size_t(far)], 3.0);
  }
  int rc = o.workload.empty() ? run_sweep(o, ref, isa, peer) : run_workload(o);
  if (daemon) {
    int st = daemon->stop();
    if (st != 0) std::fprintf(stderr, "gsync-perf: private gsyncd exited with %d\n", st);
  }
  std::lock_guard<std::mutex> lock(g_bed_mu);
  std::fflush(stdout);
  bed.reset();
  g_bed = nullptr;
  return rc;
}
