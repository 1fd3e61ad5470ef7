// SPDX-License-Identifier: Apache-2.0
//
// Batch leases in the jobs layer (docs/fault-tolerance.md, "Batch
// leases"): a rank's lease goes to the job's keeper (daemon/leases/); its
// pushes of a clock, once applied on every key, settle its leases of that
// clock; a rank that leaves a job that leases is let go (the job goes on
// with the others) and its leases for clocks whose pushes had not begun go
// back to the keeper, to be handed to the next ranks that ask.
//
// Exactly once needs a rank's pushes of a clock to be applied all or not
// at all: in a job that leases, a clock's pushes on this host begin
// together, once every rank has submitted its push of every declared key
// (Job::clock_pushed). A rank that dies before that has none of the clock
// applied; one that dies after has all of it applied, and its lease
// settles.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/jobs/job_manager.h"
#include "protocol/lease.h"

namespace gsync {

namespace {
// Clocks of submitted-push counts kept behind the newest.
constexpr uint64_t kKeepClocks = 16;
}  // namespace

// The first of the job's hosts in cluster order, as every host sees it
// once the job's keys are declared; kept, since the hosts a host sees
// shrink as others close (a keeper found again then would be itself).
int JobManager::keeper(const Job& job) const { return job.lease_keeper; }

void JobManager::lease(const std::shared_ptr<Session>& s, Job& job, const proto::SubmitEntry& e) {
  const RankSlot& slot = job.slots[static_cast<size_t>(s->local_rank)];
  if (job.ps_keys.empty())
    return reply(s, e.tag,
                 Status(GSYNC_ERR_INVALID,
                        fmt::format("{}: a lease of epoch {} before any parameter is declared: "
                                    "a lease is settled by the pushes of its clock "
                                    "(gsync_ps_declare first)",
                                    s->describe(), e.key)));
  if (e.step < slot.pushes_begun_below)
    return reply(s, e.tag,
                 Status(GSYNC_ERR_INVALID,
                        fmt::format("{}: a lease for clock {}, whose pushes have begun; a lease "
                                    "is for a clock still to push (the next is {})",
                                    s->describe(), e.step, slot.pushes_begun_below)));
  if (!job.leasing && control_ && job.multi_host()) {
    auto hosts = control_->participants(job.id);
    job.lease_keeper = hosts.empty() ? -1 : hosts.front();
  }
  job.leasing = true;
  leases_.ask(job.id, keeper(job), s->rank, e.key, e.count, e.step,
              [this, s, tag = e.tag](const Status& st, uint32_t value) {
                if (!st) spdlog::warn("{}: lease refused: {}", s->describe(), st.message());
                reply(s, tag, st, value);
              });
}

bool JobManager::count_push(Job& job, int local_rank, uint64_t clock) {
  auto& counts = job.clock_pushes[clock];
  counts.resize(job.slots.size(), 0);
  counts[static_cast<size_t>(local_rank)]++;
  while (!job.clock_pushes.empty() && job.clock_pushes.begin()->first + kKeepClocks < clock)
    job.clock_pushes.erase(job.clock_pushes.begin());
  if (!job.leasing) return false;
  if (job.clock_pushed(clock)) start_ready(job, true, clock);
  return true;
}

void JobManager::start_ready(Job& job, bool pushes_of_clock_only, uint64_t clock) {
  // Starting an op can finish it (and erase it): start by id.
  std::vector<OpId> ids;
  for (const auto& [id, op] : job.ops) {
    if (op->running()) continue;
    if (pushes_of_clock_only && (id.step != clock || !proto::is_push(op->shape().opcode))) continue;
    if (job.policy->ready(job, *op)) ids.push_back(id);
  }
  for (const auto& id : ids) {
    auto it = job.ops.find(id);
    if (it != job.ops.end() && !it->second->running()) start(job, *it->second);
  }
}

void JobManager::depart(Job& job, const Session& s, const std::string& reason) {
  const auto l = static_cast<size_t>(s.local_rank);
  RankSlot& slot = job.slots[l];
  slot.departed = true;
  job.departures++;
  // Its submissions to ops that have not begun are withdrawn: never applied.
  std::vector<OpId> emptied;
  size_t withdrawn = 0;
  for (auto& [id, op] : job.ops) {
    if (op->running() || !op->has(s.local_rank)) continue;
    op->withdraw(s.local_rank);
    withdrawn++;
    if (op->arrived() == 0) emptied.push_back(id);
  }
  for (const auto& id : emptied) job.ops.erase(id);
  spdlog::warn(
      "job {}: rank {} (local {}, pid {}) {}; the job leases batches and goes on without "
      "it ({} of its submissions withdrawn; its pushes before clock {} are applied)",
      job.id, s.rank, s.local_rank, s.peer.pid, reason, withdrawn, slot.pushes_begun_below);
  leases_.drop(job.id, keeper(job), s.rank, slot.pushes_begun_below);
  start_ready(job);  // ops that waited only for it
}

void JobManager::settle_pushes(Job& job, const ops::Op& op) {
  for (const auto& a : op.arrivals()) {
    if (!a.session) continue;
    const auto at = std::make_pair(a.session->rank, op.id().step);
    if (++job.pushes_applied[at] < job.ps_keys.size()) continue;
    job.pushes_applied.erase(at);
    leases_.settle(job.id, keeper(job), a.session->rank, op.id().step);
  }
  // A clock whose settlement cannot complete any more (a key's push
  // failed) is forgotten once it is far behind.
  std::erase_if(job.pushes_applied,
                [&](const auto& p) { return p.first.second + kKeepClocks < op.id().step; });
}

}  // namespace gsync
