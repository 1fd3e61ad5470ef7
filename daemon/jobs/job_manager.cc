// SPDX-License-Identifier: Apache-2.0
#include "daemon/jobs/job_manager.h"

#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/reduce/reduce.h"

namespace gsync {

namespace {

// "allreduce of 100 float32 (sum)" - what one rank asked for.
std::string shape_of(uint8_t opcode, uint64_t count, uint8_t dtype, uint8_t redop, int32_t root) {
  switch (opcode) {
    case proto::kOpAllreduce:
      return fmt::format("allreduce of {} {} ({})", count, dtype_name(dtype), redop_name(redop));
    case proto::kOpBroadcast:
      return fmt::format("broadcast of {} {} from rank {}", count, dtype_name(dtype), root);
    default:
      return opcode_name(opcode);
  }
}

constexpr uint64_t kMaxTimeoutMs = 24ull * 3600 * 1000;
constexpr size_t kMaxTombstones = 4096;

}  // namespace

Status JobManager::check_join(const JoinRequest& r) const {
  if (r.job_id.empty()) return {GSYNC_ERR_INVALID, "job id is empty"};
  for (char c : r.job_id)
    if (c < 0x21 || c > 0x7e)
      return {GSYNC_ERR_INVALID, fmt::format("job id '{}' has a character outside printable ASCII",
                                             r.job_id)};
  if (r.world_size < 1 || r.local_size < 1 || r.local_size > r.world_size || r.rank < 0 ||
      r.rank >= r.world_size || r.local_rank < 0 || r.local_rank >= r.local_size)
    return {GSYNC_ERR_INVALID,
            fmt::format("job {}: inconsistent shape world_size={} rank={} local_size={} "
                        "local_rank={}",
                        r.job_id, r.world_size, r.rank, r.local_size, r.local_rank)};
  if (r.world_size != r.local_size && !cross_)
    return {GSYNC_ERR_REFUSED,
            fmt::format("job {}: world_size {} spans more hosts than this one (local_size {}), but "
                        "this daemon has no cluster configured",
                        r.job_id, r.world_size, r.local_size)};
  auto it = jobs_.find(r.job_id);
  if (it == jobs_.end()) return Status::ok();
  const Job& job = *it->second;
  if (job.world_size != r.world_size || job.local_size != r.local_size)
    return {GSYNC_ERR_REFUSED,
            fmt::format("job {} has world_size {} local_size {}, but rank {} says world_size {} "
                        "local_size {}",
                        r.job_id, job.world_size, job.local_size, r.rank, r.world_size,
                        r.local_size)};
  for (size_t l = 0; l < job.slots.size(); l++) {
    const auto& s = job.slots[l].session;
    if (!s) continue;
    if (static_cast<int>(l) == r.local_rank)
      return {GSYNC_ERR_REFUSED, fmt::format("job {} local rank {} is already held by {}",
                                             r.job_id, r.local_rank, s->describe())};
    if (s->rank == r.rank)
      return {GSYNC_ERR_REFUSED,
              fmt::format("job {} rank {} is already held by {}", r.job_id, r.rank, s->describe())};
  }
  return Status::ok();
}

void JobManager::attach(const std::shared_ptr<Session>& s) {
  auto& job = jobs_[s->job_id];
  if (!job) {
    job = std::make_unique<Job>(s->job_id, s->world_size, s->local_size);
    spdlog::info("job {}: created by {} (world_size {}, local_size {})", s->job_id,
                 s->describe(), s->world_size, s->local_size);
  }
  RankSlot& slot = job->slots[static_cast<size_t>(s->local_rank)];
  if (slot.dead)
    spdlog::info("job {}: {} rejoined in place of pid {}", job->id, s->describe(), slot.dead_pid);
  slot = RankSlot{};
  slot.session = s;
  if (cross_ && job->world_size > job->local_size && job->live_ranks() == job->local_size)
    cross_->local_job_complete(*job);
}

void JobManager::set_cross_host(CrossHost* cross) {
  cross_ = cross;
  cross_->on_job_ready = [this](const std::string& job) { job_ready(job); };
  cross_->on_job_broken = [this](const std::string& job_id, const Status& why) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    Job& job = *it->second;
    if (job.remote_broken) job.remote_broken = why;
    job.last_error = job.remote_broken.message();
    fail_pending(job, job.remote_broken);
  };
}

