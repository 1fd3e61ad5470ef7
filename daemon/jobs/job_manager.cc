// SPDX-License-Identifier: Apache-2.0
#include "daemon/jobs/job_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/shm/client_checks.h"

namespace gsync {

JobManager::JobManager(const DaemonConfig& cfg, pipeline::Pipeline& pipeline,
                       cluster::ControlPlane* control)
    : cfg_(cfg), pipeline_(pipeline), control_(control),
      history_(cfg.trace_ring_ops, cfg.trace_record), leases_(control) {
  subscribe_op_ends();
  if (!control_) return;
  control_->on_job_ready = [this](const std::string& job) { job_ready(job); };
  control_->on_job_broken = [this](const std::string& job, const Status& why) {
    job_broken(job, why);
  };
  control_->on_world = [this](const std::string& job, const cluster::ElasticWorldView& w) {
    world_changed(job, w);
  };
}

Status JobManager::check_join(const JoinRequest& r) {
  if (Status st = check_join_request(r, control_ != nullptr); !st) return st;
  auto it = jobs_.find(r.job_id);
  if (it == jobs_.end()) return Status::ok();
  const Job& job = *it->second;
  const int min_hosts = job.elastic() ? job.world->min_hosts() : 0;
  const int max_hosts = job.elastic() ? job.world->max_hosts() : 0;
  if (min_hosts != r.min_hosts || max_hosts != r.max_hosts)
    return {GSYNC_ERR_REFUSED,
            fmt::format("job {} has min_hosts {} max_hosts {}, but local rank {} says {} and {}",
                        r.job_id, min_hosts, max_hosts, r.local_rank, r.min_hosts, r.max_hosts)};
  if (job.elastic() ? job.local_size != r.local_size
                    : job.world_size != r.world_size || job.local_size != r.local_size)
    return {GSYNC_ERR_REFUSED,
            fmt::format("job {} has world_size {} local_size {}, but rank {} says world_size {} "
                        "local_size {}",
                        r.job_id, job.world_size, job.local_size, r.rank, r.world_size,
                        r.local_size)};
  proto::Sync sync;
  proto::from_wire(r.sync, &sync);  // check_join_request took it
  if (!(sync == job.sync))
    return {GSYNC_ERR_REFUSED, fmt::format("job {} is {}, but rank {} says {}", r.job_id,
                                           proto::describe(job.sync), r.rank,
                                           proto::describe(sync))};
  proto::Guard guard;
  proto::from_wire_guard(r.guard, &guard);  // check_join_request took it
  if (!(guard == job.guard))
    return {GSYNC_ERR_REFUSED, fmt::format("job {} has the anomaly guard {}, but rank {} says {}",
                                           r.job_id, proto::describe(job.guard), r.rank,
                                           proto::describe(guard))};
  proto::PlanChoice plan;
  proto::from_wire_plan(r.plan, &plan);  // check_join_request took it
  if (!(plan == job.plan))
    return {GSYNC_ERR_REFUSED, fmt::format("job {} chose the plan '{}', but rank {} says '{}'",
                                           r.job_id, proto::describe(job.plan), r.rank,
                                           proto::describe(plan))};
  if (job.slots[static_cast<size_t>(r.local_rank)].departed)
    return {GSYNC_ERR_REFUSED,
            fmt::format("job {}: local rank {} left a job that leases batches, which went on "
                        "without it; a rank cannot rejoin it (start the job again, and it "
                        "resumes from its checkpoints)",
                        r.job_id, r.local_rank)};
  for (size_t l = 0; l < job.slots.size(); l++) {
    const auto& s = job.slots[l].session;
    if (!s) continue;
    if (static_cast<int>(l) == r.local_rank)
      return {GSYNC_ERR_REFUSED, fmt::format("job {} local rank {} is already held by {}",
                                             r.job_id, r.local_rank, s->describe())};
    if (!job.elastic() && s->rank == r.rank)
      return {GSYNC_ERR_REFUSED,
              fmt::format("job {} rank {} is already held by {}", r.job_id, r.rank, s->describe())};
  }
  return Status::ok();
}

void JobManager::attach(const std::shared_ptr<Session>& s) {
  if (s->min_hosts > 0) {
    s->rank = -1;  // an elastic job's ranks are numbered by the world they join
    s->world_size = 0;
  }
  auto& job = jobs_[s->job_id];
  if (!job) {
    proto::Sync sync;
    proto::from_wire(s->sync, &sync);  // checked at join
    // An elastic job is on this host alone until it has a world.
    const bool elastic = s->min_hosts > 0;
    job = std::make_unique<Job>(s->job_id, elastic ? s->local_size : s->world_size,
                                s->local_size, sync);
    if (elastic)
      job->world = std::make_unique<worlds::World>(s->job_id, s->min_hosts, s->max_hosts);
    leases_.job_opened(s->job_id);
    proto::from_wire_guard(s->guard, &job->guard);  // checked at join
    proto::from_wire_plan(s->plan, &job->plan);     // checked at join
    // Fixed for the job's life: its results' bits do not move. An elastic
    // job's hosts change, and with them whose table it would plan with.
    if (!elastic) job->tuning = tuning_;
    const std::string shape =
        elastic ? fmt::format("elastic on {}..{} hosts", s->min_hosts,
                              s->max_hosts ? std::to_string(s->max_hosts) : "any")
                : fmt::format("world_size {}", s->world_size);
    spdlog::info("job {}: created by {} ({}, local_size {}, {})", s->job_id, s->describe(),
                 shape, s->local_size, proto::describe(job->sync));
  }
  RankSlot& slot = job->slots[static_cast<size_t>(s->local_rank)];
  if (slot.dead)
    spdlog::info("job {}: {} rejoined in place of pid {}", job->id, s->describe(), slot.dead_pid);
  slot = RankSlot{};
  slot.session = s;
  if (job->elastic()) {
    if (job->live_ranks() == job->local_size) elastic_complete(*job);
    return;
  }
  if (control_ && job->multi_host() && job->live_ranks() == job->local_size) {
    std::vector<int> ranks;
    for (const auto& sl : job->slots) ranks.push_back(sl.session->rank);
    control_->local_job_complete(job->id, job->world_size, std::move(ranks),
                                 job->tuning ? job->tuning->digest() : 0);
  }
}

bool JobManager::cross_ready(Job& job) {
  if (!control_->job_ready(job.wire_name(), job.world_size)) return false;
  // Every host has announced the job (again): a departure recorded before
  // is over.
  job.remote_broken = Status::ok();
  return true;
}

void JobManager::job_ready(const std::string& name) {
  Job* found = job_by_wire(name);
  if (!found) return;
  Job& job = *found;
  if (!cross_ready(job)) return;
  if (job.elastic()) answer_world_waiters(job);
  std::vector<OpId> waiting;
  for (const auto& [id, op] : job.ops)
    if (!op->running() && job.policy->ready(job, *op)) waiting.push_back(id);
  for (const auto& id : waiting) run(job, *job.ops[id]);
}

void JobManager::job_broken(const std::string& name, const Status& why) {
  Job* found = job_by_wire(name);
  if (!found) return;
  Job& job = *found;
  job.remote_departures++;
  if (job.remote_broken) job.remote_broken = why;
  job.last_error = job.remote_broken.message();
  fail_pending(job, job.remote_broken);
}

void JobManager::detach(const std::shared_ptr<Session>& s, const std::string& reason) {
  pipeline_.arena_closed(s->id());
  auto it = jobs_.find(s->job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  RankSlot& slot = job.slots[static_cast<size_t>(s->local_rank)];
  if (slot.session != s) return;
  slot.session.reset();
  if (job.elastic()) {
    elastic_rank_left(job, *s);
    if (job.live_ranks() > 0) rank_died(job, *s, reason);
  } else if (job.leasing && job.live_ranks() > 0) {
    depart(job, *s, reason);  // the job goes on without it
  } else {
    if (control_ && job.multi_host())
      control_->local_rank_left(job.id, s->rank, s->peer.pid, reason);
    if (job.live_ranks() > 0) rank_died(job, *s, reason);
  }
  maybe_erase(s->job_id);
}

// The job goes on without this rank only once it rejoins; until then
// nothing can complete, so say so now rather than at the timeout.
void JobManager::rank_died(Job& job, const Session& s, const std::string& reason) {
  RankSlot& slot = job.slots[static_cast<size_t>(s.local_rank)];
  slot.dead = true;
  slot.dead_rank = s.rank;
  slot.dead_pid = s.peer.pid;
  slot.dead_reason = reason;
  Status st(GSYNC_ERR_RANK_DEAD, fmt::format("job {}: rank {} (local {}, pid {}) {}", job.id,
                                             s.rank, s.local_rank, s.peer.pid, reason));
  size_t pending = 0;
  std::vector<std::pair<uint64_t, std::string>> crossing;
  for (const auto& [id, op] : job.ops) {
    pending += op->running() ? 0 : 1;
    // Ops already in the cross-host step end there, once no peer can
    // still write into their buffers.
    if (op->running() && pipeline_.waits_on_peers(op->serial()))
      crossing.emplace_back(op->serial(), op->describe(job.id));
  }
  for (const auto& [serial, what] : crossing)
    pipeline_.abort(serial, Status(st.code(), fmt::format("{}: {}", what, st.message())));
  if (pending) {
    job.last_error = st.message();
    spdlog::warn("{}; failing its {} pending ops", st.message(), pending);
    fail_pending(job, st);
  } else {
    spdlog::info("{}; the job waits for it to rejoin", st.message());
  }
}

void JobManager::maybe_erase(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second->live_ranks() > 0) return;
  if (it->second->elastic() && it->second->world->crossing()) return;
  for (const auto& [id, op] : it->second->ops)
    if (op->running()) return;  // erased when the pipeline hands it back
  spdlog::info("job {}: last rank left; job closed ({} ops completed, {} failed)", job_id,
               it->second->ops_completed, it->second->ops_failed);
  if (control_ && it->second->elastic()) control_->elastic_closed(job_id);
  std::vector<std::string> worlds;
  if (it->second->elastic()) worlds = it->second->world->take_names();
  jobs_.erase(it);
  pipeline_.job_closed(job_id);
  for (const auto& w : worlds) pipeline_.job_closed(w);
  leases_.job_closed(job_id);
}

// ---------------------------------------------------------------- ops

void JobManager::submit(const std::shared_ptr<Session>& s, const proto::SubmitEntry& e) {
  auto jit = jobs_.find(s->job_id);
  if (jit == jobs_.end()) return;
  Job& job = *jit->second;
  void* data = nullptr;
  DeviceSpan device;
  proto::OpShape shape;
  if (Status st = validate(*s, job, e, &shape, &data, &device); !st) {
    spdlog::warn("{}", st.message());
    reply(s, e.tag, st);
    return;
  }
  OpId id{e.key, e.step};
  if (job.elastic() ? elastic_submit(s, job, e, shape) : shape.opcode == proto::Opcode::kWorld) {
    if (!job.elastic()) answer_world(job, s, e.tag);
    return;
  }
  if (const RankSlot* dead = job.first_dead()) {
    reply(s, e.tag,
          Status(GSYNC_ERR_RANK_DEAD,
                 fmt::format("job {} key {} step {}: rank {} (pid {}) {}; no op can complete "
                             "until it rejoins",
                             job.id, e.key, e.step, dead->dead_rank, dead->dead_pid,
                             dead->dead_reason)));
    return;
  }
  if (shape.opcode == proto::Opcode::kLease) return lease(s, job, e);
  if (const auto* t = job.find_tombstone(id)) {
    reply(s, e.tag, t->status);
    return;
  }
  ops::Op& op = op_for(job, *s, e, shape);
  if (op.has(s->local_rank) || op.running()) {
    reply(s, e.tag, Status(GSYNC_ERR_PROTOCOL, fmt::format("{}: submitted {} twice", s->describe(),
                                                           op.describe(job.id))));
    return;
  }
  if (Status st = check_shape(job, op, *s, shape); !st) {
    spdlog::warn("{}", st.message());
    reply(s, e.tag, st);
    finish(job, id, st);
    return;
  }
  op.arrive(s->local_rank,
            ops::Arrival{s, e.tag, data, std::move(device), e.weight, Clock::now()},
            e.timeout_ms);
  if (proto::is_push(op.shape().opcode) && count_push(job, s->local_rank, op.id().step)) return;
  if (job.policy->ready(job, op)) start(job, op);
}

// The op of (key, step), created by the first rank to arrive, whose shape
// every later rank must match.
ops::Op& JobManager::op_for(Job& job, const Session& s, const proto::SubmitEntry& e,
                          const proto::OpShape& shape) {
  auto& slot = job.ops[OpId{e.key, e.step}];
  if (!slot)
    slot = std::make_unique<ops::Op>(OpId{e.key, e.step}, shape, s.local_rank, job.local_size,
                                     job.world_epoch(), e.timeout_ms ? e.timeout_ms : s.timeout_ms,
                                     Clock::now());
  return *slot;
}

void JobManager::start(Job& job, ops::Op& op) {
  // Its ranks' pushes of this clock are taken: they will be applied.
  if (proto::is_push(op.shape().opcode))
    for (size_t l = 0; l < op.arrivals().size(); l++)
      if (op.arrivals()[l].session)
        job.slots[l].pushes_begun_below =
            std::max(job.slots[l].pushes_begun_below, op.id().step + 1);
  if (!job.multi_host()) return run(job, op);
  // Waits until every host of the job has announced its ranks; fails at
  // once while a remote rank that left has not rejoined.
  if (cross_ready(job)) return run(job, op);
  if (!job.remote_broken) {
    OpId id = op.id();
    Status st(job.remote_broken.code(),
              fmt::format("{}: {}", op.describe(job.id), job.remote_broken.message()));
    // Hosts that began this op before they heard of the departure wait
    // for this host's part: they fail it now, not at their timeout.
    pipeline_.abort_unbegun(job.wire_name(), id, st);
    finish(job, id, st);
  }
}

pipeline::OpRequest JobManager::request(const Job& job, const ops::Op& op) const {
  pipeline::OpRequest r;
  r.job = job.wire_name();
  r.id = op.id();
  r.shape = op.shape();
  r.world_size = job.world_size;
  r.locals = op.contributions();
  if (job.multi_host()) {
    r.hosts = control_->participants(job.wire_name());
    if (op.shape().opcode == proto::Opcode::kBroadcast ||
        op.shape().opcode == proto::Opcode::kPsDeclare)
      r.root_host = control_->host_of(job.wire_name(), op.shape().root);
    r.epoch = control_->epoch();
  }
  r.sync = job.sync;
  r.guard = job.guard;
  r.plan = job.plan;
  r.tuning = job.tuning;
  return r;
}

void JobManager::run(Job& job, ops::Op& op) {
  std::string job_id = job.id;
  OpId id = op.id();
  op.began(pipeline_.start(request(job, op), [this, job_id, id](uint64_t serial,
                                                                const Status& st,
                                                                const pipeline::OpTimes& t) {
    op_done(job_id, id, serial, st, t);
  }));
}

void JobManager::op_done(const std::string& job_id, const OpId& id, uint64_t serial,
                         const Status& st, const pipeline::OpTimes& times) {
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end()) return;
  Job& job = *jit->second;
  if (auto op = job.elastic() ? job.world->take_crossing(serial) : nullptr) {
    // An elastic job's op of an earlier world.
    finish_op(job, std::move(op), st, &times);
    maybe_erase(job_id);
    return;
  }
  auto oit = job.ops.find(id);
  // Only the op that ran: never one that took its (key, step) since.
  if (oit == job.ops.end() || oit->second->serial() != serial) return;
  finish(job, id, st, &times);
  maybe_erase(job_id);
}

void JobManager::finish(Job& job, const OpId& id, const Status& st,
                        const pipeline::OpTimes* times) {
  auto it = job.ops.find(id);
  if (it == job.ops.end()) return;
  std::unique_ptr<ops::Op> op = std::move(it->second);
  job.ops.erase(it);
  finish_op(job, std::move(op), st, times);
}

void JobManager::fail_pending(Job& job, const Status& st) {
  std::vector<OpId> ids;
  for (const auto& [id, op] : job.ops)
    if (!op->running()) ids.push_back(id);  // a running op has all its data: let it finish
  for (const auto& id : ids) {
    std::string what = job.ops[id]->describe(job.id);
    finish(job, id, Status(st.code(), fmt::format("{}: {}", what, st.message())));
  }
}

void JobManager::reply(const std::shared_ptr<Session>& s, uint64_t tag, const Status& st,
                       uint64_t value) {
  if (s->closed) return;
  if (Status err = s->complete(tag, st.code(), st.message(), value); !err) {
    if (on_broken_session) on_broken_session(s, err);
  }
}

uint64_t JobManager::in_flight() const {
  uint64_t n = 0;
  for (const auto& [name, job] : jobs_) n += job->ops.size();
  return n;
}

}  // namespace gsync
