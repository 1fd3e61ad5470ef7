// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl jobs and gsyncctl ops: each job, its ranks and op counters;
// the ops in flight and the recent ones with their timelines.
#include "daemon/reports/job_report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/ps/service.h"

namespace gsync::reports {

namespace {
// A parameter-server job's keys as this host serves them: the shard map,
// each worker's clock, the slowest worker, how long each worker's pulls
// waited here (for the slowest, in bsp and ssp), updates applied and their
// rate.
// A key's checkpoints: null when it keeps none.
nlohmann::json checkpoint_json(const ps::CheckpointReport& c) {
  using nlohmann::json;
  if (!c.on && c.last_error.empty()) return nullptr;
  json last = nullptr;
  if (c.have_last)
    last = {{"clock", c.last_clock}, {"age_s", c.last_age_s}, {"bytes", c.last_bytes},
            {"duration_s", c.last_duration_s}, {"copy_s", c.last_copy_s}};
  return {{"on", c.on},
          {"every_clocks", c.every_clocks},
          {"every_ms", c.every_ms},
          {"folder", c.folder},
          {"taken", c.taken},
          {"failed", c.failed},
          {"skipped", c.skipped},
          {"writing", c.writing},
          {"last", last},
          {"longest_stall_s", c.longest_stall_s},
          {"last_error", c.last_error.empty() ? json(nullptr) : json(c.last_error)},
          {"resumed_from", c.resumed_from}};
}

nlohmann::json ps_keys(const ps::Service* service, const std::string& job) {
  using nlohmann::json;
  json keys = json::array();
  if (!service) return keys;
  for (const auto& k : service->report(job)) {
    json clocks = json::object(), shards = json::object();
    std::string slowest;
    uint64_t low = ~0ull;
    for (const auto& [host, c] : k.worker_clocks) {
      clocks[host] = c;
      if (c < low) {
        low = c;
        slowest = host;
      }
    }
    for (const auto& [host, b] : k.shard_bytes) shards[host] = b;
    json waited = json::object();
    for (const auto& [host, w] : k.pull_wait_s) waited[host] = w;
    keys.push_back({{"key", k.key}, {"count", k.count}, {"dtype", k.dtype},
                    {"optimizer", k.optimizer}, {"sync", k.sync},
                    {"shard", {k.shard_begin, k.shard_end}}, {"updates", k.updates},
                    {"worker_clocks", clocks}, {"slowest_worker", slowest},
                    {"shard_bytes", shards}, {"pulls_waiting", k.pulls_waiting},
                    {"pull_wait_s", waited}, {"updates_per_s", k.updates_per_s},
                    {"checkpoint", checkpoint_json(k.checkpoint)},
                    {"anomalies", k.anomalies},
                    {"last_anomaly", k.last_anomaly.empty() ? json(nullptr) : json(k.last_anomaly)},
                    {"last_rollback_s", k.last_rollback_s}});
  }
  return keys;
}

// Per host of the job (this one included): its lag behind the first host
// ready, on this daemon's clock ("Stragglers").
nlohmann::json host_report(const Job& job, const cluster::ControlPlane* control) {
  nlohmann::json hosts = nlohmann::json::array();
  const auto lags = job.host_lags.lags();
  const int st = job.host_lags.straggler(lags);
  for (const auto& l : lags)
    hosts.push_back({{"host", control ? control->host_id(l.host) : std::to_string(l.host)},
                     {"self", control && l.host == control->self()},
                     {"lag_median_s", l.median_s},
                     {"lag_p99_s", l.p99_s},
                     {"last_share", l.last_share}});
  nlohmann::json who = nullptr;
  if (st >= 0 && control) who = control->host_id(lags[size_t(st)].host);
  return {{"host_ops", job.host_lags.ops()}, {"hosts", std::move(hosts)}, {"host_straggler", who}};
}

// Per local rank, its lag behind the first to arrive; the host lags.
nlohmann::json straggler_report(const Job& job, const cluster::ControlPlane* control) {
  nlohmann::json ranks = nlohmann::json::array();
  const auto lags = job.stragglers.lags();
  for (size_t l = 0; l < lags.size() && l < job.slots.size(); l++) {
    const auto& s = job.slots[l].session;
    ranks.push_back({{"rank", s ? nlohmann::json(s->rank) : nlohmann::json(nullptr)},
                     {"local_rank", l},
                     {"pid", s ? nlohmann::json(s->peer.pid) : nlohmann::json(nullptr)},
                     {"median_lag_s", lags[l].median_s},
                     {"p99_lag_s", lags[l].p99_s},
                     {"last_share", lags[l].last_share}});
  }
  const int st = job.stragglers.straggler(lags);
  nlohmann::json out = host_report(job, control);
  out["ops"] = job.stragglers.ops();
  out["ranks"] = std::move(ranks);
  out["straggler"] = st >= 0 && job.slots[size_t(st)].session
                         ? nlohmann::json(job.slots[size_t(st)].session->rank)
                         : nlohmann::json(nullptr);
  return out;
}

// An elastic job's bounds and its world as this host has it; null for a
// fixed job.
nlohmann::json elastic_report(const Job& job) {
  if (!job.elastic()) return nullptr;
  const worlds::World& w = *job.world;
  return {{"min_hosts", w.min_hosts()},
          {"max_hosts", w.max_hosts()},
          {"epoch", w.epoch()},
          {"world", w.name()},
          {"hosts", w.hosts()},
          {"in_world", w.in_world()},
          {"reason", w.reason()},
          {"ended", w.ended() ? w.end().message() : std::string()},
          {"waiting_ranks", w.waiting()}};
}

}  // namespace

nlohmann::json jobs(const JobManager& manager, const pipeline::Pipeline& pipeline,
                    const cluster::ControlPlane* control) {
  using nlohmann::json;
  const auto& all_jobs = manager.jobs();
  auto now = Clock::now();
  json list = json::array();
  for (const auto& [name, job] : all_jobs) {
    json ranks = json::array();
    for (size_t l = 0; l < job->slots.size(); l++) {
      const auto& slot = job->slots[l];
      if (slot.session)
        ranks.push_back({{"rank", slot.session->rank}, {"local_rank", l},
                         {"pid", slot.session->peer.pid}, {"uid", slot.session->peer.uid},
                         {"state", "connected"}});
      else if (slot.dead)
        ranks.push_back({{"rank", slot.dead_rank}, {"local_rank", l}, {"pid", slot.dead_pid},
                         {"uid", nullptr}, {"state", "dead"}});
      else if (slot.departed)
        ranks.push_back({{"rank", nullptr}, {"local_rank", l}, {"pid", nullptr},
                         {"uid", nullptr}, {"state", "departed"}});
    }
    size_t running = 0;
    for (const auto& [id, op] : job->ops) running += op->running();
    // What the pipeline holds for the job, under each name its ops went
    // by (an elastic job's: one per world).
    uint64_t ef_bytes = pipeline.error_feedback_bytes(name);
    uint64_t pinned = pipeline.pinned_bytes(name);
    if (job->elastic())
      for (const auto& w : job->world->names()) {
        ef_bytes += pipeline.error_feedback_bytes(w);
        pinned += pipeline.pinned_bytes(w);
      }
    list.push_back({{"job", name},
                    {"world_size", job->world_size},
                    {"local_size", job->local_size},
                    {"sync", job->policy->name()},
                    {"ranks", ranks},
                    {"ops_completed", job->ops_completed},
                    {"ops_failed", job->ops_failed},
                    {"anomalies", job->anomalies},
                    {"anomaly_guard", proto::describe(job->guard)},
                    {"plan", proto::describe(job->plan)},
                    {"tuning_entries", job->tuning ? job->tuning->size() : 0},
                    {"ops_in_flight", job->ops.size()},
                    {"ops_running", running},
                    {"ready", !job->multi_host() ||
                                  (control &&
                                   control->job_ready(job->wire_name(), job->world_size))},
                    {"remote_departures", job->remote_departures},
                    {"bytes_reduced", job->bytes_reduced},
                    {"throughput_gbps", job->meter.rate(now) / 1e9},
                    // What compression's error feedback holds for the job
                    // (docs/compression.md, "The engine").
                    {"error_feedback_bytes", ef_bytes},
                    // Pinned host memory kept for its ops over device
                    // memory (docs/gpu.md, "Across hosts from device memory").
                    {"pinned_bytes", pinned},
                    {"sync_mode", proto::describe(job->sync)},
                    {"parameters", ps_keys(pipeline.ps(), name)},
                    // Batch leases (docs/fault-tolerance.md): this host's
                    // counts and, on the keeper, the ledger.
                    {"leases", manager.leases().report(name)},
                    {"departures", job->departures},
                    {"stragglers", straggler_report(*job, control)},
                    {"elastic", elastic_report(*job)},
                    {"last_error", job->last_error}});
  }
  return json{{"jobs", list}};
}

nlohmann::json ops(const JobManager& manager, const pipeline::Pipeline& pipeline,
                   const cluster::ControlPlane* control) {
  using nlohmann::json;
  const auto& all_jobs = manager.jobs();
  const OpHistory& history = manager.history();
  auto now = Clock::now();
  json in_flight = json::array();
  for (const auto& [name, job] : all_jobs) {
    for (const auto& [id, op] : job->ops) {
      json missing = json::array();
      for (size_t l = 0; l < op->arrivals().size(); l++) {
        if (op->arrivals()[l].session) continue;
        const auto& s = job->slots[l].session;
        missing.push_back({{"local_rank", l}, {"rank", s ? json(s->rank) : json(nullptr)},
                           {"pid", s ? json(s->peer.pid) : json(nullptr)}});
      }
      json row = {{"job", name},
                  {"key", id.key},
                  {"step", id.step},
                  {"op", proto::name(op->shape().opcode)},
                  {"bytes", op->bytes()},
                  {"arrived", op->arrived()},
                  {"local_size", job->local_size},
                  {"not_arrived", missing},
                  {"age_s", std::chrono::duration<double>(now - op->started()).count()},
                  {"stage", nullptr},
                  {"waiting_for", nullptr}};
      if (op->running()) {
        pipeline::OpView v = pipeline.view(op->serial());
        row["stage"] = v.stage;
        row["waiting_for"] = v.waiting_for;
      } else if (op->arrived() == job->local_size && control) {
        row["waiting_for"] =
            control->job_missing(job->wire_name(), job->world_size, job->live_rank_ids());
      }
      in_flight.push_back(std::move(row));
    }
  }
  std::vector<std::string> hosts;
  if (control)
    for (const auto& h : control->cluster().hosts) hosts.push_back(h.id);
  // [trace]: whether ops are recorded, and how many of them are kept.
  // realtime_ns beside now_ns: gsyncctl trace puts the ops of daemons on
  // other machines on one clock with the probe's CLOCK_REALTIME offsets.
  const int64_t now_ns = monotonic_ns(Clock::now());
  const int64_t realtime = realtime_ns();
  return json{{"in_flight", in_flight},
              {"recording", {{"on", history.recording()}, {"ring_ops", history.capacity()}}},
              {"recent", history.report(hosts, control ? control->self() : -1)},
              {"host", control ? json(control->self_id()) : json(nullptr)},
              {"now_ns", now_ns},
              {"realtime_ns", realtime}};
}

}  // namespace gsync::reports
