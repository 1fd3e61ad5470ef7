// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf's size sweep, printed (perf.h's run_sweep): a row per size and
// variant in nccl-tests' columns (or a JSON object each with --json),
// against the peers of the same run and the uplink's floor, then the
// memory reference and the totals. The rows come from sweep.cc.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/collective/schedule.h"
#include "tools/common/reference.h"
#include "tools/peers/sampling.h"
#include "tools/perf/sweep.h"

namespace gsync::perf {

namespace {
using nlohmann::json;

// The algorithm the daemons use for a tensor of bytes (the same rule).
std::string algo_for(const Options& o, uint64_t bytes) {
  if (o.hosts <= 1) return "local";
  if (o.algo != "auto") return o.algo;
  std::vector<collective::Participant> parts;
  for (int h = 0; h < o.hosts; h++) parts.push_back({h, o.racks_of[size_t(h)]});
  return collective::algo_name(collective::choose_algo(parts, bytes));
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

// The table's header lines (none with --json).
void print_header(const Options& o, const std::string& isa) {
  std::printf("# gsync-perf: %d hosts x %d ranks (world %d), %s %s, %d timed ops per size in "
              "samples of up to 32 after a barrier (+%d warm-up), kernels %s\n",
              o.hosts, o.ranks, o.world(), o.dtype.c_str(), o.op.c_str(), o.iters, o.warmup,
              isa.c_str());
  std::string extra;
  if (!o.compress.empty())
    extra = fmt::format(" {:>22} {:>10} {:>8} {:>9}", "compress", "wire_MB", "x_fewer", "x_none");
  if (o.reproducible)
    extra = fmt::format(" {:>12} {:>10} {:>9} {:>9}", "mode", "wire_MB", "x_time", "x_wire");
  if (o.ps) extra = fmt::format(" {:>10} {:>12}", "collective", "x_allreduce");
  if (o.cpu)
    extra += fmt::format(" {:>9} {:>10} {:>11} {:>10}", "cpu_s/GB", "cpu_us/op", "cpu_vs_gloo",
                         "cpu_vs_mpi");
  std::printf("# %12s %12s %9s %7s %12s %11s %11s %11s %7s %8s %8s%s\n", "bytes", "count", "dtype",
              "algo", "time_us", "algbw_GB/s", "busbw_GB/s", "reduce_GB/s", "wrong", "vs_gloo",
              "vs_mpi", extra.c_str());
}

// One size and variant of the sweep, where it is printed.
struct RowPlace {
  uint64_t size = 0, count = 0;
  const Variant* variant = nullptr;
  const CodecRun* codec = nullptr;
  const char* collective = "";  // "allreduce" or "push_pull"
  std::string algo;
  int samples = 0;
};

// A row some rank did not finish: no time, and its first op was not
// checked. Said as such, never as a clean row: the first three such ranks'
// errors.
void print_unfinished(const Options& o, const RowPlace& p, const SweepRow& stats,
                      const Reports& rows, const std::vector<std::string>& errors, size_t rix) {
  std::string why;
  for (int r = 0, named = 0; r < o.world() && named < 3; r++)
    if (const auto& mine = rows[size_t(r)];
        (mine.size() <= rix || mine[rix].size() < kFirstTime) && !errors[size_t(r)].empty())
      why += (named++ ? "; " : "") + errors[size_t(r)];
  if (why.empty()) why = "no report (a rank ended early)";
  const std::string what = fmt::format("{} of {} ranks did not finish it: {}",
                                       o.world() - stats.reported, o.world(), why);
  if (o.json_out)
    std::printf("%s\n", json{{"bytes", p.size}, {"count", p.count}, {"dtype", o.dtype},
                             {"collective", p.collective}, {"hosts", o.hosts},
                             {"ranks", o.world()}, {"algo", p.algo}, {"compress", p.codec->text},
                             {"checked_ops", stats.reported}, {"error", what}}
                            .dump()
                            .c_str());
  else
    std::printf("  %12llu %12llu %9s %7s FAILED: %s\n", static_cast<unsigned long long>(p.size),
                static_cast<unsigned long long>(p.count), o.dtype.c_str(), p.algo.c_str(),
                what.c_str());
}

// A finished row's figures, as both the table and --json print them.
struct Figures {
  uint64_t wrong = 0;
  double us = 0, algbw = 0, busbw = 0, reduce_gbps = 0;
  // Against the uncompressed allreduce of the same size in this run: how
  // many times faster the codec made it, or (push_pull) how the parameter
  // server's time compares with it. 0: no such row.
  double vs_none = 0, vs_allreduce = 0;
  // A reproducible row: its time and wire bytes over the default row's.
  double time_vs_default = 0, wire_vs_default = 0;
  double vs_gloo = 0, vs_mpi = 0;
  // --cpu: the CPU the timed ops cost, per GB of tensor (bytes x ops), and
  // each peer's at this size (sampling.h); -1 where not known.
  int timed_ops = 0;
  double cpu_per_gb = -1, gloo_cpu = -1, mpi_cpu = -1;
  double cpu_ratio(double theirs) const {
    return cpu_per_gb >= 0 && theirs > 0 ? cpu_per_gb / theirs : -1.0;
  }
};

Figures figures_of(const Options& o, const Peers& peer, const RowPlace& p, const SweepRow& stats,
                   const std::vector<Variant>& variants, const Reports& rows, size_t s,
                   size_t vi) {
  Figures f;
  f.wrong = stats.wrong;
  if (!stats.same_bits) {
    std::fprintf(stderr, "gsync-perf: %s at %llu bytes: the ranks ended with different bits\n",
                 p.codec->text.c_str(), static_cast<unsigned long long>(p.size));
    f.wrong += p.count;
  }
  const double us = f.us = stats.us;
  const size_t nv = variants.size();
  for (size_t vj = 0; vj < nv; vj++) {
    if (vj == vi || variants[vj].push_pull || !o.codecs[variants[vj].codec].none || us <= 0)
      continue;
    if (variants[vj].reproducible) continue;
    const SweepRow plain = sweep_row(o, rows, s * nv + vj, p.samples);
    (p.variant->push_pull ? f.vs_allreduce : f.vs_none) = plain.us / us;
    if (p.variant->reproducible) {
      f.time_vs_default = plain.us > 0 ? us / plain.us : 0;
      f.wire_vs_default = plain.wire > 0 ? stats.wire / plain.wire : 0;
    }
  }
  double bytes = double(p.size);
  f.algbw = us > 0 ? bytes / us / 1e3 : 0;
  // Memory the local reduce moves: every rank's tensor read once and the
  // result written once into every rank's tensor (docs/reduce.md).
  f.reduce_gbps = us > 0 ? 2.0 * o.ranks * bytes / us / 1e3 : 0;
  f.busbw = f.algbw * bus_factor(o.world());
  auto ratio_to = [&](const peers::Result& r) {
    auto it = r.rows.find(p.size);
    return it != r.rows.end() && it->second.busbw_gbps > 0 ? f.busbw / it->second.busbw_gbps : 0.0;
  };
  f.vs_gloo = ratio_to(peer.gloo);
  f.vs_mpi = ratio_to(peer.mpi);
  f.timed_ops = p.samples * gsync_ops_per_sample(p.size);
  f.cpu_per_gb = stats.cpu_s >= 0 ? stats.cpu_s / (bytes * f.timed_ops / 1e9) : -1;
  auto peer_cpu = [&](const peers::Result& r) {
    auto it = r.rows.find(p.size);
    return it != r.rows.end() ? it->second.cpu_s_per_gb() : -1.0;
  };
  f.gloo_cpu = peer_cpu(peer.gloo);
  f.mpi_cpu = peer_cpu(peer.mpi);
  return f;
}

void print_json_row(const Options& o, const Peers& peer, const RowPlace& p, const SweepRow& stats,
                    const Figures& f) {
  const CodecRun& codec = *p.codec;
  const double bytes = double(p.size);
  json row{{"bytes", p.size}, {"count", p.count}, {"dtype", o.dtype},
           {"op", p.variant->push_pull ? "weighted_avg" : o.op}, {"collective", p.collective},
           {"hosts", o.hosts}, {"ranks", o.world()}, {"algo", p.algo}, {"time_us", f.us},
           {"algbw_gbps", f.algbw}, {"busbw_gbps", f.busbw}, {"reduce_gbps", f.reduce_gbps},
           {"wrong", f.wrong}, {"checked_ops", stats.reported}, {"samples", p.samples},
           {"ops_per_sample", gsync_ops_per_sample(p.size)}, {"compress", codec.text}};
  if (!codec.none) row["rel_error"] = stats.rel_error;
  if (o.measure_wire()) {
    row["wire_bytes"] = stats.wire;
    row["logical_bytes"] = stats.logical;
  }
  if (p.variant->reproducible) {
    row["reproducible"] = true;
    if (f.time_vs_default > 0) row["time_vs_default"] = f.time_vs_default;
    if (f.wire_vs_default > 0) row["wire_vs_default"] = f.wire_vs_default;
  } else if (f.vs_none > 0) {
    row["vs_uncompressed"] = f.vs_none;
  }
  // The allreduce's time over the push_pull's: at least 0.9 is the goal.
  if (f.vs_allreduce > 0) row["vs_allreduce"] = f.vs_allreduce;
  if (!peer.gloo.rows.empty()) row["vs_gloo"] = f.vs_gloo;
  if (!peer.mpi.rows.empty()) row["vs_mpi"] = f.vs_mpi;
  if (o.cpu && f.cpu_per_gb >= 0) {
    row["cpu_s_per_gb"] = f.cpu_per_gb;
    row["cpu_us_per_op"] = stats.cpu_s / f.timed_ops * 1e6;
    row["rank_cpu_us_per_op"] = stats.cpu_ranks / f.timed_ops * 1e6;
    row["daemon_cpu_us_per_op"] = stats.cpu_daemons / f.timed_ops * 1e6;
    // Per op: the figure small ops are judged by (bytes cancel out).
    if (f.gloo_cpu >= 0) {
      row["gloo_cpu_s_per_gb"] = f.gloo_cpu;
      row["gloo_cpu_us_per_op"] = f.gloo_cpu * bytes / 1e9 * 1e6;
      row["cpu_vs_gloo"] = f.cpu_ratio(f.gloo_cpu);
    }
    if (f.mpi_cpu >= 0) {
      row["mpi_cpu_s_per_gb"] = f.mpi_cpu;
      row["mpi_cpu_us_per_op"] = f.mpi_cpu * bytes / 1e9 * 1e6;
      row["cpu_vs_mpi"] = f.cpu_ratio(f.mpi_cpu);
    }
  }
  if (peer.tcp_gbps > 0) row["tcp_fraction"] = o.hosts * f.busbw / peer.tcp_gbps;
  if (double floor = uplink_floor_s(o, bytes); floor > 0) {
    row["uplink_floor_s"] = floor;
    row["vs_uplink_floor"] = f.us / 1e6 / floor;
  }
  std::printf("%s\n", row.dump().c_str());
}

void print_text_row(const Options& o, const Peers& peer, const RowPlace& p, const SweepRow& stats,
                    const Figures& f) {
  const CodecRun& codec = *p.codec;
  const double bytes = double(p.size);
  auto ratio_text = [](const peers::Result& r, double v) {
    return r.rows.empty() ? std::string("-") : fmt::format("{:.2f}", v);
  };
  std::string codec_cols;
  if (!o.compress.empty())
    codec_cols = fmt::format(" {:>22} {:>10.3f} {:>8} {:>9}", codec.text, stats.wire / 1e6,
                             stats.wire > 0 ? fmt::format("{:.2f}", stats.logical / stats.wire)
                                            : "-",
                             f.vs_none > 0 ? fmt::format("{:.2f}", f.vs_none) : "-");
  if (o.reproducible)
    codec_cols = fmt::format(" {:>12} {:>10.3f} {:>9} {:>9}",
                             p.variant->reproducible ? "reproducible" : "default", stats.wire / 1e6,
                             f.time_vs_default > 0 ? fmt::format("{:.2f}", f.time_vs_default) : "-",
                             f.wire_vs_default > 0 ? fmt::format("{:.2f}", f.wire_vs_default) : "-");
  if (o.ps)
    codec_cols = fmt::format(" {:>10} {:>12}", p.collective,
                             f.vs_allreduce > 0 ? fmt::format("{:.2f}", f.vs_allreduce) : "-");
  if (o.cpu) {
    auto num = [](double v, const char* format) {
      return v >= 0 ? fmt::format(fmt::runtime(format), v) : std::string("-");
    };
    codec_cols += fmt::format(
        " {:>9} {:>10} {:>11} {:>10}", num(f.cpu_per_gb, "{:.3f}"),
        num(stats.cpu_s >= 0 ? stats.cpu_s / f.timed_ops * 1e6 : -1, "{:.1f}"),
        num(f.cpu_ratio(f.gloo_cpu), "{:.2f}"), num(f.cpu_ratio(f.mpi_cpu), "{:.2f}"));
  }
  std::printf("  %12llu %12llu %9s %7s %12.1f %11.3f %11.3f %11.2f %7llu %8s %8s%s\n",
              static_cast<unsigned long long>(p.size), static_cast<unsigned long long>(p.count),
              o.dtype.c_str(), p.algo.c_str(), f.us, f.algbw, f.busbw, f.reduce_gbps,
              static_cast<unsigned long long>(f.wrong), ratio_text(peer.gloo, f.vs_gloo).c_str(),
              ratio_text(peer.mpi, f.vs_mpi).c_str(), codec_cols.c_str());
  if (double floor = uplink_floor_s(o, bytes); floor > 0) {
    // The same bytes at the rate a plain TCP stream got across the uplink.
    double stream_s = uplink_floor_bytes(o, bytes) / (peer.uplink_gbps * 1e9);
    std::string vs_stream =
        peer.uplink_gbps > 0
            ? fmt::format(" ({:.3f}x a plain stream's time across it)", f.us / 1e6 / stream_s)
            : "";
    std::printf("#   uplink floor for %llu bytes: %.3f s at %u Mbit/s; this took %.3fx it%s\n",
                static_cast<unsigned long long>(p.size), floor, o.uplink_mbit, f.us / 1e6 / floor,
                vs_stream.c_str());
  }
}

// What the rows add up to, for the summary.
struct Totals {
  double last_reduce = 0;  // the largest size's reduce GB/s
  uint64_t wrong = 0, checked = 0;
  int failed_rows = 0;
};

void print_summary(const Options& o, const MemoryReference& ref, const std::string& isa,
                   const Peers& peer, const std::vector<uint64_t>& sizes, const Totals& t) {
  double ratio = ref.add_gbps > 0 ? t.last_reduce / ref.add_gbps : 0;
  if (o.json_out) {
    json j{{"memcpy_gbps", ref.memcpy_gbps},
           {"add_gbps", ref.add_gbps},
           {"reduce_gbps", t.last_reduce},
           {"reduce_vs_add", ratio},
           {"reference_bytes", o.max_bytes},
           {"isa", isa},
           {"wrong", t.wrong},
           {"checked_ops", t.checked},
           {"failed_rows", t.failed_rows},
           {"tcp_stream_gbps", peer.tcp_gbps},
           {"gloo_algo", peer.gloo.algo}};
    // Why a --compare peer has no vs_ figure (the text's "# peer run failed").
    if (!peer.gloo.error.empty()) j["gloo_error"] = peer.gloo.error;
    if (!peer.mpi.error.empty()) j["mpi_error"] = peer.mpi.error;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("# memory reference (1 thread, %llu MiB buffers): memcpy %.2f GB/s, fp32 a+=b %.2f "
              "GB/s\n",
              static_cast<unsigned long long>(o.max_bytes >> 20), ref.memcpy_gbps, ref.add_gbps);
  std::printf("# reduce at %llu MiB: %.2f GB/s of memory traffic = %.2f x the a+=b reference\n",
              static_cast<unsigned long long>(sizes.empty() ? 0 : sizes.back() >> 20),
              t.last_reduce, ratio);
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
              static_cast<unsigned long long>(t.wrong), static_cast<unsigned long long>(t.checked));
  if (t.failed_rows > 0)
    std::printf("# FAILED: %d row%s did not finish on every rank (above)\n", t.failed_rows,
                t.failed_rows == 1 ? "" : "s");
}

// --plot: a line per variant.
std::vector<PlotLine> plot_lines(const Options& o, const std::vector<Variant>& variants) {
  std::vector<PlotLine> plotted;
  for (const Variant& v : variants)
    plotted.push_back({v.push_pull                 ? "gsync push_pull"
                       : v.reproducible         ? "gsync reproducible"
                       : o.codecs[v.codec].none ? "gsync"
                                                : "gsync " + o.codecs[v.codec].text,
                       {}});
  return plotted;
}

}  // namespace

int first_host_elsewhere(const Options& o) {
  for (size_t h = 1; h < o.racks_of.size(); h++)
    if (o.racks_of[h] != o.racks_of[0]) return static_cast<int>(h);
  return -1;
}

int run_sweep(const Options& o, const MemoryReference& ref, const std::string& isa,
              const Peers& peer) {
  const std::vector<uint64_t> sizes = sweep_sizes(o);
  size_t elem = tools::elem_size(o.dtype_id);
  auto res = run_sweep_ranks(o, sizes);
  Reports rows;
  bool ok = collect(res, "size", &rows);
  const std::vector<std::string> errors = rank_errors(res);
  if (!o.json_out) print_header(o, isa);
  Totals totals;
  const std::vector<Variant> variants = variants_of(o);
  const size_t nv = variants.size();
  std::vector<PlotLine> plotted = plot_lines(o, variants);
  for (size_t rix = 0; rix < sizes.size() * nv; rix++) {
    const size_t s = rix / nv, vi = rix % nv;
    RowPlace p;
    p.size = sizes[s];
    p.count = sizes[s] / elem;
    p.variant = &variants[vi];
    p.codec = &o.codecs[p.variant->codec];
    p.collective = p.variant->push_pull ? "push_pull" : "allreduce";
    p.samples = gsync_samples_for(o.iters, sizes[s]);
    SweepRow stats = sweep_row(o, rows, rix, p.samples);
    p.algo = p.variant->push_pull ? "ps" : algo_for(o, sizes[s]);
    if (stats.reported < o.world()) {
      totals.failed_rows++;
      print_unfinished(o, p, stats, rows, errors, rix);
      continue;
    }
    totals.checked += static_cast<uint64_t>(stats.reported);
    const Figures f = figures_of(o, peer, p, stats, variants, rows, s, vi);
    totals.wrong += f.wrong;
    totals.last_reduce = f.reduce_gbps;
    plotted[vi].points.emplace_back(sizes[s], f.busbw);
    if (o.json_out)
      print_json_row(o, peer, p, stats, f);
    else
      print_text_row(o, peer, p, stats, f);
  }
  if (!o.plot.empty() && !plot_sweep(o, std::move(plotted), peer)) ok = false;
  print_summary(o, ref, isa, peer, sizes, totals);
  return ok && totals.wrong == 0 && totals.failed_rows == 0 ? 0 : 1;
}

}  // namespace gsync::perf
