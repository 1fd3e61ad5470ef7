// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf's size sweep in nccl-tests' columns: every size (and, with
// --compress, every codec) timed the way the peer drivers time theirs
// (tools/peers/sampling.h), against the peers and the uplink's floor.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/collective/schedule.h"
#include "tools/common/reference.h"
#include "tools/peers/sampling.h"
#include "tools/perf/perf.h"

namespace gsync::perf {

namespace {
using nlohmann::json;

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

// The runs of each size: the allreduce once per codec and, with --ps, a
// parameter server's push_pull (which takes no codec: codec 0 is "none").
struct Variant {
  bool push_pull = false;
  size_t codec = 0;
};

std::vector<Variant> variants_of(const Options& o) {
  std::vector<Variant> out;
  for (size_t c = 0; c < o.codecs.size(); c++) out.push_back({false, c});
  if (o.ps) out.push_back({true, 0});
  return out;
}

// Parameter keys live apart from the allreduce keys of the same sweep.
constexpr uint64_t kPsKeyBase = uint64_t{1} << 40;

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
  const uint64_t arena = (o.ps ? 2 * o.max_bytes : o.max_bytes) + (16 << 20);
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
      const uint64_t key = v.push_pull ? kPsKeyBase + s : s * o.codecs.size() + v.codec;
      uint64_t step = 0;
      auto op = [&] {
        return v.push_pull ? push_pull(comm, key, step++, buf, count, o, rank)
                           : allreduce(comm, key, step++, buf, count, o, rank, &codec.c);
      };
      if (v.push_pull) {
        std::memset(buf, 0, sizes[s]);
        if (!ps_declare(comm, key, buf, count, o, rank)) return 1;
      }
      fill_and_count_wrong(buf, count, o, rank, false);
      Payload before, after;
      if (o.measure_wire() && !barrier(comm, &barrier_step, rank)) return 1;
      if (measures) before = hop_payload(me.admin, codec.c);
      if (!op()) return 1;
      if (o.measure_wire() && !barrier(comm, &barrier_step, rank)) return 1;
      if (measures) after = hop_payload(me.admin, codec.c);
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

// The algorithm the daemons use for a tensor of bytes (the same rule).
std::string algo_for(const Options& o, uint64_t bytes) {
  if (o.hosts <= 1) return "local";
  if (o.algo != "auto") return o.algo;
  std::vector<collective::Participant> parts;
  for (int h = 0; h < o.hosts; h++) parts.push_back({h, o.racks_of[size_t(h)]});
  return collective::algo_name(collective::choose_algo(parts, bytes));
}

}  // namespace

int first_host_elsewhere(const Options& o) {
  for (size_t h = 1; h < o.racks_of.size(); h++)
    if (o.racks_of[h] != o.racks_of[0]) return static_cast<int>(h);
  return -1;
}

// Racks in the run, from the host -> rack list.
namespace {
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

}  // namespace

namespace {
// One row of the sweep (a size, a codec) over all ranks.
struct Row {
  double us = 0;       // median over samples of the slowest rank's time per op
  uint64_t wrong = 0;  // elements wrong (for a codec: all, if its bound was broken)
  double rel_error = 0;  // the worst rank's relative error (a codec's first op)
  bool same_bits = true;  // every rank got the same bits
  double wire = 0, logical = 0;  // bytes per host on the compressed hop, one op
  int reported = 0;  // ranks that finished the row (and checked its first op)
  double cpu_s = 0;  // ranks' and daemons' CPU over the samples; -1: a daemon's unknown
  double cpu_ranks = 0, cpu_daemons = 0;  // its two parts
};

// The reports' fields: bytes, codec, wrong, error, hash hi, hash lo, wire,
// logical, rank cpu, daemon cpu, then the samples' times.
constexpr size_t kFirstTime = 10;

Row row_of(const Options& o, const std::vector<std::vector<std::vector<double>>>& rows,
           size_t r, int samples) {
  Row out;
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

}  // namespace

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
  auto res = tools::run_ranks(o.world(), [&](int r) { return sweep_rank(o, r, sizes); }, 3600);
  std::vector<std::vector<std::vector<double>>> rows;
  bool ok = collect(res, "size", &rows);
  const size_t nv = variants_of(o).size();
  us->clear();
  for (size_t s = 0; s < sizes.size(); s++) {
    Row r = row_of(o, rows, s * nv, gsync_samples_for(o.iters, sizes[s]));
    ok = ok && r.reported == o.world() && r.wrong == 0 && r.same_bits && r.us > 0;
    us->push_back(r.us);
  }
  return ok;
}

int run_sweep(const Options& o, const MemoryReference& ref, const std::string& isa,
              const Peers& peer) {
  const std::vector<uint64_t> sizes = sweep_sizes(o);
  size_t elem = tools::elem_size(o.dtype_id);
  auto res = tools::run_ranks(o.world(), [&](int r) { return sweep_rank(o, r, sizes); }, 3600);
  std::vector<std::vector<std::vector<double>>> rows;
  bool ok = collect(res, "size", &rows);
  const std::vector<std::string> errors = rank_errors(res);
  if (!o.json_out) {
    std::printf("# gsync-perf: %d hosts x %d ranks (world %d), %s %s, %d timed ops per size in "
                "samples of up to 32 after a barrier (+%d warm-up), kernels %s\n",
                o.hosts, o.ranks, o.world(), o.dtype.c_str(), o.op.c_str(), o.iters, o.warmup,
                isa.c_str());
    std::string extra;
    if (!o.compress.empty())
      extra = fmt::format(" {:>22} {:>10} {:>8} {:>9}", "compress", "wire_MB", "x_fewer", "x_none");
    if (o.ps) extra = fmt::format(" {:>10} {:>12}", "collective", "x_allreduce");
    if (o.cpu) extra += fmt::format(" {:>9} {:>10} {:>11} {:>10}", "cpu_s/GB", "cpu_us/op",
                                    "cpu_vs_gloo", "cpu_vs_mpi");
    std::printf("# %12s %12s %9s %7s %12s %11s %11s %11s %7s %8s %8s%s\n", "bytes", "count",
                "dtype", "algo", "time_us", "algbw_GB/s", "busbw_GB/s", "reduce_GB/s", "wrong",
                "vs_gloo", "vs_mpi", extra.c_str());
  }
  double last_reduce = 0;
  uint64_t wrong_total = 0, checked_total = 0;
  int failed_rows = 0;
  const std::vector<Variant> variants = variants_of(o);
  const size_t nv = variants.size();
  std::vector<PlotLine> plotted;  // --plot: a line per variant
  for (const Variant& v : variants)
    plotted.push_back({v.push_pull                 ? "gsync push_pull"
                       : o.codecs[v.codec].none ? "gsync"
                                                : "gsync " + o.codecs[v.codec].text,
                       {}});
  for (size_t rix = 0; rix < sizes.size() * nv; rix++) {
    const size_t s = rix / nv, vi = rix % nv;
    const Variant& variant = variants[vi];
    const CodecRun& codec = o.codecs[variant.codec];
    const char* collective = variant.push_pull ? "push_pull" : "allreduce";
    const int samples = gsync_samples_for(o.iters, sizes[s]);
    Row stats = row_of(o, rows, rix, samples);
    std::string algo = variant.push_pull ? "ps" : algo_for(o, sizes[s]);
    if (stats.reported < o.world()) {
      // A rank that did not finish the row: no time, and its first op was
      // not checked. Said as such, never as a clean row.
      failed_rows++;
      std::string why;
      for (int r = 0, named = 0; r < o.world() && named < 3; r++)
        if (const auto& mine = rows[size_t(r)];
            (mine.size() <= rix || mine[rix].size() < kFirstTime) && !errors[size_t(r)].empty())
          why += (named++ ? "; " : "") + errors[size_t(r)];
      if (why.empty()) why = "no report (a rank ended early)";
      const std::string what = fmt::format("{} of {} ranks did not finish it: {}",
                                           o.world() - stats.reported, o.world(), why);
      if (o.json_out)
        std::printf("%s\n", json{{"bytes", sizes[s]}, {"count", sizes[s] / elem},
                                 {"dtype", o.dtype}, {"collective", collective},
                                 {"hosts", o.hosts}, {"ranks", o.world()}, {"algo", algo},
                                 {"compress", codec.text}, {"checked_ops", stats.reported},
                                 {"error", what}}
                                .dump()
                                .c_str());
      else
        std::printf("  %12llu %12llu %9s %7s FAILED: %s\n",
                    static_cast<unsigned long long>(sizes[s]),
                    static_cast<unsigned long long>(sizes[s] / elem), o.dtype.c_str(),
                    algo.c_str(), what.c_str());
      continue;
    }
    checked_total += static_cast<uint64_t>(stats.reported);
    uint64_t wrong = stats.wrong;
    if (!stats.same_bits) {
      std::fprintf(stderr, "gsync-perf: %s at %llu bytes: the ranks ended with different bits\n",
                   codec.text.c_str(), static_cast<unsigned long long>(sizes[s]));
      wrong += sizes[s] / elem;
    }
    wrong_total += wrong;
    double us = stats.us;
    // Against the uncompressed allreduce of the same size in this run: how
    // many times faster the codec made it, or (push_pull) how the parameter
    // server's time compares with it.
    double vs_none = 0, vs_allreduce = 0;
    for (size_t vj = 0; vj < nv; vj++) {
      if (vj == vi || variants[vj].push_pull || !o.codecs[variants[vj].codec].none || us <= 0)
        continue;
      double other = row_of(o, rows, s * nv + vj, samples).us / us;
      (variant.push_pull ? vs_allreduce : vs_none) = other;
    }
    double bytes = double(sizes[s]);
    double algbw = us > 0 ? bytes / us / 1e3 : 0;
    // Memory the local reduce moves: every rank's tensor read once and the
    // result written once into every rank's tensor (docs/reduce.md).
    double reduce_gbps = us > 0 ? 2.0 * o.ranks * bytes / us / 1e3 : 0;
    last_reduce = reduce_gbps;
    double busbw = algbw * bus_factor(o.world());
    plotted[vi].points.emplace_back(sizes[s], busbw);
    auto ratio_to = [&](const peers::Result& r) {
      auto it = r.rows.find(sizes[s]);
      return it != r.rows.end() && it->second.busbw_gbps > 0 ? busbw / it->second.busbw_gbps : 0.0;
    };
    double vs_gloo = ratio_to(peer.gloo), vs_mpi = ratio_to(peer.mpi);
    // --cpu: the CPU the timed ops cost, per GB of tensor (bytes x ops) and
    // per op, and against each peer's at this size (sampling.h).
    const int timed_ops = samples * gsync_ops_per_sample(sizes[s]);
    const double cpu_per_gb = stats.cpu_s >= 0 ? stats.cpu_s / (bytes * timed_ops / 1e9) : -1;
    auto peer_cpu = [&](const peers::Result& r) {
      auto it = r.rows.find(sizes[s]);
      return it != r.rows.end() ? it->second.cpu_s_per_gb() : -1.0;
    };
    const double gloo_cpu = peer_cpu(peer.gloo), mpi_cpu = peer_cpu(peer.mpi);
    auto cpu_ratio = [&](double theirs) {
      return cpu_per_gb >= 0 && theirs > 0 ? cpu_per_gb / theirs : -1.0;
    };
    if (o.json_out) {
      json row{{"bytes", sizes[s]}, {"count", sizes[s] / elem}, {"dtype", o.dtype},
               {"op", variant.push_pull ? "weighted_avg" : o.op}, {"collective", collective},
               {"hosts", o.hosts}, {"ranks", o.world()}, {"algo", algo}, {"time_us", us},
               {"algbw_gbps", algbw}, {"busbw_gbps", busbw}, {"reduce_gbps", reduce_gbps},
               {"wrong", wrong}, {"checked_ops", stats.reported}, {"samples", samples},
               {"ops_per_sample", gsync_ops_per_sample(sizes[s])}, {"compress", codec.text}};
      if (!codec.none) row["rel_error"] = stats.rel_error;
      if (o.measure_wire()) {
        row["wire_bytes"] = stats.wire;
        row["logical_bytes"] = stats.logical;
      }
      if (vs_none > 0) row["vs_uncompressed"] = vs_none;
      // The allreduce's time over the push_pull's: at least 0.9 is the goal.
      if (vs_allreduce > 0) row["vs_allreduce"] = vs_allreduce;
      if (!peer.gloo.rows.empty()) row["vs_gloo"] = vs_gloo;
      if (!peer.mpi.rows.empty()) row["vs_mpi"] = vs_mpi;
      if (o.cpu && cpu_per_gb >= 0) {
        row["cpu_s_per_gb"] = cpu_per_gb;
        row["cpu_us_per_op"] = stats.cpu_s / timed_ops * 1e6;
        row["rank_cpu_us_per_op"] = stats.cpu_ranks / timed_ops * 1e6;
        row["daemon_cpu_us_per_op"] = stats.cpu_daemons / timed_ops * 1e6;
        // Per op: the figure small ops are judged by (bytes cancel out).
        if (gloo_cpu >= 0) {
          row["gloo_cpu_s_per_gb"] = gloo_cpu;
          row["gloo_cpu_us_per_op"] = gloo_cpu * bytes / 1e9 * 1e6;
          row["cpu_vs_gloo"] = cpu_ratio(gloo_cpu);
        }
        if (mpi_cpu >= 0) {
          row["mpi_cpu_s_per_gb"] = mpi_cpu;
          row["mpi_cpu_us_per_op"] = mpi_cpu * bytes / 1e9 * 1e6;
          row["cpu_vs_mpi"] = cpu_ratio(mpi_cpu);
        }
      }
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
      if (o.ps)
        codec_cols = fmt::format(" {:>10} {:>12}", collective,
                                 vs_allreduce > 0 ? fmt::format("{:.2f}", vs_allreduce) : "-");
      if (o.cpu) {
        auto num = [](double v, const char* f) {
          return v >= 0 ? fmt::format(fmt::runtime(f), v) : std::string("-");
        };
        codec_cols += fmt::format(" {:>9} {:>10} {:>11} {:>10}", num(cpu_per_gb, "{:.3f}"),
                                  num(stats.cpu_s >= 0 ? stats.cpu_s / timed_ops * 1e6 : -1,
                                      "{:.1f}"),
                                  num(cpu_ratio(gloo_cpu), "{:.2f}"),
                                  num(cpu_ratio(mpi_cpu), "{:.2f}"));
      }
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
  if (!o.plot.empty() && !plot_sweep(o, std::move(plotted), peer)) ok = false;
  double ratio = ref.add_gbps > 0 ? last_reduce / ref.add_gbps : 0;
  if (o.json_out) {
    std::printf("%s\n", json{{"memcpy_gbps", ref.memcpy_gbps}, {"add_gbps", ref.add_gbps},
                             {"reduce_gbps", last_reduce}, {"reduce_vs_add", ratio},
                             {"reference_bytes", o.max_bytes}, {"isa", isa}, {"wrong", wrong_total},
                             {"checked_ops", checked_total}, {"failed_rows", failed_rows},
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
    // Every element of the first op of each size on every rank is checked.
    std::printf("# wrong elements in total: %llu (every element of %llu checked ops: each "
                "row's first op on every rank)\n",
                static_cast<unsigned long long>(wrong_total),
                static_cast<unsigned long long>(checked_total));
    if (failed_rows > 0)
      std::printf("# FAILED: %d row%s did not finish on every rank (above)\n", failed_rows,
                  failed_rows == 1 ? "" : "s");
  }
  return ok && wrong_total == 0 && failed_rows == 0 ? 0 : 1;
}

}  // namespace gsync::perf
