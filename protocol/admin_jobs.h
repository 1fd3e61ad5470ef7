// SPDX-License-Identifier: Apache-2.0
//
// The admin command "jobs" (gsyncctl jobs, jobs --stragglers, report): the
// names of its fields, the one vocabulary the daemon writes
// (daemon/reports/job_report.cc, daemon/leases/lease_service.cc) and
// gsyncctl reads (tools/gsyncctl/render_jobs.cc, report.cc). Both sides
// name a field only through these constants, so a renamed field breaks the
// build of both, not a table; the test `admin_schema` checks a live
// daemon's reply against kAll (a field written by string fails it).
// docs/operations.md, "The admin protocol and its JSON documents".
#pragma once

#include <array>
#include <string_view>

namespace gsync::admin::jobs {

using Name = const char*;

// The reply: {"jobs": [job, ...]}.
inline constexpr Name kJobs = "jobs";

// A job.
inline constexpr Name kJob = "job";
inline constexpr Name kWorldSize = "world_size";
inline constexpr Name kLocalSize = "local_size";
inline constexpr Name kSync = "sync";
inline constexpr Name kRanks = "ranks";
inline constexpr Name kOpsCompleted = "ops_completed";
inline constexpr Name kOpsFailed = "ops_failed";
inline constexpr Name kAnomalies = "anomalies";
inline constexpr Name kAnomalyGuard = "anomaly_guard";
inline constexpr Name kPlan = "plan";
inline constexpr Name kTuningEntries = "tuning_entries";
inline constexpr Name kOpsInFlight = "ops_in_flight";
inline constexpr Name kOpsRunning = "ops_running";
inline constexpr Name kReady = "ready";
inline constexpr Name kRemoteDepartures = "remote_departures";
inline constexpr Name kBytesReduced = "bytes_reduced";
inline constexpr Name kThroughputGbps = "throughput_gbps";
inline constexpr Name kErrorFeedbackBytes = "error_feedback_bytes";
inline constexpr Name kPinnedBytes = "pinned_bytes";
inline constexpr Name kSyncMode = "sync_mode";
inline constexpr Name kParameters = "parameters";
inline constexpr Name kLeases = "leases";
inline constexpr Name kDepartures = "departures";
inline constexpr Name kStragglers = "stragglers";
inline constexpr Name kElastic = "elastic";
inline constexpr Name kLastError = "last_error";

// A job's rank (kRanks), and its states.
inline constexpr Name kRank = "rank";
inline constexpr Name kLocalRank = "local_rank";
inline constexpr Name kPid = "pid";
inline constexpr Name kUid = "uid";
inline constexpr Name kState = "state";
inline constexpr std::string_view kConnected = "connected", kDead = "dead",
                                  kDeparted = "departed";

// A parameter-server key this host serves (kParameters).
inline constexpr Name kKey = "key";
inline constexpr Name kCount = "count";
inline constexpr Name kDtype = "dtype";
inline constexpr Name kOptimizer = "optimizer";
inline constexpr Name kShard = "shard";  // [begin, end)
inline constexpr Name kUpdates = "updates";
inline constexpr Name kWorkerClocks = "worker_clocks";  // host -> clock
inline constexpr Name kSlowestWorker = "slowest_worker";
inline constexpr Name kShardBytes = "shard_bytes";  // host -> bytes
inline constexpr Name kPullsWaiting = "pulls_waiting";
inline constexpr Name kPullWaitS = "pull_wait_s";  // host -> seconds
inline constexpr Name kUpdatesPerS = "updates_per_s";
inline constexpr Name kCheckpoint = "checkpoint";
inline constexpr Name kLastAnomaly = "last_anomaly";
inline constexpr Name kLastRollbackS = "last_rollback_s";
// (and kSync, kAnomalies)

// A key's checkpoints (kCheckpoint; null when it keeps none).
inline constexpr Name kOn = "on";
inline constexpr Name kEveryClocks = "every_clocks";
inline constexpr Name kEveryMs = "every_ms";
inline constexpr Name kFolder = "folder";
inline constexpr Name kTaken = "taken";
inline constexpr Name kFailed = "failed";
inline constexpr Name kSkipped = "skipped";
inline constexpr Name kWriting = "writing";
inline constexpr Name kLast = "last";
inline constexpr Name kLongestStallS = "longest_stall_s";
inline constexpr Name kResumedFrom = "resumed_from";
// kLast, when one was written; kLastError.
inline constexpr Name kClock = "clock";
inline constexpr Name kAgeS = "age_s";
inline constexpr Name kBytes = "bytes";
inline constexpr Name kDurationS = "duration_s";
inline constexpr Name kCopyS = "copy_s";

// Batch leases (kLeases): this host's counts and, on the keeper, the
// ledger by epoch.
inline constexpr Name kKeeper = "keeper";
inline constexpr Name kLeased = "leased";
inline constexpr Name kWaits = "waits";
inline constexpr Name kEnds = "ends";
inline constexpr Name kSettledClocks = "settled_clocks";
inline constexpr Name kOutstanding = "outstanding";
inline constexpr Name kEpochs = "epochs";
inline constexpr Name kEpoch = "epoch";
inline constexpr Name kBatches = "batches";
inline constexpr Name kSettled = "settled";
inline constexpr Name kReassigned = "reassigned";
inline constexpr Name kFree = "free";

// Stragglers (kStragglers): the local ranks over the ops all joined, the
// hosts over the cross-host ops.
inline constexpr Name kOps = "ops";
inline constexpr Name kStraggler = "straggler";  // a rank, or null
inline constexpr Name kMedianLagS = "median_lag_s";
inline constexpr Name kP99LagS = "p99_lag_s";
inline constexpr Name kLastShare = "last_share";
inline constexpr Name kHostOps = "host_ops";
inline constexpr Name kHosts = "hosts";
inline constexpr Name kHostStraggler = "host_straggler";  // a host id, or null
inline constexpr Name kHost = "host";
inline constexpr Name kSelf = "self";
inline constexpr Name kLagMedianS = "lag_median_s";
inline constexpr Name kLagP99S = "lag_p99_s";

// An elastic job's world (kElastic; null for a fixed job).
inline constexpr Name kMinHosts = "min_hosts";
inline constexpr Name kMaxHosts = "max_hosts";
inline constexpr Name kWorld = "world";
inline constexpr Name kInWorld = "in_world";
inline constexpr Name kReason = "reason";
inline constexpr Name kEnded = "ended";
inline constexpr Name kWaitingRanks = "waiting_ranks";
// (and kEpoch, kHosts)

// Every name above: what the reply may hold (maps keyed by host aside).
inline constexpr std::array kAll = {
    kJobs, kJob, kWorldSize, kLocalSize, kSync, kRanks, kOpsCompleted, kOpsFailed, kAnomalies,
    kAnomalyGuard, kPlan, kTuningEntries, kOpsInFlight, kOpsRunning, kReady, kRemoteDepartures,
    kBytesReduced, kThroughputGbps, kErrorFeedbackBytes, kPinnedBytes, kSyncMode, kParameters,
    kLeases, kDepartures, kStragglers, kElastic, kLastError, kRank, kLocalRank, kPid, kUid,
    kState, kKey, kCount, kDtype, kOptimizer, kShard, kUpdates, kWorkerClocks, kSlowestWorker,
    kShardBytes, kPullsWaiting, kPullWaitS, kUpdatesPerS, kCheckpoint, kLastAnomaly,
    kLastRollbackS, kOn, kEveryClocks, kEveryMs, kFolder, kTaken, kFailed, kSkipped, kWriting,
    kLast, kLongestStallS, kResumedFrom, kClock, kAgeS, kBytes, kDurationS, kCopyS, kKeeper,
    kLeased, kWaits, kEnds, kSettledClocks, kOutstanding, kEpochs, kEpoch, kBatches, kSettled,
    kReassigned, kFree, kOps, kStraggler, kMedianLagS, kP99LagS, kLastShare, kHostOps, kHosts,
    kHostStraggler, kHost, kSelf, kLagMedianS, kLagP99S, kMinHosts, kMaxHosts, kWorld, kInWorld,
    kReason, kEnded, kWaitingRanks};

// The fields whose values are maps keyed by host id (not names).
inline constexpr std::array kHostMaps = {kWorkerClocks, kShardBytes, kPullWaitS};

}  // namespace gsync::admin::jobs
