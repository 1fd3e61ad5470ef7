// SPDX-License-Identifier: Apache-2.0
//
// The jobs layer's part in elastic jobs (docs/membership.md, "Elastic
// jobs"). The control plane forms and agrees on each world; here a world
// adopted renumbers this host's ranks, ends the ops of the world before,
// and answers the ranks that asked for it (gsync_world). A rank's ops are
// taken only in the world it last asked for: its first submission after a
// change gets GSYNC_ERR_WORLD_CHANGED, which is the step boundary every
// rank of the job crosses, whatever it was doing when the change came.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/jobs/job_manager.h"
#include "protocol/world.h"

namespace gsync {

Job* JobManager::job_by_wire(const std::string& name) {
  if (auto it = jobs_.find(name); it != jobs_.end()) return it->second.get();
  size_t at = name.rfind('#');
  if (at == std::string::npos) return nullptr;
  auto it = jobs_.find(name.substr(0, at));
  if (it == jobs_.end() || !it->second->elastic() || it->second->world_name != name)
    return nullptr;  // a world before this host's current one
  return it->second.get();
}

void JobManager::elastic_complete(Job& job) {
  if (control_) {
    control_->elastic_local_complete(job.id, job.local_size, job.min_hosts, job.max_hosts);
    return;
  }
  // A daemon without a cluster: the world is this host, formed at once.
  cluster::ElasticWorldView w;
  w.epoch = cluster::epoch_of(cluster::epoch_counter(job.world_epoch) + 1, 0);
  w.hosts = {{0, job.local_size}};
  w.reason = "formed on this host (no cluster)";
  world_changed(job.id, w);
}

void JobManager::elastic_rank_left(Job& job, const Session& s) {
  job.world_waiters.erase(
      std::remove_if(job.world_waiters.begin(), job.world_waiters.end(),
                     [&](const Job::WorldWaiter& w) { return w.session.get() == &s; }),
      job.world_waiters.end());
  // Peers fail what this host can no longer give (JobLeave under the
  // world's name); the leader forms the next world without this host.
  if (control_ && job.in_world && job.multi_host())
    control_->local_rank_left(job.world_name, s.rank, s.peer.pid, "left the elastic job");
  // Ops of the world it last ran in may still be crossing elsewhere
  // (elastic_jobs.cc, world_changed): those it did not give fail there now,
  // with why its world changed (the host whose loss began it).
  const uint64_t seen = job.slots[size_t(s.local_rank)].world_seen;
  if (control_ && job.multi_host() && seen != 0 && seen != job.world_epoch)
    control_->local_rank_left(cluster::ElasticBook::world_name(job.id, seen), s.rank, s.peer.pid,
                              fmt::format("left the elastic job after its world changed ({})",
                                          job.world_reason));
  if (control_) control_->elastic_local_left(job.id);
  job.in_world = false;
}

void JobManager::world_changed(const std::string& job_id, const cluster::ElasticWorldView& w) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second->elastic()) return;  // no ranks of it here
  Job& job = *it->second;
  const int self = control_ ? control_->self() : 0;
  job.world_epoch = w.epoch;
  job.world_reason = w.reason;
  if (!job.world_name.empty()) pipeline_.world_closed(job.world_name);
  job.world_name = cluster::ElasticBook::world_name(job.id, w.epoch);
  job.worlds_used.push_back(job.world_name);
  job.remote_broken = Status::ok();  // a loss before this world is behind it
  Status ended(GSYNC_ERR_WORLD_CHANGED,
               fmt::format("job {}: its world changed to epoch {:x} ({}): call gsync_world, "
                           "then go on from the next step",
                           job.id, w.epoch, w.reason));
  if (w.failed) {
    job.world_end = Status(GSYNC_ERR_HOST_LOST,
                           fmt::format("job {}: the elastic job ended: {}", job.id, w.reason));
    ended = job.world_end;
    job.in_world = false;
    job.world_hosts = 0;
  } else {
    const int offset = w.offset_of(self);
    job.in_world = offset >= 0;
    job.world_hosts = static_cast<int>(w.hosts.size());
    job.world_size = job.in_world ? w.world_size() : job.local_size;
    for (size_t l = 0; l < job.slots.size(); l++)
      if (const auto& s = job.slots[l].session) {
        s->rank = job.in_world ? offset + static_cast<int>(l) : -1;
        s->world_size = job.in_world ? job.world_size : 0;
      }
  }
  // The ops of the world before that this host has not begun fail now,
  // and the hosts that began them hear it. Those already crossing run on,
  // even when the job ended: every host of their world gave its part or
  // will be refused it (and says so, abort_unbegun), so they end by
  // themselves, by a host's loss, by a rank's leave or by their timeout.
  // Aborting them here would fail the last step of ranks whose peer
  // finished it and exited a moment earlier (with min_hosts at the job's
  // size that exit is what ends the job). Their (key, step) is free for
  // the new world at once.
  std::vector<OpId> pending;
  for (auto& [id, op] : job.ops) {
    if (!op->running()) {
      pending.push_back(id);
      continue;
    }
    job.old_ops[op->serial()] = std::move(op);
  }
  std::erase_if(job.ops, [](const auto& kv) { return kv.second == nullptr; });
  for (const auto& id : pending) {
    const ops::Op& op = *job.ops[id];
    Status st(ended.code(), fmt::format("{}: {}", op.describe(job.id), ended.message()));
    if (!job.worlds_used.empty() && op.world() != 0)
      pipeline_.abort_unbegun(cluster::ElasticBook::world_name(job.id, op.world()), id, st);
    finish(job, id, st);
  }
  if (!job.world_end.is_ok()) {
    job.last_error = job.world_end.message();
    for (auto& wt : job.world_waiters) reply(wt.session, wt.tag, job.world_end);
    job.world_waiters.clear();
    return;
  }
  spdlog::info("job {}: this host's {} ranks are {} in world epoch {:x} ({} hosts, {} ranks)",
               job.id, job.local_size,
               job.in_world ? fmt::format("{}..{}", w.offset_of(self),
                                          w.offset_of(self) + job.local_size - 1)
                            : std::string("not"),
               w.epoch, w.hosts.size(), w.world_size());
  answer_world_waiters(job);
}

