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
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "daemon/cluster/control_plane.h"
#include "daemon/config/config.h"
#include "daemon/jobs/job.h"
#include "daemon/jobs/op_history.h"
#include "daemon/leases/lease_service.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/shm/client_listener.h"
#include "protocol/wire.h"

namespace gsync {

// How long ops took from their first rank's submission to their end, by
// opcode (the metrics' gsync_op_duration_seconds).
struct OpLatency {
  static constexpr double kBounds[] = {1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03,
                                       0.1,  0.3,  1,    3,    10,   30};
  static constexpr size_t kBuckets = std::size(kBounds) + 1;  // the last: above them all
  uint64_t counts[kBuckets] = {};
  double sum_s = 0;
  void add(double s);
};

// The labels of gsync_ops_total and gsync_reduced_bytes_total: an op's
// dtype, the cross-host algorithm of its plan ("local": a job on this host
// alone; "ps": a parameter server's push or pull; "none": an op of several
// hosts that ended before it had a plan) and the codec it crossed between
// hosts in. Each a name from an enum: the label sets are bounded.
struct OpLabels {
  proto::DType dtype = proto::DType::kF32;
  std::string_view algorithm = "local";
  proto::Codec codec = proto::Codec::kNone;
  auto operator<=>(const OpLabels&) const = default;
};
struct OpCounts {
  uint64_t completed = 0, failed = 0, bytes_reduced = 0;
};

struct GlobalStats {
  uint64_t ops_completed = 0, ops_failed = 0, bytes_reduced = 0;
  std::map<OpLabels, OpCounts> by_labels;  // the same ops, by their labels
  RateMeter meter;
  std::map<proto::Opcode, OpLatency> latency;
  std::map<int, uint64_t> failures_by_code;  // GSYNC_ERR_* -> ops that ended with it
};

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
  // gsyncctl jobs and gsyncctl ops (job_report.cc): the jobs; the ops in
  // flight (who has not arrived, what they wait for) and the recent ones
  // with their timelines.
  nlohmann::json jobs_report() const;
  nlohmann::json ops_report() const;
  // The tuning table jobs created from now on plan with (null: none);
  // jobs already running keep theirs.
  void set_tuning(std::shared_ptr<const tuning::TuneTable> table) { tuning_ = std::move(table); }
  const std::shared_ptr<const tuning::TuneTable>& tuning() const { return tuning_; }
  // Batch leases across hosts: a cross-host service gsyncd adds to the
  // control plane.
  leases::LeaseService& leases() { return leases_; }

 private:
  // *data: the tensor's address; in device memory, *device says whose.
  Status validate(const Session& s, const Job& job, const proto::SubmitEntry& e,
                  proto::OpShape* shape, void** data, DeviceSpan* device) const;
  Status check_shape(const Job& job, const JobOp& op, const Session& s,
                     const proto::OpShape& shape) const;
  JobOp& op_for(Job& job, const Session& s, const proto::SubmitEntry& e,
                const proto::OpShape& shape);
  void start(Job& job, JobOp& op);
  void run(Job& job, JobOp& op);
  pipeline::OpRequest request(const Job& job, const JobOp& op) const;
  void op_done(const std::string& job_id, const OpId& id, uint64_t serial, const Status& st,
               const pipeline::OpTimes& times);
  bool cross_ready(Job& job);
  void job_ready(const std::string& job_id);
  void job_broken(const std::string& job_id, const Status& why);
  void rank_died(Job& job, const Session& s, const std::string& reason);
  void finish(Job& job, const OpId& id, const Status& st, const pipeline::OpTimes* times = nullptr);
  void finish_op(Job& job, std::unique_ptr<JobOp> op, const Status& st,
                 const pipeline::OpTimes* times);
  void fail_pending(Job& job, const Status& st);
  void reply(const std::shared_ptr<Session>& s, uint64_t tag, const Status& st,
             uint64_t value = 0);
  void remember_failure(Job& job, const OpId& id, const Status& st, uint64_t world);
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
  void wait_for_world(Job& job, const std::shared_ptr<Session>& s, uint64_t tag);
  void maybe_erase(const std::string& job_id);
  std::string missing_ranks(const Job& job, const JobOp& op) const;
  // Batch leases (leasing.cc).
  void lease(const std::shared_ptr<Session>& s, Job& job, const proto::SubmitEntry& e);
  int keeper(const Job& job) const;
  // A push was submitted: counted; true when the job leases and so the
  // clock's pushes start together (done here, or once the last is in).
  bool count_push(Job& job, int local_rank, uint64_t clock);
  void start_ready(Job& job, bool pushes_of_clock_only = false, uint64_t clock = 0);
  void depart(Job& job, const Session& s, const std::string& reason);
  void settle_pushes(Job& job, const JobOp& op);
  // The straggler report (job_report.cc): an op's arrivals into its book,
  // a warning when one rank is the straggler; per rank, its lags; and
  // per host of the job, its lags.
  void note_arrivals(Job& job, const JobOp& op);
  // The same for a cross-host op's hosts (the job's HostLagBook).
  void note_host_arrivals(Job& job, const HostArrivals& hosts);
  nlohmann::json host_report(const Job& job) const;
  nlohmann::json straggler_report(const Job& job) const;
  nlohmann::json elastic_report(const Job& job) const;
  void expire(Job& job, Clock::time_point now);

  const DaemonConfig& cfg_;
  pipeline::Pipeline& pipeline_;
  cluster::ControlPlane* control_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  GlobalStats stats_;
  OpHistory history_;
  leases::LeaseService leases_;
  std::shared_ptr<const tuning::TuneTable> tuning_;
};

}  // namespace gsync
