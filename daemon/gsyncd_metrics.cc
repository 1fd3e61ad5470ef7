// SPDX-License-Identifier: Apache-2.0
//
// What /metrics says (docs/operations.md, "Metrics"), rendered on the event
// thread from the layers' own counters when a scrape asks. Labels are
// bounded: a job's families cover at most kMaxJobs jobs (the rest are
// summed under job="_other" and counted in gsync_metrics_jobs_folded), a
// peer's one per host of the cluster file, an op's one per opcode and per
// dtype, cross-host algorithm and codec (names of enums: OpLabels).
#include <algorithm>
#include <map>

#include "daemon/gsyncd.h"
#include "daemon/metrics/exposition.h"
#include "daemon/reports/job_report.h"
#include "gsync_build_config.h"
#include "protocol/wire.h"

namespace gsync {

namespace {
constexpr size_t kMaxJobs = 64;

double num(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
// Each named job's local ranks: their lag behind the first to arrive (the
// first kMaxJobs jobs, as the other job families; the rest have no lags).
void lag_family(metrics::Exposition& m, const nlohmann::json& jobs) {
  m.family("gsync_rank_arrival_lag_seconds", "gauge",
           "A rank's lag behind its job's first local rank over the last ops (median, p99)");
  size_t named = 0;
  for (const auto& j : jobs) {
    if (named++ >= kMaxJobs) break;
    if (!j.contains("stragglers")) continue;
    const std::string name = j.value("job", "");
    for (const auto& r : j["stragglers"].value("ranks", nlohmann::json::array())) {
      if (!r["rank"].is_number()) continue;
      const std::string rank = std::to_string(r["rank"].get<int>());
      m.sample({{"job", name}, {"rank", rank}, {"quantile", "0.5"}}, num(r, "median_lag_s"));
      m.sample({{"job", name}, {"rank", rank}, {"quantile", "0.99"}}, num(r, "p99_lag_s"));
    }
  }
}

// Each named job's hosts (this one included): their lag behind the job's
// first host ready, on this daemon's clock; hosts are the cluster file's.
void host_lag_family(metrics::Exposition& m, const nlohmann::json& jobs) {
  m.family("gsync_host_arrival_lag_seconds", "gauge",
           "A host's lag behind its job's first host ready over the last ops (median, p99)");
  size_t named = 0;
  for (const auto& j : jobs) {
    if (named++ >= kMaxJobs) break;
    if (!j.contains("stragglers")) continue;
    const std::string name = j.value("job", "");
    for (const auto& h : j["stragglers"].value("hosts", nlohmann::json::array())) {
      const std::string host = h.value("host", "");
      m.sample({{"job", name}, {"host", host}, {"quantile", "0.5"}}, num(h, "lag_median_s"));
      m.sample({{"job", name}, {"host", host}, {"quantile", "0.99"}}, num(h, "lag_p99_s"));
    }
  }
}

// The ops ended and the bytes reduced by dtype, cross-host algorithm and
// codec (OpLabels: names of enums, so at most a few hundred series).
void ops_by_labels(metrics::Exposition& m, const GlobalStats& g) {
  auto labels = [](const OpLabels& l) {
    return metrics::Labels{{"dtype", proto::name(l.dtype)},
                           {"algorithm", std::string(l.algorithm)},
                           {"codec", proto::name(l.codec)}};
  };
  m.family("gsync_ops_total", "counter",
           "Operations ended, by result, dtype, cross-host algorithm and codec");
  for (const auto& [l, n] : g.by_labels)
    for (const auto& [result, count] :
         {std::pair{"completed", n.completed}, std::pair{"failed", n.failed}}) {
      metrics::Labels with_result{{"result", result}};
      for (auto& kv : labels(l)) with_result.push_back(std::move(kv));
      m.sample(with_result, double(count));
    }
  m.family("gsync_reduced_bytes_total", "counter",
           "Bytes of the ranks' tensors reduced, by dtype, cross-host algorithm and codec");
  for (const auto& [l, n] : g.by_labels) m.sample(labels(l), double(n.bytes_reduced));
}
}  // namespace

std::string Gsyncd::metrics_text() const {
  metrics::Exposition m;
  metrics_ops(m);
  metrics_jobs(m);
  metrics_peers(m);
  return m.text();
}

void Gsyncd::metrics_ops(metrics::Exposition& m) const {
  const auto now = std::chrono::steady_clock::now();
  const GlobalStats& g = jobs_->stats();

  m.family("gsync_build_info", "gauge", "gsyncd's version and protocols (always 1)");
  m.sample(
      {{"version", GSYNC_VERSION_STRING}, {"client_protocol", std::to_string(proto::kVersion)}}, 1);
  m.family("gsync_uptime_seconds", "gauge", "Seconds since gsyncd started");
  m.sample({}, std::chrono::duration<double>(now - started_at_).count());
  ops_by_labels(m, g);
  m.family("gsync_ops_in_flight", "gauge", "Operations submitted and not ended");
  m.sample({}, double(jobs_->in_flight()));
  m.family("gsync_op_failures_total", "counter", "Operations that failed, by GSYNC_ERR_* code");
  for (const auto& [code, n] : g.failures_by_code)
    m.sample({{"code", proto::error_code_name(code)}}, double(n));
  m.family("gsync_op_duration_seconds", "histogram",
           "From an operation's first submission to its end, by opcode");
  for (const auto& [op, h] : g.latency) {
    std::vector<double> bounds(std::begin(OpLatency::kBounds), std::end(OpLatency::kBounds));
    std::vector<uint64_t> counts(std::begin(h.counts), std::end(h.counts));
    m.histogram({{"op", proto::name(op)}}, bounds, counts, h.sum_s);
  }

  // Clients and their arenas.
  uint64_t arena = 0;
  uint64_t device = 0;
  for (const auto& [id, s] : clients_->sessions()) {
    arena += s->arena_bytes();
    device += s->device_bytes();
  }
  m.family("gsync_clients", "gauge", "Client sessions connected");
  m.sample({}, double(clients_->sessions().size()));
  m.family("gsync_arena_bytes", "gauge", "Shared arena bytes mapped for the connected clients");
  m.sample({}, double(arena));
  m.family("gsync_device_bytes", "gauge",
           "GPU memory the connected clients shared with the daemon (gsync_alloc_device)");
  m.sample({}, double(device));
  m.family("gsync_pinned_bytes", "gauge",
           "Pinned host memory the daemon holds for ops over device memory (their staging)");
  m.sample({}, double(pipeline_->pinned_bytes()));
  m.family("gsync_device_memory_ops_total", "counter",
           "Operations over device memory, by path: reduced on the GPU, or through host memory");
  m.sample({{"path", "gpu"}}, double(pipeline_->device_paths().on_gpu));
  m.sample({{"path", "host"}}, double(pipeline_->device_paths().through_host));
  m.family("gsync_event_loop_exceptions_total", "counter",
           "Exceptions the event loop caught from a handler (a bug each)");
  m.sample({}, double(loop_.exceptions_caught()));
  if (metrics_) {
    m.family("gsync_metrics_scrapes_total", "counter", "Scrapes of /metrics answered");
    m.sample({}, double(metrics_->scrapes() + 1));
  }
}

// Jobs, at most kMaxJobs by name; the rest folded into one.
void Gsyncd::metrics_jobs(metrics::Exposition& m) const {
  const nlohmann::json jobs = reports::jobs(*jobs_, *pipeline_, control_.get())["jobs"];
  struct JobNums {
    double completed = 0, failed = 0, bytes = 0, anomalies = 0, departures = 0, ranks = 0;
    double outstanding = 0, reassigned = 0, settled = 0, ckpt_age = -1;
  };
  std::map<std::string, JobNums> per_job;
  size_t folded = 0;
  for (const auto& j : jobs) {
    std::string name = j.value("job", "");
    if (per_job.size() >= kMaxJobs && !per_job.count(name)) {
      name = "_other";
      folded++;
    }
    JobNums& n = per_job[name];
    n.completed += num(j, "ops_completed");
    n.failed += num(j, "ops_failed");
    n.bytes += num(j, "bytes_reduced");
    n.anomalies += num(j, "anomalies");
    n.departures += num(j, "departures");
    for (const auto& r : j.value("ranks", nlohmann::json::array()))
      n.ranks += r.value("state", "") == "connected";
    const nlohmann::json& l = j.contains("leases") ? j["leases"] : nlohmann::json();
    if (l.is_object())
      for (const auto& e : l.value("epochs", nlohmann::json::array())) {
        n.outstanding += num(e, "outstanding");
        n.reassigned += num(e, "reassigned");
        n.settled += num(e, "settled");
      }
    for (const auto& k : j.value("parameters", nlohmann::json::array())) {
      const nlohmann::json& c = k.contains("checkpoint") ? k["checkpoint"] : nlohmann::json();
      if (c.is_object() && c.contains("last") && c["last"].is_object()) {
        const double age = num(c["last"], "age_s");
        n.ckpt_age = n.ckpt_age < 0 ? age : std::max(n.ckpt_age, age);
      }
    }
  }
  auto job_family = [&](const char* name, const char* type, const char* help, auto&& value,
                        bool always = true) {
    m.family(name, type, help);
    for (const auto& [job, n] : per_job)
      if (always || value(n) >= 0) m.sample({{"job", job}}, value(n));
  };
  job_family("gsync_job_ops_completed_total", "counter", "A job's operations completed here",
             [](const JobNums& n) { return n.completed; });
  job_family("gsync_job_ops_failed_total", "counter", "A job's operations failed here",
             [](const JobNums& n) { return n.failed; });
  job_family("gsync_job_reduced_bytes_total", "counter", "Bytes of a job's tensors reduced here",
             [](const JobNums& n) { return n.bytes; });
  job_family("gsync_job_anomalies_total", "counter", "A job's steps the anomaly guard failed",
             [](const JobNums& n) { return n.anomalies; });
  job_family("gsync_job_ranks", "gauge", "A job's ranks connected here",
             [](const JobNums& n) { return n.ranks; });
  job_family("gsync_job_departures_total", "counter",
             "Ranks a job that leases batches went on without",
             [](const JobNums& n) { return n.departures; });
  job_family("gsync_job_leases_outstanding", "gauge",
             "Batch leases out and not settled (on the job's keeper)",
             [](const JobNums& n) { return n.outstanding; });
  job_family("gsync_job_leases_reassigned_total", "counter",
             "Batches handed back by a rank that left (on the job's keeper)",
             [](const JobNums& n) { return n.reassigned; });
  job_family("gsync_job_leases_settled_total", "counter",
             "Batches settled in the epochs kept (on the job's keeper)",
             [](const JobNums& n) { return n.settled; });
  job_family(
      "gsync_job_checkpoint_age_seconds", "gauge",
      "Age of the oldest of a job's keys' last checkpoints on this host",
      [](const JobNums& n) { return n.ckpt_age; }, false);
  m.family("gsync_metrics_jobs_folded", "gauge",
           "Jobs beyond the 64 named ones, summed under job=\"_other\"");
  m.sample({}, double(folded));
  lag_family(m, jobs);
  host_lag_family(m, jobs);
}

// Peers: one per host of the cluster file.
void Gsyncd::metrics_peers(metrics::Exposition& m) const {
  if (!control_) return;
  const nlohmann::json peers = control_->peers_report()["peers"];
  auto peer_family = [&](const char* name, const char* type, const char* help, auto&& value) {
    m.family(name, type, help);
    for (const auto& p : peers) m.sample({{"peer", p.value("host", "")}}, value(p));
  };
  peer_family("gsync_peer_up", "gauge", "Whether the link to a peer daemon is up",
              [](const nlohmann::json& p) { return p.value("state", "") == "up" ? 1.0 : 0.0; });
  peer_family("gsync_peer_sent_bytes_total", "counter", "Bytes sent to a peer daemon",
              [](const nlohmann::json& p) { return num(p, "bytes_sent"); });
  peer_family("gsync_peer_received_bytes_total", "counter", "Bytes received from a peer daemon",
              [](const nlohmann::json& p) { return num(p, "bytes_received"); });
}

}  // namespace gsync
