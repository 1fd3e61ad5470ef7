// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl jobs and jobs --stragglers (render.h): a job's row, its
// parameter-server keys, checkpoints and batch leases, and who lags.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "protocol/admin_jobs.h"
#include "tools/gsyncctl/render.h"
#include "tools/gsyncctl/render_fields.h"
#include "tools/gsyncctl/table.h"

namespace gsync::cli {

namespace {

using fields::bytes;
using fields::field;
using fields::gbps;
using fields::kMissing;
using fields::seconds;
using fields::text;
using nlohmann::json;
namespace k = admin::jobs;

// A key's checkpoints, indented under it: "  checkpoints: last clock 40,
// 2.1 s ago, 4.0 MiB in 0.031 s; 4 taken, 0 failed, 0 skipped; resumed
// from clock 20", and the last error when there is one.
std::string render_checkpoint(const json& c) {
  if (!c.is_object()) return "";
  std::string out = "  checkpoints: ";
  const json& last = field(c, k::kLast);
  if (last.is_object()) {
    const json& age = field(last, k::kAgeS);
    const json& dur = field(last, k::kDurationS);
    out += fmt::format("last clock {}, {} ago, {} in {}", text(field(last, k::kClock)),
                       age.is_number() ? fmt::format("{:.1f} s", age.get<double>()) : kMissing,
                       bytes(field(last, k::kBytes)),
                       dur.is_number() ? fmt::format("{:.3f} s", dur.get<double>()) : kMissing);
  } else {
    out += "none written yet";
  }
  out += fmt::format("; {} taken, {} failed, {} skipped", text(field(c, k::kTaken)),
                     text(field(c, k::kFailed)), text(field(c, k::kSkipped)));
  const json& resumed = field(c, k::kResumedFrom);
  if (resumed.is_number() && resumed.get<uint64_t>() != 0)
    out += fmt::format("; resumed from clock {}", resumed.get<uint64_t>());
  out += "\n";
  const json& err = field(c, k::kLastError);
  if (err.is_string()) out += fmt::format("  checkpoint error: {}\n", err.get<std::string>());
  return out;
}

// A parameter-server job's keys as this host serves them, a line each:
// "job train key 3 (sgd (lr 0.1), ssp:2): serves [0, 512) of 1024 float32;
// clocks h1 12, h2 11 (slowest h2); pulls waited h1 0.8 s, h2 0.0 s; 46
// updates (23.0/s), 1 pulls waiting".
std::string render_parameters(const json& job) {
  const json& keys = field(job, k::kParameters);
  if (!keys.is_array()) return "";
  std::string out;
  for (const json& key : keys) {
    std::string clocks;
    const json& wc = field(key, k::kWorkerClocks);
    if (wc.is_object())
      for (auto it = wc.begin(); it != wc.end(); ++it)
        clocks += fmt::format("{}{} {}", clocks.empty() ? "" : ", ", it.key(), text(it.value()));
    std::string waited;
    const json& pw = field(key, k::kPullWaitS);
    if (pw.is_object())
      for (auto it = pw.begin(); it != pw.end(); ++it)
        waited += fmt::format("{}{} {} s", waited.empty() ? "" : ", ", it.key(),
                              it.value().is_number() ? fmt::format("{:.1f}", it.value().get<double>())
                                                     : std::string(kMissing));
    const json& rate = field(key, k::kUpdatesPerS);
    const json& shard = field(key, k::kShard);
    std::string range = shard.is_array() && shard.size() == 2
                            ? fmt::format("[{}, {})", text(shard[0]), text(shard[1]))
                            : std::string(kMissing);
    out += fmt::format("job {} key {} ({}, {}): serves {} of {} {}; clocks {} (slowest {}); "
                       "pulls waited {}; {} updates ({}/s), {} pulls waiting\n",
                       text(field(job, k::kJob)), text(field(key, k::kKey)),
                       text(field(key, k::kOptimizer)),
                       text(field(key, k::kSync)), range, text(field(key, k::kCount)),
                       text(field(key, k::kDtype)), clocks.empty() ? std::string(kMissing) : clocks,
                       text(field(key, k::kSlowestWorker)),
                       waited.empty() ? std::string(kMissing) : waited,
                       text(field(key, k::kUpdates)),
                       rate.is_number() ? fmt::format("{:.1f}", rate.get<double>())
                                        : std::string(kMissing),
                       text(field(key, k::kPullsWaiting)));
    out += render_checkpoint(field(key, k::kCheckpoint));
  }
  return out;
}

// A job's batch leases: "job train leases (keeper h1): 3 departed; epoch 0:
// 64 batches, 40 settled, 2 outstanding, 1 reassigned, 22 free"; the
// epochs only on the keeper.
std::string render_leases(const json& job) {
  const json& l = field(job, k::kLeases);
  if (!l.is_object() || l.empty()) return "";
  std::string out = fmt::format("job {} leases (keeper {}): {} leased here, {} departed",
                                text(field(job, k::kJob)), text(field(l, k::kKeeper)),
                                text(field(l, k::kLeased)), text(field(job, k::kDepartures)));
  const json& epochs = field(l, k::kEpochs);
  if (epochs.is_array())
    for (const json& e : epochs)
      out += fmt::format("; epoch {}: {} batches, {} settled, {} outstanding, {} reassigned, {} "
                         "free",
                         text(field(e, k::kEpoch)), text(field(e, k::kBatches)),
                         text(field(e, k::kSettled)), text(field(e, k::kOutstanding)),
                         text(field(e, k::kReassigned)), text(field(e, k::kFree)));
  return out + "\n";
}

// "job J: rank 2 (pid 4711) is the straggler: last in 97% of 256 ops,
// 41.2 ms after the first (median; p99 45.0 ms)", when one is.
std::string render_straggler(const json& job) {
  const json& s = field(job, k::kStragglers);
  const json& who = field(s, k::kStraggler);
  if (!who.is_number()) return "";
  for (const json& r : field(s, k::kRanks)) {
    if (field(r, k::kRank) != who) continue;
    auto num = [&](const char* name) {
      const json& v = field(r, name);
      return v.is_number() ? v.get<double>() : 0.0;
    };
    return fmt::format("job {}: rank {} (pid {}) is the straggler: last in {:.0f}% of {} ops, "
                       "{:.1f} ms after the first (median; p99 {:.1f} ms)\n",
                       text(field(job, k::kJob)), text(who), text(field(r, k::kPid)),
                       100 * num(k::kLastShare), text(field(s, k::kOps)), 1e3 * num(k::kMedianLagS),
                       1e3 * num(k::kP99LagS));
  }
  return "";
}

// "job J: host h2 is last in 90% of 256 ops by a median 40.1 ms (p99
// 44.0 ms)", when one host of a job on several is the straggler.
std::string render_host_straggler(const json& job) {
  const json& s = field(job, k::kStragglers);
  const json& who = field(s, k::kHostStraggler);
  if (!who.is_string()) return "";
  for (const json& h : field(s, k::kHosts)) {
    if (field(h, k::kHost) != who) continue;
    auto num = [&](const char* name) {
      const json& v = field(h, name);
      return v.is_number() ? v.get<double>() : 0.0;
    };
    return fmt::format("job {}: host {} is last in {:.0f}% of {} ops by a median {:.1f} ms "
                       "(p99 {:.1f} ms)\n",
                       text(field(job, k::kJob)), text(who), 100 * num(k::kLastShare),
                       text(field(s, k::kHostOps)), 1e3 * num(k::kLagMedianS),
                       1e3 * num(k::kLagP99S));
  }
  return "";
}

// The second table of --stragglers: a job's hosts, each behind the first
// host ready (as this daemon's clock saw them).
std::string render_host_lags(const json& job) {
  const json& s = field(job, k::kStragglers);
  const json& hosts = field(s, k::kHosts);
  if (!hosts.is_array() || hosts.empty()) return "";
  auto ms = [](const json& v) {
    return v.is_number() ? fmt::format("{:.2f} ms", 1e3 * v.get<double>()) : std::string(kMissing);
  };
  std::vector<Row> rows;
  for (const json& h : hosts) {
    const json& share = field(h, k::kLastShare);
    rows.push_back({"  " + text(field(h, k::kHost)) + (field(h, k::kSelf) == true ? " (this)" : ""),
                    ms(field(h, k::kLagMedianS)), ms(field(h, k::kLagP99S)),
                    share.is_number() ? fmt::format("{:.0f}%", 100 * share.get<double>())
                                      : std::string(kMissing)});
  }
  return fmt::format("  hosts, over {} cross-host ops (lag behind the first host ready):\n",
                     text(field(s, k::kHostOps))) +
         format_table({{"  HOST"},
                       {"LAG MEDIAN", Align::kRight},
                       {"LAG P99", Align::kRight},
                       {"LAST IN", Align::kRight}},
                      rows) +
         render_host_straggler(job);
}
}  // namespace

std::string render_stragglers(const json& reply) {
  const json& jobs = field(reply, k::kJobs);
  if (!jobs.is_array() || jobs.empty()) return "no jobs\n";
  std::string out;
  for (const json& job : jobs) {
    const json& s = field(job, k::kStragglers);
    out += fmt::format("job {}: {} ops with every local rank\n", text(field(job, k::kJob)),
                       text(field(s, k::kOps)));
    const json& ranks = field(s, k::kRanks);
    if (ranks.is_array())
      for (const json& r : ranks) {
        auto ms = [&](const char* name) {
          const json& v = field(r, name);
          return v.is_number() ? fmt::format("{:.2f} ms", 1e3 * v.get<double>())
                               : std::string(kMissing);
        };
        const json& share = field(r, k::kLastShare);
        out += fmt::format("  rank {} (local {}, pid {}): {} after the first (median), {} (p99); "
                           "last in {}\n",
                           text(field(r, k::kRank)), text(field(r, k::kLocalRank)),
                           text(field(r, k::kPid)), ms(k::kMedianLagS), ms(k::kP99LagS),
                           share.is_number() ? fmt::format("{:.0f}%", 100 * share.get<double>())
                                             : std::string(kMissing));
      }
    out += render_straggler(job) + render_host_lags(job);
  }
  return out;
}

std::string render_jobs(const json& reply) {
  const json& jobs = field(reply, k::kJobs);
  if (!jobs.is_array() || jobs.empty()) return "no jobs\n";
  std::vector<Row> rows;
  for (const json& job : jobs) {
    const json& ranks = field(job, k::kRanks);
    size_t connected = 0;
    std::string dead;
    if (ranks.is_array()) {
      for (const json& r : ranks) {
        std::string state = text(field(r, k::kState));
        if (state == k::kConnected) ++connected;
        if (state != k::kDead) continue;
        if (!dead.empty()) dead += ',';
        dead += text(field(r, k::kRank));
      }
    }
    std::string last_error = text(field(job, k::kLastError));
    rows.push_back({
        text(field(job, k::kJob)),
        text(field(job, k::kWorldSize)),
        fmt::format("{}/{}", connected, text(field(job, k::kLocalSize))),
        dead.empty() ? std::string(kMissing) : dead,
        text(field(job, k::kOpsCompleted)),
        text(field(job, k::kOpsFailed)),
        text(field(job, k::kOpsInFlight)),
        bytes(field(job, k::kBytesReduced)),
        gbps(field(job, k::kThroughputGbps)),
        bytes(field(job, k::kErrorFeedbackBytes)),
        bytes(field(job, k::kPinnedBytes)),
        last_error.empty() ? std::string(kMissing) : last_error,
    });
  }
  std::string out = format_table(
      {
          {"JOB"},
          {"WORLD", Align::kRight},
          {"LOCAL UP", Align::kRight},
          {"DEAD"},
          {"OPS DONE", Align::kRight},
          {"FAILED", Align::kRight},
          {"IN FLIGHT", Align::kRight},
          {"REDUCED", Align::kRight},
          {"THROUGHPUT", Align::kRight},
          {"EF HELD", Align::kRight},
          {"PINNED", Align::kRight},
          {"LAST ERROR"},
      },
      rows);
  for (const json& job : jobs)
    out += render_parameters(job) + render_leases(job) + render_straggler(job) +
           render_host_straggler(job);
  return out;
}

}  // namespace gsync::cli
