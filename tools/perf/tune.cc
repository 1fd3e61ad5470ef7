// SPDX-License-Identifier: Apache-2.0
//
// gsync-perf --tune: the A/B test the daemons cannot run inside a job
// (docs/algorithms.md, "Tuning"). Every candidate plan - an algorithm and a
// chunk size - runs the whole size sweep as a job of its own (the job's
// plan, gsync_config_t.algorithm/chunk_bytes), all in this one run; the
// fastest per size becomes the tuning table, written to --tune-out and
// loaded into every daemon of the run (admin `tune-load`). A job created
// after that plans its ops with it.
//
// --autotune-check then runs the sweep once more as a job that chooses
// nothing, so the daemons plan by the table, interleaved with the winners
// and the rule's picks measured again, and prints per size the tuned time
// against the best of those fixed plans.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/collective/schedule.h"
#include "tools/common/procs.h"
#include "tools/perf/perf.h"

namespace gsync::perf {

namespace {
using nlohmann::json;

struct Candidate {
  std::string algo;
  uint64_t chunk = 0;  // 0: the algorithm's own rule
  std::string name() const {
    if (algo.empty()) return "tuned";
    return chunk ? fmt::format("{}/{}K", algo, chunk >> 10) : algo + "/rule";
  }
};

// What is worth trying on these hosts: every algorithm with its own chunk
// rule, and the pipelined ones (ring, hier) with chunks from 64 KiB to
// 4 MiB too (their rule picks 256 KiB to 4 MiB by size).
std::vector<Candidate> candidates(const Options& o) {
  std::vector<Candidate> out;
  bool racks = false;
  for (const auto& r : o.racks_of) racks |= r != o.racks_of[0];
  std::vector<std::string> piped = {"ring"};
  if (racks) piped.push_back("hier");
  for (const auto& a : piped)
    for (uint64_t c : {uint64_t{0}, uint64_t{64} << 10, uint64_t{1} << 20, uint64_t{4} << 20})
      out.push_back({a, c});
  for (const char* a : {"direct", "tree", "doubling"}) out.push_back({a, 0});
  return out;
}

struct Measured {
  std::vector<std::vector<double>> us;  // by candidate, by size: median over the rounds
  std::vector<size_t> best;             // by size: the fastest candidate
  // By candidate, by size, by round: each round's time.
  std::vector<std::vector<std::vector<double>>> rounds;
};

// The median of a candidate's rounds of one parity (0: even, 1: odd).
double half_median(const std::vector<double>& rounds, int parity) {
  std::vector<double> half;
  for (size_t r = static_cast<size_t>(parity); r < rounds.size(); r += 2) half.push_back(rounds[r]);
  return half.empty() ? median(rounds) : median(half);
}

// Each candidate (plan; empty algo: the daemons choose) over every size,
// in rounds - every candidate once per round, in an order shuffled anew
// each round (seeded: --tune-seed) - so that a slow spell of this shared
// machine falls on all of them alike and none always follows the same
// one; the median over the rounds.
// after(c) runs right after each run of candidate c.
bool measure_rounds(const Options& o, const std::vector<Candidate>& cands,
                    const std::vector<uint64_t>& sizes, const std::string& tag, Measured* m,
                    const std::function<void(size_t)>& after = nullptr) {
  std::vector<std::vector<std::vector<double>>> runs(
      cands.size(), std::vector<std::vector<double>>(sizes.size()));
  std::mt19937 rng(o.tune_seed);
  std::vector<size_t> order(cands.size());
  for (int round = 0; round < o.tune_rounds; round++) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t c : order) {
      Options oc = o;
      oc.plan_algo = cands[c].algo;
      oc.plan_chunk = cands[c].chunk;
      oc.job_tag = fmt::format("-{}{}-{}", tag, c, round);
      std::vector<double> us;
      if (!measure_sizes(oc, sizes, &us)) {
        std::fprintf(stderr, "gsync-perf --tune: candidate %s failed\n", cands[c].name().c_str());
        return false;
      }
      for (size_t s = 0; s < sizes.size(); s++) runs[c][s].push_back(us[s]);
      if (after) after(c);
    }
    if (!o.json_out) std::printf("# %s round %d of %d measured\n", tag.c_str(), round + 1, o.tune_rounds);
    std::fflush(stdout);
  }
  m->us.assign(cands.size(), std::vector<double>(sizes.size()));
  m->rounds = runs;
  m->best.clear();
  for (size_t s = 0; s < sizes.size(); s++) {
    size_t best = 0;
    for (size_t c = 0; c < cands.size(); c++) {
      m->us[c][s] = median(runs[c][s]);
      if (m->us[c][s] < m->us[best][s]) best = c;
    }
    m->best.push_back(best);
  }
  return true;
}