bool JobManager::cross_ready(Job& job) {
  if (!cross_->job_ready(job)) return false;
  // Every host has announced the job (again): a departure recorded before
  // is over.
  job.remote_broken = Status::ok();
  return true;
}

void JobManager::job_ready(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  if (!cross_ready(job)) return;
  std::vector<OpId> waiting;
  for (const auto& [id, op] : job.ops)
    if (!op->running && op->arrived == job.local_size) waiting.push_back(id);
  for (const auto& id : waiting) start_multi(job, *job.ops[id]);
}

void JobManager::detach(const std::shared_ptr<Session>& s, const std::string& reason) {
  auto it = jobs_.find(s->job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  RankSlot& slot = job.slots[static_cast<size_t>(s->local_rank)];
  if (slot.session != s) return;
  slot.session.reset();
  if (cross_ && job.world_size > job.local_size)
    cross_->local_rank_left(job, s->rank, s->peer.pid, reason);
  if (job.live_ranks() > 0) {
    // The job goes on without this rank only once it rejoins; until then
    // nothing can complete, so say so now rather than at the timeout.
    slot.dead = true;
    slot.dead_rank = s->rank;
    slot.dead_pid = s->peer.pid;
    slot.dead_reason = reason;
    Status st(GSYNC_ERR_RANK_DEAD, fmt::format("job {}: rank {} (local {}, pid {}) {}", job.id,
                                               s->rank, s->local_rank, s->peer.pid, reason));
    size_t pending = 0;
    for (const auto& [id, op] : job.ops) pending += op->running ? 0 : 1;
    if (cross_) {
      // Ops already in the cross-host step end there, once no peer can
      // still write into their buffers.
      std::vector<OpId> crossing;
      for (const auto& [id, op] : job.ops)
        if (op->running && op->stage == Op::Stage::kCross) crossing.push_back(id);
      for (const auto& id : crossing)
        cross_->abort(job.id, id, Status(st.code(), fmt::format("{}: {}", job.ops[id]->describe(job.id), st.message())));
    }
    if (pending) {
      job.last_error = st.message();
      spdlog::warn("{}; failing its {} pending ops", st.message(), pending);
      fail_pending(job, st);
    } else {
      spdlog::info("{}; the job waits for it to rejoin", st.message());
    }
  }
  maybe_erase(s->job_id);
}

void JobManager::maybe_erase(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second->live_ranks() > 0) return;
  for (const auto& [id, op] : it->second->ops)
    if (op->running) return;  // erased when the executor hands it back
  spdlog::info("job {}: last rank left; job closed ({} ops completed, {} failed)", job_id,
               it->second->ops_completed, it->second->ops_failed);
  jobs_.erase(it);
}

