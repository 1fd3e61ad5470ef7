// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl jobs and gsyncctl ops: each job, its ranks and op counters;
// the ops in flight and the recent ones with their timelines.
#include "daemon/reports/job_report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "daemon/ps/service.h"
#include "protocol/admin_jobs.h"

namespace gsync::reports {

namespace k = admin::jobs;

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
    last = {{k::kClock, c.last_clock}, {k::kAgeS, c.last_age_s}, {k::kBytes, c.last_bytes},
            {k::kDurationS, c.last_duration_s}, {k::kCopyS, c.last_copy_s}};
  return {{k::kOn, c.on},
          {k::kEveryClocks, c.every_clocks},
          {k::kEveryMs, c.every_ms},
          {k::kFolder, c.folder},
          {k::kTaken, c.taken},
          {k::kFailed, c.failed},
          {k::kSkipped, c.skipped},
          {k::kWriting, c.writing},
          {k::kLast, last},
          {k::kLongestStallS, c.longest_stall_s},
          {k::kLastError, c.last_error.empty() ? json(nullptr) : json(c.last_error)},
          {k::kResumedFrom, c.resumed_from}};
}

nlohmann::json ps_keys(const ps::Service* service, const std::string& job) {
  using nlohmann::json;
  json keys = json::array();
  if (!service) return keys;
  for (const auto& key : service->report(job)) {
    json clocks = json::object(), shards = json::object();
    std::string slowest;
    uint64_t low = ~0ull;
    for (const auto& [host, c] : key.worker_clocks) {
      clocks[host] = c;
      if (c < low) {
        low = c;
        slowest = host;
      }
    }
    for (const auto& [host, b] : key.shard_bytes) shards[host] = b;
    json waited = json::object();
    for (const auto& [host, w] : key.pull_wait_s) waited[host] = w;
    keys.push_back({{k::kKey, key.key}, {k::kCount, key.count}, {k::kDtype, key.dtype},
                    {k::kOptimizer, key.optimizer}, {k::kSync, key.sync},
                    {k::kShard, {key.shard_begin, key.shard_end}}, {k::kUpdates, key.updates},
                    {k::kWorkerClocks, clocks}, {k::kSlowestWorker, slowest},
                    {k::kShardBytes, shards}, {k::kPullsWaiting, key.pulls_waiting},
                    {k::kPullWaitS, waited}, {k::kUpdatesPerS, key.updates_per_s},
                    {k::kCheckpoint, checkpoint_json(key.checkpoint)},
                    {k::kAnomalies, key.anomalies},
                    {k::kLastAnomaly,
                     key.last_anomaly.empty() ? json(nullptr) : json(key.last_anomaly)},
                    {k::kLastRollbackS, key.last_rollback_s}});
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
    hosts.push_back({{k::kHost, control ? control->host_id(l.host) : std::to_string(l.host)},
                     {k::kSelf, control && l.host == control->self()},
                     {k::kLagMedianS, l.median_s},
                     {k::kLagP99S, l.p99_s},
                     {k::kLastShare, l.last_share}});
  nlohmann::json who = nullptr;
  if (st >= 0 && control) who = control->host_id(lags[size_t(st)].host);
  return {{k::kHostOps, job.host_lags.ops()},
          {k::kHosts, std::move(hosts)},
          {k::kHostStraggler, who}};
}

// Per local rank, its lag behind the first to arrive; the host lags.
nlohmann::json straggler_report(const Job& job, const cluster::ControlPlane* control) {
  nlohmann::json ranks = nlohmann::json::array();
  const auto lags = job.stragglers.lags();
  for (size_t l = 0; l < lags.size() && l < job.slots.size(); l++) {
    const auto& s = job.slots[l].session;
    ranks.push_back({{k::kRank, s ? nlohmann::json(s->rank) : nlohmann::json(nullptr)},
                     {k::kLocalRank, l},
                     {k::kPid, s ? nlohmann::json(s->peer.pid) : nlohmann::json(nullptr)},
                     {k::kMedianLagS, lags[l].median_s},
                     {k::kP99LagS, lags[l].p99_s},
                     {k::kLastShare, lags[l].last_share}});
  }
  const int st = job.stragglers.straggler(lags);
  nlohmann::json out = host_report(job, control);
  out[k::kOps] = job.stragglers.ops();
  out[k::kRanks] = std::move(ranks);
  out[k::kStraggler] = st >= 0 && job.slots[size_t(st)].session
                         ? nlohmann::json(job.slots[size_t(st)].session->rank)
                         : nlohmann::json(nullptr);
  return out;
}

// An elastic job's bounds and its world as this host has it; null for a
// fixed job.
nlohmann::json elastic_report(const Job& job) {
  if (!job.elastic()) return nullptr;
  const worlds::World& w = *job.world;
  return {{k::kMinHosts, w.min_hosts()},
          {k::kMaxHosts, w.max_hosts()},
          {k::kEpoch, w.epoch()},
          {k::kWorld, w.name()},
          {k::kHosts, w.hosts()},
          {k::kInWorld, w.in_world()},
          {k::kReason, w.reason()},
          {k::kEnded, w.ended() ? w.end().message() : std::string()},
          {k::kWaitingRanks, w.waiting()}};
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
        ranks.push_back({{k::kRank, slot.session->rank}, {k::kLocalRank, l},
                         {k::kPid, slot.session->peer.pid}, {k::kUid, slot.session->peer.uid},
                         {k::kState, k::kConnected}});
      else if (slot.dead)
        ranks.push_back({{k::kRank, slot.dead_rank}, {k::kLocalRank, l}, {k::kPid, slot.dead_pid},
                         {k::kUid, nullptr}, {k::kState, k::kDead}});
      else if (slot.departed)
        ranks.push_back({{k::kRank, nullptr}, {k::kLocalRank, l}, {k::kPid, nullptr},
                         {k::kUid, nullptr}, {k::kState, k::kDeparted}});
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
    list.push_back({{k::kJob, name},
                    {k::kWorldSize, job->world_size},
                    {k::kLocalSize, job->local_size},
                    {k::kSync, job->policy->name()},
                    {k::kRanks, ranks},
                    {k::kOpsCompleted, job->ops_completed},
                    {k::kOpsFailed, job->ops_failed},
                    {k::kAnomalies, job->anomalies},
                    {k::kAnomalyGuard, proto::describe(job->guard)},
                    {k::kPlan, proto::describe(job->plan)},
                    {k::kTuningEntries, job->tuning ? job->tuning->size() : 0},
                    {k::kOpsInFlight, job->ops.size()},
                    {k::kOpsRunning, running},
                    {k::kReady, !job->multi_host() ||
                                  (control &&
                                   control->job_ready(job->wire_name(), job->world_size))},
                    {k::kRemoteDepartures, job->remote_departures},
                    {k::kBytesReduced, job->bytes_reduced},
                    {k::kThroughputGbps, job->meter.rate(now) / 1e9},
                    // What compression's error feedback holds for the job
                    // (docs/compression.md, "The engine").
                    {k::kErrorFeedbackBytes, ef_bytes},
                    // Pinned host memory kept for its ops over device
                    // memory (docs/gpu.md, "Across hosts from device memory").
                    {k::kPinnedBytes, pinned},
                    {k::kSyncMode, proto::describe(job->sync)},
                    {k::kParameters, ps_keys(pipeline.ps(), name)},
                    // Batch leases (docs/fault-tolerance.md): this host's
                    // counts and, on the keeper, the ledger.
                    {k::kLeases, manager.leases().report(name)},
                    {k::kDepartures, job->departures},
                    {k::kStragglers, straggler_report(*job, control)},
                    {k::kElastic, elastic_report(*job)},
                    {k::kLastError, job->last_error}});
  }
  return json{{k::kJobs, list}};
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