// The candidate the daemons' built-in rule would pick at this size.
size_t rule_candidate(const Options& o, const std::vector<Candidate>& cands, uint64_t bytes) {
  std::vector<collective::Participant> parts;
  for (int h = 0; h < o.hosts; h++) parts.push_back({h, o.racks_of[size_t(h)]});
  const std::string algo = collective::algo_name(collective::choose_algo(parts, bytes));
  for (size_t c = 0; c < cands.size(); c++)
    if (cands[c].algo == algo && cands[c].chunk == 0) return c;
  return 0;
}

// A winner must beat the rule by more than kMargin to replace it: what is
// within the noise of this machine stays as the daemons would do anyway.
constexpr double kMargin = 0.03;

void prefer_rule(const Options& o, const std::vector<Candidate>& cands,
                 const std::vector<uint64_t>& sizes, Measured* m) {
  for (size_t s = 0; s < sizes.size(); s++) {
    const size_t rule = rule_candidate(o, cands, sizes[s]);
    if (m->us[rule][s] <= (1 + kMargin) * m->us[m->best[s]][s]) m->best[s] = rule;
  }
}

json table_of(const Options& o, const std::vector<Candidate>& cands,
              const std::vector<uint64_t>& sizes, const Measured& m) {
  json entries = json::array();
  for (size_t s = 0; s < sizes.size(); s++) {
    const Candidate& c = cands[m.best[s]];
    entries.push_back({{"hosts", o.host_ids},
                       {"bytes", sizes[s]},
                       {"algorithm", c.algo},
                       {"chunk_bytes", c.chunk},
                       {"us", m.us[m.best[s]][s]}});
  }
  return json{{"format", 1}, {"entries", entries}};
}

// Into every daemon of the run whose admin socket is known; false if one
// refused it.
bool load_everywhere(const Options& o, const std::string& file) {
  char abs[PATH_MAX];
  if (realpath(file.c_str(), abs) == nullptr) return false;
  std::vector<std::string> admins;
  for (const Place& p : o.places)
    if (!p.admin.empty() && std::find(admins.begin(), admins.end(), p.admin) == admins.end())
      admins.push_back(p.admin);
  if (admins.empty()) {
    std::printf("# no admin sockets known: load %s on every host with gsyncctl tune load\n", abs);
    return true;
  }
  for (const std::string& a : admins) {
    json reply = json::parse(tools::admin_query(a, std::string("tune-load ") + abs), nullptr, false);
    if (!reply.is_object() || reply.contains("error")) {
      std::fprintf(stderr, "gsync-perf --tune: %s refused the table: %s\n", a.c_str(),
                   reply.is_object() ? reply["error"].dump().c_str() : "no answer");
      return false;
    }
  }
  if (!o.json_out) std::printf("# tuning table %s loaded into %zu daemons\n", abs, admins.size());
  return true;
}

void print_tuned(const Options& o, const std::vector<Candidate>& cands,
                 const std::vector<uint64_t>& sizes, const Measured& m) {
  if (o.json_out) return;
  std::printf("# %12s %-14s %12s %s\n", "bytes", "tuned plan", "time_us", "all candidates (us)");
  for (size_t s = 0; s < sizes.size(); s++) {
    std::string all;
    for (size_t c = 0; c < cands.size(); c++)
      all += fmt::format(" {}={:.1f}", cands[c].name(), m.us[c][s]);
    std::printf("  %12llu %-14s %12.1f%s\n", static_cast<unsigned long long>(sizes[s]),
                cands[m.best[s]].name().c_str(), m.us[m.best[s]][s], all.c_str());
  }
}

// Whether the daemons did plan the tuned runs' ops by the table: right
// after each tuned run, of its ops in host 1's recent ops (gsyncctl ops),
// those whose plan says "tuned".
struct TunedOps {
  size_t seen = 0, tuned = 0;
  void count(const Options& o) {
    if (o.places.empty() || o.places[0].admin.empty()) return;
    json ops = json::parse(tools::admin_query(o.places[0].admin, "ops"), nullptr, false);
    if (!ops.is_object() || !ops["recent"].is_array()) return;
    for (const auto& e : ops["recent"]) {
      if (!e.is_object()) continue;
      const std::string job = e.value("job", ""), plan = e.value("plan", "");
      if (job.find("-check0-") == std::string::npos || e.value("op", "") != "allreduce") continue;
      seen++;
      if (plan.size() >= 7 && plan.compare(plan.size() - 7, 7, "; tuned") == 0) tuned++;
    }
  }
  // true when every one was (or there is no admin socket to ask).
  bool all(const Options& o) const {
    if (!o.json_out)
      std::printf("# host 1 planned %zu of the tuned runs' %zu allreduces it still held by its "
                  "tuning table\n",
                  tuned, seen);
    return o.places.empty() || o.places[0].admin.empty() || (seen > 0 && tuned == seen);
  }
};

