// SPDX-License-Identifier: Apache-2.0
//
// Ops that outlive their timeout, and what their error names: the local
// ranks that have not arrived, the ranks no host has announced, or what the
// cross-host stage (or an op's pinned memory) still waits for. Checked
// every tick.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/jobs/job_manager.h"

namespace gsync {

namespace {
std::chrono::milliseconds late(Clock::time_point now, Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - deadline);
}
}  // namespace

std::string JobManager::missing_ranks(const Job& job, const ops::Op& op) const {
  std::string out;
  for (size_t l = 0; l < op.arrivals().size(); l++) {
    if (op.has(int(l)) || job.slots[l].departed) continue;
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
    if (jit != jobs_.end()) expire(*jit->second, now);
  }
}

void JobManager::expire(Job& job, Clock::time_point now) {
  std::vector<std::pair<OpId, Status>> expired;
  std::vector<std::pair<uint64_t, Status>> cross_expired;
  for (const auto& [id, op] : job.ops) {
    if (now < op->deadline()) continue;
    if (op->running()) {
      // Only what waits on other hosts (or on the GPU thread) can hang;
      // fold and store end on their own. The host that knows who is
      // missing speaks first (the stage's grace).
      std::string what = pipeline_.overdue(op->serial(), late(now, op->deadline()));
      if (!what.empty()) cross_expired.emplace_back(op->serial(), op->timed_out(job.id, " " + what));
      continue;
    }
    const int expected = job.expected_ranks();
    std::string missing;
    if (op->arrived() < expected)
      missing = fmt::format("{} of {} local ranks arrived; not arrived: {}", op->arrived(), expected,
                            missing_ranks(job, *op));
    else if (job.leasing && proto::is_push(op->shape().opcode) && !job.clock_pushed(id.step))
      missing = fmt::format("the job leases batches, so a clock's pushes begin together, and not "
                            "every rank here has pushed all {} keys at clock {}",
                            job.ps_keys.size(), id.step);
    else
      missing = fmt::format("all {} local ranks arrived, but the job is not complete across "
                            "hosts: {}",
                            expected,
                            control_ ? control_->job_missing(job.wire_name(), job.world_size,
                                                             job.live_rank_ids())
                                     : "");
    expired.emplace_back(id, op->timed_out(job.id, ": " + missing));
  }
  // An elastic job's ops of an earlier world that were crossing when it
  // changed run on (elastic_jobs.cc), under the same deadline.
  if (job.elastic())
    for (auto& old : job.world->overdue(pipeline_, now)) cross_expired.push_back(std::move(old));
  for (auto& [id, st] : expired) {
    spdlog::warn("{}", st.message());
    finish(job, id, st);
  }
  for (auto& [serial, st] : cross_expired) {
    spdlog::warn("{}", st.message());
    pipeline_.abort(serial, st);
  }
}

}  // namespace gsync