Status JobManager::validate(const Session& s, const Job& job, const proto::SubmitEntry& e,
                            void** data) const {
  auto bad = [&](int code, const std::string& what) {
    return Status(code, fmt::format("{}: submission tag {} key {} step {}: {}", s.describe(), e.tag,
                                    e.key, e.step, what));
  };
  if (e.flags != 0 || e.reserved != 0)
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("flags {:#x} / reserved {:#x} must be 0", e.flags,
                                               e.reserved));
  if (e.opcode != proto::kOpAllreduce && e.opcode != proto::kOpBroadcast &&
      e.opcode != proto::kOpBarrier)
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown opcode {}", e.opcode));
  if (e.timeout_ms > kMaxTimeoutMs)
    return bad(GSYNC_ERR_INVALID, fmt::format("timeout {} ms is over 24 h", e.timeout_ms));
  *data = nullptr;
  if (e.opcode == proto::kOpBarrier) {
    if (e.count != 0) return bad(GSYNC_ERR_PROTOCOL, "a barrier carries no tensor (count must be 0)");
    return Status::ok();
  }
  if (e.key == proto::kBarrierKey)
    return bad(GSYNC_ERR_PROTOCOL, "key 0xffffffffffffffff is reserved for barriers");
  size_t elem = proto::dtype_size(e.dtype);
  if (elem == 0) return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown dtype {}", e.dtype));
  if (e.opcode == proto::kOpAllreduce) {
    if (e.redop > 4) return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown reduce op {}", e.redop));
    if (!reduce::supported(static_cast<reduce::DType>(e.dtype), static_cast<reduce::Op>(e.redop)))
      return bad(GSYNC_ERR_UNSUPPORTED, fmt::format("{} is not defined on {}", redop_name(e.redop),
                                                    dtype_name(e.dtype)));
    if (e.redop == 2 && (!std::isfinite(e.weight) || e.weight < 0))
      return bad(GSYNC_ERR_INVALID, fmt::format("weight {} must be finite and >= 0", e.weight));
  } else if (e.root < 0 || e.root >= job.world_size) {
    return bad(GSYNC_ERR_INVALID,
               fmt::format("broadcast root {} is not a rank of a {}-rank job", e.root, job.world_size));
  }
  if (e.count > (uint64_t{1} << 48) / elem)
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("count {} is absurd", e.count));
  uint64_t bytes = e.count * elem;
  if (!s.arena_range(e.offset, bytes, data))
    return bad(GSYNC_ERR_PROTOCOL,
               fmt::format("tensor at arena offset {} of {} bytes ends past the {}-byte arena",
                           e.offset, bytes, s.arena_bytes()));
  return Status::ok();
}

Status JobManager::check_shape(const Job& job, const Op& op, const Session& s,
                               const proto::SubmitEntry& e) const {
  bool same = op.opcode == e.opcode && op.count == e.count &&
              (op.opcode == proto::kOpBarrier || op.dtype == e.dtype) &&
              (op.opcode != proto::kOpAllreduce || op.redop == e.redop) &&
              (op.opcode != proto::kOpBroadcast || op.root == e.root);
  if (same) return Status::ok();
  const Session& first = *op.arrivals[static_cast<size_t>(op.first)].session;
  return {GSYNC_ERR_MISMATCH,
          fmt::format("job {} key {} step {}: ranks disagree: rank {} (pid {}) submitted {}, rank "
                      "{} (pid {}) submitted {}",
                      job.id, e.key, e.step, first.rank, first.peer.pid,
                      shape_of(op.opcode, op.count, op.dtype, op.redop, op.root), s.rank,
                      s.peer.pid, shape_of(e.opcode, e.count, e.dtype, e.redop, e.root))};
}