// The tuned daemons against the winners of the tuning, measured again in
// the same interleaved rounds: per size, tuned / the best of them. 0 when
// every size is within 5%.
int check(const Options& o, const std::vector<Candidate>& cands, const std::vector<uint64_t>& sizes,
          const Measured& tuned_by) {
  std::vector<Candidate> again = {{"", 0}};  // first: the tuned daemons choose
  std::vector<size_t> fixed = tuned_by.best;  // the winners, and what the rule picks
  for (uint64_t bytes : sizes) fixed.push_back(rule_candidate(o, cands, bytes));
  for (size_t b : fixed) {
    bool seen = false;
    for (const auto& c : again) seen |= c.algo == cands[b].algo && c.chunk == cands[b].chunk;
    if (!seen) again.push_back(cands[b]);
  }
  Measured m;
  TunedOps planned;
  if (!measure_rounds(o, again, sizes, "check", &m, [&](size_t c) {
        if (c == 0) planned.count(o);
      }))
    return 1;
  const bool by_table = planned.all(o);
  int outside = 0;
  if (!o.json_out)
    std::printf("# autotune check: %12s %-14s %-14s %10s %10s %9s\n", "bytes", "tuned plan",
                "best fixed", "best_us", "tuned_us", "x_best");
  // The best fixed plan is picked on the even rounds and compared with the
  // tuned daemons on the odd ones: the fastest of several plans measured
  // in the same rounds is the luckiest as often as the best, and against
  // that minimum even the same plan measured twice comes out slower (on
  // this 2-core machine 4 KiB ops move 30% between runs, and the tuned
  // daemons came out 14-24% behind their own plan run as a fixed one).
  // With one round both are that round.
  const int pick = 0, judge = o.tune_rounds > 1 ? 1 : 0;
  for (size_t s = 0; s < sizes.size(); s++) {
    size_t best = 1;
    for (size_t c = 2; c < again.size(); c++)
      if (half_median(m.rounds[c][s], pick) < half_median(m.rounds[best][s], pick)) best = c;
    const double tuned = half_median(m.rounds[0][s], judge),
                 fixed_us = half_median(m.rounds[best][s], judge), x_best = tuned / fixed_us;
    if (x_best > 1.05) outside++;
    const std::string plan = cands[tuned_by.best[s]].name(), fixed = again[best].name();
    if (o.json_out)
      std::printf("%s\n", json{{"autotune_check", true}, {"bytes", sizes[s]}, {"tuned_plan", plan},
                               {"best_fixed", fixed}, {"best_us", fixed_us},
                               {"tuned_us", tuned}, {"tuned_vs_best", x_best}}
                              .dump()
                              .c_str());
    else
      std::printf("  %28llu %-14s %-14s %10.1f %10.1f %9.3f%s\n",
                  static_cast<unsigned long long>(sizes[s]), plan.c_str(), fixed.c_str(),
                  fixed_us, tuned, x_best, x_best > 1.05 ? "  (over 5%)" : "");
  }
  if (!o.json_out)
    std::printf("# %d of %zu sizes more than 5%% slower tuned than the best fixed plan, both "
                "measured in the same interleaved rounds (the best picked on the even rounds, "
                "compared on the odd)\n",
                outside, sizes.size());
  if (!by_table) {
    std::fprintf(stderr, "gsync-perf --autotune-check: the daemons did not plan every op of the "
                         "tuned run by the table\n");
    return 1;
  }
  return outside == 0 ? 0 : 3;
}
}  // namespace

int run_tune(const Options& o) {
  if (o.hosts < 2 || o.host_ids.size() != static_cast<size_t>(o.hosts)) {
    std::fprintf(stderr, "gsync-perf: --tune needs hosts (--hosts N or --cluster), N > 1\n");
    return 2;
  }
  const std::vector<uint64_t> sizes = sweep_sizes(o);
  const std::vector<Candidate> cands = candidates(o);
  if (!o.json_out)
    std::printf("# tuning: %zu candidate plans x %zu sizes, %d hosts x %d ranks\n", cands.size(),
                sizes.size(), o.hosts, o.ranks);
  Measured m;
  if (!measure_rounds(o, cands, sizes, "tune", &m)) return 1;
  prefer_rule(o, cands, sizes, &m);
  print_tuned(o, cands, sizes, m);
  std::ofstream out(o.tune_out);
  out << table_of(o, cands, sizes, m).dump(1) << "\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "gsync-perf --tune: cannot write %s\n", o.tune_out.c_str());
    return 1;
  }
  if (!load_everywhere(o, o.tune_out)) return 1;
  return o.autotune_check ? check(o, cands, sizes, m) : 0;
}

}  // namespace gsync::perf
