// SPDX-License-Identifier: Apache-2.0
//
// Admission of clients into jobs, matching of submissions into ops, and every
// way an op can end before or around the pipeline: completed, mismatched,
// timed out, or failed because a rank of its job died. The ops themselves run
// in the op pipeline (daemon/pipeline/); this layer decides when one starts
// (the job's sync policy) and tells the ranks how it ended. All on the event
// thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "daemon/cluster/control_plane.h"
#include "daemon/config/config.h"
#include "daemon/jobs/job.h"
#include "daemon/leases/lease_service.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/records/op_end.h"
#include "daemon/records/op_history.h"
#include "daemon/records/op_stats.h"
#include "daemon/shm/client_listener.h"
#include "protocol/wire.h"

namespace gsync {

class JobManager final : public ClientSink {
 public:
  // control: this daemon's cluster, or null on a single host.
  JobManager(const DaemonConfig& cfg, pipeline::Pipeline& pipeline, cluster::ControlPlane* control);

  // ClientSink.
  Status check_join(const JoinRequest& req) override;
  void attach(const std::shared_ptr<Session>& s) override;
  void detach(const std::shared_ptr<Session>& s, const std::string& reason) override;
  void submit(const std::shared_ptr<Session>& s, const proto::SubmitEntry& e) override;

  void check_timeouts(Clock::time_point now);

  // Called when a completion cannot be posted (the client broke the ring
  // protocol); the daemon closes that session.
  std::function<void(const std::shared_ptr<Session>&, const Status&)> on_broken_session;

  const std::map<std::string, std::unique_ptr<Job>>& jobs() const { return jobs_; }
  GlobalStats& stats() { return stats_; }
  uint64_t in_flight() const;
  // The ops recorded as they ended (gsyncctl ops; reports/job_report.h).
  const OpHistory& history() const { return history_; }
  // The tuning table jobs created from now on plan with (null: none);
  // jobs already running keep theirs.
  void set_tuning(std::shared_ptr<const tuning::TuneTable> table) { tuning_ = std::move(table); }
  const std::shared_ptr<const tuning::TuneTable>& tuning() const { return tuning_; }
  // Batch leases across hosts: a cross-host service gsyncd adds to the
  // control plane.
  leases::LeaseService& leases() { return leases_; }
  const leases::LeaseService& leases() const { return leases_; }
  // The end of every op (records/op_end.h): what keeps a record of ops
  // subscribes here. The jobs layer's own records subscribe first
  // (op_ends.cc), in the constructor.
  OpEnds& op_ends() { return ends_; }

 private:
  // *data: the tensor's address; in device memory, *device says whose.
  Status validate(const Session& s, const Job& job, const proto::SubmitEntry& e,
                  proto::OpShape* shape, void** data, DeviceSpan* device) const;
  Status check_shape(const Job& job, const ops::Op& op, const Session& s,
                     const proto::OpShape& shape) const;
  ops::Op& op_for(Job& job, const Session& s, const proto::SubmitEntry& e,
                const proto::OpShape& shape);
  void start(Job& job, ops::Op& op);
  void run(Job& job, ops::Op& op);
  pipeline::OpRequest request(const Job& job, const ops::Op& op) const;
  void op_done(const std::string& job_id, const OpId& id, uint64_t serial, const Status& st,
               const pipeline::OpTimes& times);
  bool cross_ready(Job& job);
  void job_ready(const std::string& job_id);
  void job_broken(const std::string& job_id, const Status& why);
  void rank_died(Job& job, const Session& s, const std::string& reason);
  void finish(Job& job, const OpId& id, const Status& st, const pipeline::OpTimes* times = nullptr);
  // Answers the op's ranks, then publishes its end (op_ends.cc).
  void finish_op(Job& job, std::unique_ptr<ops::Op> op, const Status& st,
                 const pipeline::OpTimes* times);
  // What the jobs layer keeps of an op that ended, subscribed in order:
  // the daemon's counters, the history, the job's counters, its declared
  // keys, its straggler books, lease settlement, the tombstones.
  void subscribe_op_ends();
  void count_job_op(Job& job, const OpEnd& e);
  // A failed op's tombstone, unless it was a parameter server's refusal.
  void bury(Job& job, const OpEnd& e);
  void fail_pending(Job& job, const Status& st);
  void reply(const std::shared_ptr<Session>& s, uint64_t tag, const Status& st,
             uint64_t value = 0);
  // Elastic jobs (elastic_jobs.cc; docs/membership.md, "Elastic jobs").
  // The job by the name its ops go by between hosts (a world's name).
  Job* job_by_wire(const std::string& name);
  // All local ranks are connected: the host joins the job's next world.
  void elastic_complete(Job& job);
  void elastic_rank_left(Job& job, const Session& s);
  // The control plane adopted a newer world of the job.
  void world_changed(const std::string& job_id, const cluster::ElasticWorldView& w);
  // A submission to an elastic job: true when it was answered here (a
  // world query, an op of an old world, an op the job cannot run).
  bool elastic_submit(const std::shared_ptr<Session>& s, Job& job, const proto::SubmitEntry& e,
                      const proto::OpShape& shape);
  // Whether the job's world is one its ops can run in now.
  bool world_settled(Job& job);
  void answer_world(Job& job, const std::shared_ptr<Session>& s, uint64_t tag);
  void answer_world_waiters(Job& job);
  void maybe_erase(const std::string& job_id);
  std::string missing_ranks(const Job& job, const ops::Op& op) const;
  // Batch leases (leasing.cc).
  void lease(const std::shared_ptr<Session>& s, Job& job, const proto::SubmitEntry& e);
  int keeper(const Job& job) const;
  // A push was submitted: counted; true when the job leases and so the
  // clock's pushes start together (done here, or once the last is in).
  bool count_push(Job& job, int local_rank, uint64_t clock);
  void start_ready(Job& job, bool pushes_of_clock_only = false, uint64_t clock = 0);
  void depart(Job& job, const Session& s, const std::string& reason);
  void settle_pushes(Job& job, const ops::Op& op);
  // The straggler books (op_ends.cc): an op's arrivals into the job's
  // book, a warning when one rank is the straggler; the same for a
  // cross-host op's hosts (the job's HostLagBook).
  void note_arrivals(Job& job, std::span<const RankArrival> arrivals);
  void note_host_arrivals(Job& job, const HostArrivals& hosts);
  void expire(Job& job, Clock::time_point now);

  const DaemonConfig& cfg_;
  pipeline::Pipeline& pipeline_;
  cluster::ControlPlane* control_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  GlobalStats stats_;
  OpHistory history_;
  OpEnds ends_;
  std::vector<RankArrival> end_arrivals_;  // finish_op's, reused
  leases::LeaseService leases_;
  std::shared_ptr<const tuning::TuneTable> tuning_;
};

}  // namespace gsync