void JobManager::submit(const std::shared_ptr<Session>& s, const proto::SubmitEntry& e) {
  auto jit = jobs_.find(s->job_id);
  if (jit == jobs_.end()) return;
  Job& job = *jit->second;
  void* data = nullptr;
  if (Status st = validate(*s, job, e, &data); !st) {
    spdlog::warn("{}", st.message());
    reply(s, e.tag, st);
    return;
  }
  OpId id{e.key, e.step};
  if (const RankSlot* dead = job.first_dead()) {
    reply(s, e.tag,
          Status(GSYNC_ERR_RANK_DEAD,
                 fmt::format("job {} key {} step {}: rank {} (pid {}) {}; no op can complete "
                             "until it rejoins",
                             job.id, e.key, e.step, dead->dead_rank, dead->dead_pid,
                             dead->dead_reason)));
    return;
  }
  if (const auto* t = job.find_tombstone(id)) {
    reply(s, e.tag, t->status);
    return;
  }
  auto& slot = job.ops[id];
  if (!slot) {
    slot = std::make_unique<Op>();
    Op& op = *slot;
    op.id = id;
    op.opcode = e.opcode;
    op.dtype = e.dtype;
    op.redop = e.redop;
    op.count = e.count;
    op.root = e.root;
    op.first = s->local_rank;
    op.arrivals.resize(static_cast<size_t>(job.local_size));
    op.started = Clock::now();
    op.timeout_ms = e.timeout_ms ? e.timeout_ms : s->timeout_ms;
    op.deadline = op.started + std::chrono::milliseconds(op.timeout_ms);
  }
  Op& op = *slot;
  Arrival& a = op.arrivals[static_cast<size_t>(s->local_rank)];
  if (a.session || op.running) {
    reply(s, e.tag, Status(GSYNC_ERR_PROTOCOL,
                           fmt::format("{}: submitted {} twice", s->describe(),
                                       op.describe(job.id))));
    return;
  }
  if (Status st = check_shape(job, op, *s, e); !st) {
    spdlog::warn("{}", st.message());
    reply(s, e.tag, st);
    finish(job, id, st);
    return;
  }
  a.session = s;
  a.tag = e.tag;
  a.data = data;
  a.weight = e.weight;
  // The shortest timeout any rank asked for wins.
  if (e.timeout_ms && e.timeout_ms < op.timeout_ms) {
    op.timeout_ms = e.timeout_ms;
    op.deadline = op.started + std::chrono::milliseconds(op.timeout_ms);
  }
  if (++op.arrived == job.local_size) start(job, op);
}

void JobManager::start(Job& job, Op& op) {
  if (job.world_size > job.local_size) {
    // Waits until every host of the job has announced its ranks; fails at
    // once while a remote rank that left has not rejoined.
    if (cross_ready(job)) {
      start_multi(job, op);
    } else if (!job.remote_broken) {
      OpId id = op.id;
      Status st(job.remote_broken.code(),
                fmt::format("{}: {}", op.describe(job.id), job.remote_broken.message()));
      // Hosts that began this op before they heard of the departure wait
      // for this host's part: they fail it now, not at their timeout.
      cross_->abort_unbegun(job.id, id, st);
      finish(job, id, st);
    }
    return;
  }
  op.stage = Op::Stage::kLocal;
  run_stage(job, op);
}

void JobManager::start_multi(Job& job, Op& op) {
  op.world_size = job.world_size;
  op.host_data = op.arrivals[0].data;
  if (op.opcode == proto::kOpBroadcast)
    for (const auto& a : op.arrivals)
      if (a.session->rank == op.root) op.host_data = a.data;
  double weights = 0;
  for (const auto& a : op.arrivals) weights += a.weight;
  op.stage = Op::Stage::kFold;
  op.running = true;
  std::string job_id = job.id;
  OpId id = op.id;
  // The rendezvous goes out now; the fold runs meanwhile, and the
  // cross-host step starts on each chunk the fold has finished.
  cross_->begin(job, op, weights, [this, job_id, id](const Status& st, double weight_total) {
    Job* job = nullptr;
    Op* found = find_op(job_id, id, &job);
    if (!found) return;
    Op& op = *found;
    op.cross_done = true;
    if (!st) {
      // The fold or chunk stores may still be writing the buffers: the op
      // ends when the last of them does.
      op.fail_after_run = st;
      if (op.stage == Op::Stage::kFold || op.store_tasks > 0) return;
      finish(*job, id, st);
      maybe_erase(job_id);
      return;
    }
    op.weight_total = weight_total;
    op.stage = Op::Stage::kStore;
    if (!op.store_by_chunk) {
      run_stage(*job, op);
    } else if (op.store_tasks == 0) {
      finish(*job, id, Status::ok());
      maybe_erase(job_id);
    }
  });
  op.pipeline_elems = cross_->pipeline_elems(job.id, op.id);
  if (op.pipeline_elems) {
    // The store is pipelined too: each chunk is stored into the other local
    // ranks as soon as it holds its final value.
    op.store_by_chunk = true;
    cross_->on_chunk_done(job.id, op.id, [this, job_id, id](uint64_t b, uint64_t e, double w) {
      store_chunk(job_id, id, b, e, w);
    });
  }
  run_stage(job, op);
}

