// SPDX-License-Identifier: Apache-2.0
//
// Admission of clients into jobs, matching of submissions into ops, and every
// way an op can end: completed, mismatched, timed out, or failed because a
// rank of its job died. All on the event thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "daemon/collective/cross_host.h"
#include "daemon/collective/local_executor.h"
#include "daemon/config/config.h"
#include "daemon/jobs/job.h"
#include "protocol/wire.h"

namespace gsync {

struct JoinRequest {
  std::string job_id;
  int world_size = 0, rank = -1, local_rank = -1, local_size = 0;
};

struct GlobalStats {
  uint64_t ops_completed = 0, ops_failed = 0, bytes_reduced = 0;
  RateMeter meter;
};

class JobManager {
 public:
  JobManager(const DaemonConfig& cfg, LocalExecutor& executor) : cfg_(cfg), executor_(executor) {}

  // The cross-host step, when this daemon is part of a cluster.
  void set_cross_host(CrossHost* cross);

  // May a client with this identity join? Changes nothing.
  Status check_join(const JoinRequest& req) const;
  // Puts a session (identity already set) into its job's slot.
  void attach(const std::shared_ptr<Session>& s);
  // The client is gone (closed, killed, or cut off for a protocol violation).
  void detach(const std::shared_ptr<Session>& s, const std::string& reason);

  void submit(const std::shared_ptr<Session>& s, const proto::SubmitEntry& e);
  void check_timeouts(Clock::time_point now);
  void executor_done(uint64_t task_id);
  // [0, done) elements of a running executor task are finished.
  void executor_progress(uint64_t task_id, size_t done);

  // Called when a completion cannot be posted (the client broke the ring
  // protocol); the daemon closes that session.
  std::function<void(const std::shared_ptr<Session>&, const Status&)> on_broken_session;

  const std::map<std::string, std::unique_ptr<Job>>& jobs() const { return jobs_; }
  GlobalStats& stats() { return stats_; }
  uint64_t in_flight() const;

 private:
  Status validate(const Session& s, const Job& job, const proto::SubmitEntry& e, void** data) const;
  Status check_shape(const Job& job, const Op& op, const Session& s, const proto::SubmitEntry& e) const;
  void start(Job& job, Op& op);
  void start_multi(Job& job, Op& op);
  void run_stage(Job& job, Op& op);
  // The op (and its job) if both still exist.
  Op* find_op(const std::string& job_id, const OpId& id, Job** job = nullptr);
  void store_chunk(const std::string& job_id, const OpId& id, uint64_t begin, uint64_t end,
                   double weight_total);
  void stage_done(Job& job, Op& op);
  // Every host of the multi-host job has announced its ranks; clears a
  // remote departure recorded before.
  bool cross_ready(Job& job);
  void job_ready(const std::string& job_id);
  void finish(Job& job, const OpId& id, const Status& st);
  void fail_pending(Job& job, const Status& st);
  void reply(const std::shared_ptr<Session>& s, uint64_t tag, const Status& st);
  void remember_failure(Job& job, const OpId& id, const Status& st);
  void maybe_erase(const std::string& job_id);
  std::string missing_ranks(const Job& job, const Op& op) const;

  const DaemonConfig& cfg_;
  LocalExecutor& executor_;
  CrossHost* cross_ = nullptr;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  struct Running {
    std::string job;
    OpId id;
    bool chunk_store = false;  // one chunk of a pipelined store
  };
  std::unordered_map<uint64_t, Running> running_;  // pool task id -> op
  GlobalStats stats_;
};

}  // namespace gsync