// Answered when a world forms with this host in it. One waiter per rank: a
// rank that asks again (its wait timed out) gets its earlier ask ended.
void JobManager::wait_for_world(Job& job, const std::shared_ptr<Session>& s, uint64_t tag) {
  for (auto& wt : job.world_waiters)
    if (wt.session == s) {
      reply(s, wt.tag, Status(GSYNC_ERR_TIMEOUT, fmt::format("job {}: gsync_world asked again "
                                                             "before a world formed",
                                                             job.id)));
      wt.tag = tag;
      return;
    }
  job.world_waiters.push_back({s, tag});
}

bool JobManager::world_settled(Job& job) {
  if (job.world_epoch == 0 || !job.in_world || !job.world_end.is_ok()) return false;
  if (!job.multi_host()) return true;
  return control_->elastic_world_linked(job.id) && cross_ready(job);
}

void JobManager::answer_world(Job& job, const std::shared_ptr<Session>& s, uint64_t tag) {
  proto::WorldView w;
  w.epoch = job.world_epoch;
  w.world_size = job.world_size;
  w.rank = s->rank;
  w.local_rank = s->local_rank;
  w.local_size = job.local_size;
  if (job.elastic())
    w.hosts = job.world_hosts;
  else
    w.hosts = job.multi_host() && control_ ? int(control_->participants(job.id).size()) : 1;
  job.slots[size_t(s->local_rank)].world_seen = job.world_epoch;
  reply(s, tag, Status(GSYNC_OK, proto::to_text(w)));
}

void JobManager::answer_world_waiters(Job& job) {
  if (job.world_waiters.empty() || !world_settled(job)) return;
  auto waiters = std::move(job.world_waiters);
  job.world_waiters.clear();
  for (auto& wt : waiters)
    if (!wt.session->closed) answer_world(job, wt.session, wt.tag);
}

bool JobManager::elastic_submit(const std::shared_ptr<Session>& s, Job& job,
                                const proto::SubmitEntry& e, const proto::OpShape& shape) {
  if (shape.opcode == proto::Opcode::kWorld) {
    if (!job.world_end.is_ok())
      reply(s, e.tag, job.world_end);
    else if (world_settled(job))
      answer_world(job, s, e.tag);
    else
      wait_for_world(job, s, e.tag);
    return true;
  }
  const std::string what = fmt::format("job {} key {} step {}", job.id, e.key, e.step);
  if (proto::is_ps(shape.opcode) || shape.opcode == proto::Opcode::kLease) {
    reply(s, e.tag, Status(GSYNC_ERR_UNSUPPORTED,
                           fmt::format("{}: an elastic job runs allreduce, broadcast and barrier; "
                                       "the parameter server and batch leases keep per-host "
                                       "state that a changing world would lose",
                                       what)));
    return true;
  }
  RankSlot& slot = job.slots[size_t(s->local_rank)];
  if (job.world_end.is_ok() && job.world_epoch != 0 && job.in_world &&
      slot.world_seen == job.world_epoch)
    return false;
  std::string why;
  if (!job.world_end.is_ok())
    why = job.world_end.message();
  else if (job.world_epoch == 0)
    why = "the elastic job has no world yet; call gsync_world (it waits until min_hosts hosts "
          "have all their ranks)";
  else if (!job.in_world)
    why = fmt::format("this host is not in the job's world (epoch {:x}: {}); call gsync_world, "
                      "which waits until it is",
                      job.world_epoch, job.world_reason);
  else
    why = fmt::format("the job's world changed to epoch {:x} ({}): {} hosts, {} ranks; call "
                      "gsync_world, then go on from the next step",
                      job.world_epoch, job.world_reason, job.world_hosts, job.world_size);
  Status st(job.world_end.is_ok() ? GSYNC_ERR_WORLD_CHANGED : job.world_end.code(),
            what + ": " + why);
  // A host that began this op in the rank's old world waits for its part.
  if (slot.world_seen != 0 && slot.world_seen != job.world_epoch)
    pipeline_.abort_unbegun(cluster::ElasticBook::world_name(job.id, slot.world_seen),
                            OpId{e.key, e.step}, st);
  reply(s, e.tag, st);
  return true;
}

}  // namespace gsync