Op* JobManager::find_op(const std::string& job_id, const OpId& id, Job** job) {
  auto jit = jobs_.find(job_id);
  if (jit == jobs_.end()) return nullptr;
  auto oit = jit->second->ops.find(id);
  if (oit == jit->second->ops.end()) return nullptr;
  if (job) *job = jit->second.get();
  return oit->second.get();
}

void JobManager::store_chunk(const std::string& job_id, const OpId& id, uint64_t begin,
                             uint64_t end, double weight_total) {
  Op* found = find_op(job_id, id);
  if (!found) return;
  Op& op = *found;
  op.weight_total = weight_total;
  uint64_t task = executor_.start_store(op, begin, end);
  if (task == 0) return;
  op.store_tasks++;
  running_[task] = Running{job_id, id, true};
}

void JobManager::run_stage(Job& job, Op& op) {
  uint64_t task = executor_.start(op);
  if (task == 0) {
    stage_done(job, op);
    return;
  }
  running_[task] = Running{job.id, op.id};
}

void JobManager::stage_done(Job& job, Op& op) {
  if (op.stage == Op::Stage::kFold) {
    op.stage = Op::Stage::kCross;
    if (!op.fail_after_run.is_ok()) {
      if (op.store_tasks == 0) finish(job, op.id, op.fail_after_run);
      return;
    }
    cross_->local_ready(job.id, op.id);
    return;
  }
  finish(job, op.id, Status::ok());
}

void JobManager::executor_progress(uint64_t task_id, size_t done) {
  auto it = running_.find(task_id);
  if (it == running_.end()) return;
  Op* op = find_op(it->second.job, it->second.id);
  if (!op || op->stage != Op::Stage::kFold) return;
  cross_->local_ready_upto(it->second.job, it->second.id, done);
}

void JobManager::executor_done(uint64_t task_id) {
  auto it = running_.find(task_id);
  if (it == running_.end()) return;
  Running r = it->second;
  running_.erase(it);
  Job* job = nullptr;
  if (Op* op = find_op(r.job, r.id, &job)) {
    if (!r.chunk_store) {
      stage_done(*job, *op);
    } else if (--op->store_tasks == 0 && op->cross_done && op->stage != Op::Stage::kFold) {
      // The last chunk's store, after the cross-host step ended.
      finish(*job, r.id, op->fail_after_run);
    }
  }
  maybe_erase(r.job);
}

void JobManager::finish(Job& job, const OpId& id, const Status& st) {
  auto it = job.ops.find(id);
  if (it == job.ops.end()) return;
  std::unique_ptr<Op> op = std::move(it->second);
  job.ops.erase(it);
  for (auto& a : op->arrivals)
    if (a.session) reply(a.session, a.tag, st);
  auto now = Clock::now();
  if (st) {
    job.ops_completed++;
    stats_.ops_completed++;
    uint64_t bytes = op->bytes() * static_cast<uint64_t>(job.local_size);
    job.bytes_reduced += bytes;
    stats_.bytes_reduced += bytes;
    job.meter.add(bytes, now);
    stats_.meter.add(bytes, now);
    for (auto& a : op->arrivals)
      if (a.session) a.session->stats.bytes += op->bytes();
  } else {
    job.ops_failed++;
    stats_.ops_failed++;
    job.last_error = st.message();
    remember_failure(job, id, st);
  }
}

