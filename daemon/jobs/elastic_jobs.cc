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
  if (it == jobs_.end() || !it->second->elastic() || it->second->world->name() != name)
    return nullptr;  // a world before this host's current one
  return it->second.get();
}

void JobManager::elastic_complete(Job& job) {
  if (control_)
    control_->elastic_local_complete(job.id, job.local_size, job.world->min_hosts(),
                                     job.world->max_hosts());
  else
    world_changed(job.id, job.world->alone(job.local_size));
}

void JobManager::elastic_rank_left(Job& job, const Session& s) {
  job.world->rank_left(control_, s, job.slots[size_t(s.local_rank)].world_seen, job.multi_host());
}

void JobManager::world_changed(const std::string& job_id, const cluster::ElasticWorldView& w) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || !it->second->elastic()) return;  // no ranks of it here
  Job& job = *it->second;
  worlds::World& world = *job.world;
  const worlds::World::Adopted a = world.adopt(w, control_ ? control_->self() : 0);
  if (!a.closed.empty()) pipeline_.world_closed(a.closed);
  job.remote_broken = Status::ok();  // a loss before this world is behind it
  if (!world.ended()) {
    job.world_size = world.in_world() ? a.world_size : job.local_size;
    for (size_t l = 0; l < job.slots.size(); l++)
      if (const auto& s = job.slots[l].session) {
        s->rank = world.in_world() ? a.offset + static_cast<int>(l) : -1;
        s->world_size = world.in_world() ? job.world_size : 0;
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
    if (op->running())
      world.keep_crossing(std::move(op));
    else
      pending.push_back(id);
  }
  std::erase_if(job.ops, [](const auto& kv) { return kv.second == nullptr; });
  for (const auto& id : pending) {
    const ops::Op& op = *job.ops[id];
    Status st(a.ops_end.code(), fmt::format("{}: {}", op.describe(job.id), a.ops_end.message()));
    if (op.world() != 0)
      pipeline_.abort_unbegun(cluster::ElasticBook::world_name(job.id, op.world()), id, st);
    finish(job, id, st);
  }
  if (world.ended()) {
    job.last_error = world.end().message();
    for (auto& wt : world.take_waiters()) reply(wt.session, wt.tag, world.end());
    return;
  }
  spdlog::info("job {}: this host's {} ranks are {} in world epoch {:x} ({} hosts, {} ranks)",
               job.id, job.local_size,
               world.in_world() ? fmt::format("{}..{}", a.offset, a.offset + job.local_size - 1)
                                : std::string("not"),
               w.epoch, w.hosts.size(), w.world_size());
  answer_world_waiters(job);
}

bool JobManager::world_settled(Job& job) {
  if (!job.world->usable()) return false;
  if (!job.multi_host()) return true;
  return control_->elastic_world_linked(job.id) && cross_ready(job);
}

void JobManager::answer_world(Job& job, const std::shared_ptr<Session>& s, uint64_t tag) {
  proto::WorldView w;
  if (job.elastic()) {
    w = job.world->view(s->rank, s->local_rank, job.world_size, job.local_size);
  } else {
    w.world_size = job.world_size;
    w.rank = s->rank;
    w.local_rank = s->local_rank;
    w.local_size = job.local_size;
    w.hosts = job.multi_host() && control_ ? int(control_->participants(job.id).size()) : 1;
  }
  job.slots[size_t(s->local_rank)].world_seen = w.epoch;
  reply(s, tag, Status(GSYNC_OK, proto::to_text(w)));
}

void JobManager::answer_world_waiters(Job& job) {
  if (!job.world->waiting() || !world_settled(job)) return;
  for (auto& wt : job.world->take_waiters())
    if (!wt.session->closed) answer_world(job, wt.session, wt.tag);
}

bool JobManager::elastic_submit(const std::shared_ptr<Session>& s, Job& job,
                                const proto::SubmitEntry& e, const proto::OpShape& shape) {
  worlds::World& world = *job.world;
  if (shape.opcode == proto::Opcode::kWorld) {
    if (world.ended()) {
      reply(s, e.tag, world.end());
    } else if (world_settled(job)) {
      answer_world(job, s, e.tag);
    } else if (auto earlier = world.wait(s, e.tag)) {
      // One ask per rank: a rank that asks again (its wait timed out)
      // gets its earlier ask ended.
      reply(s, *earlier,
            Status(GSYNC_ERR_TIMEOUT, fmt::format("job {}: gsync_world asked again before a world "
                                                  "formed",
                                                  job.id)));
    }
    return true;
  }
  if (proto::is_ps(shape.opcode) || shape.opcode == proto::Opcode::kLease) {
    reply(s, e.tag,
          Status(GSYNC_ERR_UNSUPPORTED,
                 fmt::format("job {} key {} step {}: an elastic job runs allreduce, "
                             "broadcast and barrier; the parameter server and batch "
                             "leases keep per-host state that a changing world would "
                             "lose",
                             job.id, e.key, e.step)));
    return true;
  }
  const uint64_t seen = job.slots[size_t(s->local_rank)].world_seen;
  Status st = world.refusal(e.key, e.step, seen, job.world_size);
  if (st.is_ok()) return false;
  // A host that began this op in the rank's old world waits for its part.
  if (seen != 0 && seen != world.epoch())
    pipeline_.abort_unbegun(cluster::ElasticBook::world_name(job.id, seen), OpId{e.key, e.step},
                            st);
  reply(s, e.tag, st);
  return true;
}

}  // namespace gsync
