// SPDX-License-Identifier: Apache-2.0
#include "daemon/worlds/world.h"

#include <algorithm>

#include <fmt/format.h>

namespace gsync::worlds {

World::Adopted World::adopt(const cluster::ElasticWorldView& w, int self) {
  Adopted a;
  a.closed = name_;
  epoch_ = w.epoch;
  reason_ = w.reason;
  name_ = cluster::ElasticBook::world_name(job_id_, w.epoch);
  names_.push_back(name_);
  a.ops_end = Status(GSYNC_ERR_WORLD_CHANGED,
                     fmt::format("job {}: its world changed to epoch {:x} ({}): call gsync_world, "
                                 "then go on from the next step",
                                 job_id_, w.epoch, w.reason));
  if (w.failed) {
    end_ = Status(GSYNC_ERR_HOST_LOST,
                  fmt::format("job {}: the elastic job ended: {}", job_id_, w.reason));
    a.ops_end = end_;
    in_world_ = false;
    hosts_ = 0;
    return a;
  }
  a.offset = w.offset_of(self);
  in_world_ = a.offset >= 0;
  hosts_ = static_cast<int>(w.hosts.size());
  a.world_size = in_world_ ? w.world_size() : 0;
  return a;
}

cluster::ElasticWorldView World::alone(int local_size) const {
  cluster::ElasticWorldView w;
  w.epoch = cluster::epoch_of(cluster::epoch_counter(epoch_) + 1, 0);
  w.hosts = {{0, local_size}};
  w.reason = "formed on this host (no cluster)";
  return w;
}

Status World::refusal(uint64_t key, uint64_t step, uint64_t seen, int world_size) const {
  if (usable() && seen == epoch_) return Status::ok();
  std::string why;
  if (ended())
    why = end_.message();
  else if (epoch_ == 0)
    why =
        "the elastic job has no world yet; call gsync_world (it waits until min_hosts hosts "
        "have all their ranks)";
  else if (!in_world_)
    why = fmt::format(
        "this host is not in the job's world (epoch {:x}: {}); call gsync_world, "
        "which waits until it is",
        epoch_, reason_);
  else
    why = fmt::format(
        "the job's world changed to epoch {:x} ({}): {} hosts, {} ranks; call "
        "gsync_world, then go on from the next step",
        epoch_, reason_, hosts_, world_size);
  return Status(ended() ? end_.code() : GSYNC_ERR_WORLD_CHANGED,
                fmt::format("job {} key {} step {}: {}", job_id_, key, step, why));
}

proto::WorldView World::view(int rank, int local_rank, int world_size, int local_size) const {
  proto::WorldView w;
  w.epoch = epoch_;
  w.world_size = world_size;
  w.rank = rank;
  w.local_rank = local_rank;
  w.local_size = local_size;
  w.hosts = hosts_;
  return w;
}

std::optional<uint64_t> World::wait(const std::shared_ptr<Session>& s, uint64_t tag) {
  for (auto& wt : waiters_)
    if (wt.session == s) return std::exchange(wt.tag, tag);
  waiters_.push_back({s, tag});
  return std::nullopt;
}

std::vector<Waiter> World::take_waiters() {
  std::vector<Waiter> out = std::move(waiters_);
  waiters_.clear();
  return out;
}

void World::rank_left(cluster::ControlPlane* control, const Session& s, uint64_t seen,
                      bool multi_host) {
  std::erase_if(waiters_, [&](const Waiter& w) { return w.session.get() == &s; });
  // Peers fail what this host can no longer give (JobLeave under the
  // world's name); the leader forms the next world without this host.
  if (control && in_world_ && multi_host)
    control->local_rank_left(name_, s.rank, s.peer.pid, "left the elastic job");
  // Ops of the world it last ran in may still be crossing elsewhere: those
  // it did not give fail there now, with why its world changed (the host
  // whose loss began it).
  if (control && multi_host && seen != 0 && seen != epoch_)
    control->local_rank_left(
        cluster::ElasticBook::world_name(job_id_, seen), s.rank, s.peer.pid,
        fmt::format("left the elastic job after its world changed ({})", reason_));
  if (control) control->elastic_local_left(job_id_);
  in_world_ = false;
}

void World::keep_crossing(std::unique_ptr<ops::Op> op) {
  const uint64_t serial = op->serial();
  old_ops_[serial] = std::move(op);
}

std::unique_ptr<ops::Op> World::take_crossing(uint64_t serial) {
  auto it = old_ops_.find(serial);
  if (it == old_ops_.end()) return nullptr;
  std::unique_ptr<ops::Op> op = std::move(it->second);
  old_ops_.erase(it);
  return op;
}

std::vector<std::pair<uint64_t, Status>> World::overdue(pipeline::Pipeline& pipeline,
                                                        Clock::time_point now) const {
  std::vector<std::pair<uint64_t, Status>> out;
  for (const auto& [serial, op] : old_ops_) {
    if (now < op->deadline()) continue;
    auto late = std::chrono::duration_cast<std::chrono::milliseconds>(now - op->deadline());
    std::string what = pipeline.overdue(serial, late);
    if (!what.empty())
      out.emplace_back(
          serial,
          Status(GSYNC_ERR_TIMEOUT, fmt::format("{} (of an earlier world) timed out after {} ms {}",
                                                op->describe(job_id_), op->timeout_ms(), what)));
  }
  return out;
}

}  // namespace gsync::worlds