void JobManager::remember_failure(Job& job, const OpId& id, const Status& st) {
  auto now = Clock::now();
  while (!job.tombstones.empty() &&
         (job.tombstones.front().expires < now || job.tombstones.size() >= kMaxTombstones))
    job.tombstones.pop_front();
  // Kept twice the op timeout: long enough for any straggler of this op.
  job.tombstones.push_back({id, st, now + 2 * std::chrono::milliseconds(cfg_.op_timeout_ms)});
}

void JobManager::fail_pending(Job& job, const Status& st) {
  std::vector<OpId> ids;
  for (const auto& [id, op] : job.ops)
    if (!op->running) ids.push_back(id);  // a running op has all its data: let it finish
  for (const auto& id : ids) {
    std::string what = job.ops[id]->describe(job.id);
    finish(job, id, Status(st.code(), fmt::format("{}: {}", what, st.message())));
  }
}

std::string JobManager::missing_ranks(const Job& job, const Op& op) const {
  std::string out;
  for (size_t l = 0; l < op.arrivals.size(); l++) {
    if (op.arrivals[l].session) continue;
    if (!out.empty()) out += ", ";
    const auto& s = job.slots[l].session;
    if (s)
      out += fmt::format("rank {} (local {}, pid {})", s->rank, l, s->peer.pid);
    else
      out += fmt::format("local rank {} (not connected)", l);
  }
  return out;
}

void JobManager::check_timeouts(Clock::time_point now) {
  // Failing an op can end its job (and erase it): walk a copy of the names.
  std::vector<std::string> names;
  for (const auto& [name, job] : jobs_) names.push_back(name);
  for (const auto& name : names) {
    auto jit = jobs_.find(name);
    if (jit == jobs_.end()) continue;
    Job* job = jit->second.get();
    std::vector<std::pair<OpId, Status>> expired;
    std::vector<std::pair<OpId, Status>> cross_expired;
    for (const auto& [id, op] : job->ops) {
      if (now < op->deadline) continue;
      if (op->running && op->stage == Op::Stage::kCross &&
          now < op->deadline + cross_->timeout_grace(job->id, id))
        continue;
      if (op->running) {
        // Only the cross-host stage can wait on others; fold and store end
        // on their own.
        if (op->stage == Op::Stage::kCross)
          cross_expired.emplace_back(
              id, Status(GSYNC_ERR_TIMEOUT,
                         fmt::format("{} timed out after {} ms in the cross-host step: {}",
                                     op->describe(job->id), op->timeout_ms,
                                     cross_->waiting_for(job->id, id))));
        continue;
      }
      std::string missing = op->arrived < job->local_size
                                ? fmt::format("{} of {} local ranks arrived; not arrived: {}",
                                              op->arrived, job->local_size, missing_ranks(*job, *op))
                                : fmt::format("all {} local ranks arrived, but the job is not "
                                              "complete across hosts: {}",
                                              job->local_size, cross_->job_missing(*job));
      expired.emplace_back(id, Status(GSYNC_ERR_TIMEOUT,
                                      fmt::format("{} timed out after {} ms: {}",
                                                  op->describe(job->id), op->timeout_ms, missing)));
    }
    for (auto& [id, st] : expired) {
      spdlog::warn("{}", st.message());
      finish(*job, id, st);
    }
    for (auto& [id, st] : cross_expired) {
      spdlog::warn("{}", st.message());
      cross_->abort(name, id, st);
    }
  }
}

void JobManager::reply(const std::shared_ptr<Session>& s, uint64_t tag, const Status& st) {
  if (s->closed) return;
  if (Status err = s->complete(tag, st.code(), st.message()); !err) {
    if (on_broken_session) on_broken_session(s, err);
  }
}

uint64_t JobManager::in_flight() const {
  uint64_t n = 0;
  for (const auto& [name, job] : jobs_) n += job->ops.size();
  return n;
}

}  // namespace gsync
