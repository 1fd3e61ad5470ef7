// SPDX-License-Identifier: Apache-2.0
//
// The end of an op (records/op_end.h): the ranks answered, then the event
// published to what keeps a record of it. The jobs layer's own records
// subscribe here; gsyncd may add more (JobManager::op_ends).
#include <spdlog/spdlog.h>

#include "daemon/jobs/job_manager.h"

namespace gsync {

namespace {
constexpr size_t kMaxTombstones = 4096;
}  // namespace

void JobManager::finish_op(Job& job, std::unique_ptr<ops::Op> op, const Status& st,
                           const pipeline::OpTimes* times) {
  const auto ended = Clock::now();  // before the replies: a rank may see its completion at once
  for (const auto& a : op->arrivals())
    if (a.session) reply(a.session, a.tag, st, times ? times->value : 0);
  OpEnd e = op->end(job.id, st, times, &end_arrivals_);
  e.ended = ended;
  e.multi_host = job.multi_host();
  e.owner = &job;
  ends_.publish(e);
}

void JobManager::subscribe_op_ends() {
  ends_.subscribe("daemon counters", [this](const OpEnd& e) { stats_.count(e); });
  ends_.subscribe("history", [this](const OpEnd& e) { history_.record(e); });
  ends_.subscribe("job counters", [this](const OpEnd& e) { count_job_op(*e.owner, e); });
  ends_.subscribe("declared keys", [](const OpEnd& e) {
    if (e.status && e.shape.opcode == proto::Opcode::kPsDeclare) e.owner->ps_keys.insert(e.id.key);
  });
  ends_.subscribe("stragglers", [this](const OpEnd& e) {
    if (!e.status) return;
    if (e.all_arrived()) note_arrivals(*e.owner, e.arrivals);
    if (e.times && e.multi_host) note_host_arrivals(*e.owner, e.times->hosts);
  });
  ends_.subscribe("lease settlement", [this](const OpEnd& e) {
    if (e.status && e.owner->leasing && proto::is_push(e.shape.opcode))
      settle_pushes(*e.owner, *e.op);
  });
  ends_.subscribe("tombstones", [this](const OpEnd& e) { bury(*e.owner, e); });
}

void JobManager::count_job_op(Job& job, const OpEnd& e) {
  if (!e.status) {
    job.ops_failed++;
    if (e.status.code() == GSYNC_ERR_ANOMALY) job.anomalies++;
    job.last_error = e.status.message();
    return;
  }
  job.ops_completed++;
  const uint64_t bytes = e.bytes() * static_cast<uint64_t>(job.local_size);
  job.bytes_reduced += bytes;
  job.meter.add(bytes, e.ended);
  for (const auto& a : e.op->arrivals())
    if (a.session) a.session->stats.bytes += e.bytes();
}

void JobManager::bury(Job& job, const OpEnd& e) {
  if (e.status) return;
  // A parameter server's refusal (a clock out of order, a key not
  // declared yet) reached every rank of the op and sent nothing: the same
  // (key, clock) is their next right request, not a straggler of this one.
  if (e.status.code() == GSYNC_ERR_INVALID && proto::is_ps(e.shape.opcode) && e.all_arrived())
    return;
  while (!job.tombstones.empty() && (job.tombstones.front().expires < e.ended ||
                                     job.tombstones.size() >= kMaxTombstones))
    job.tombstones.pop_front();
  // Kept twice the op timeout: long enough for any straggler of this op.
  job.tombstones.push_back(
      {e.id, e.status, e.ended + 2 * std::chrono::milliseconds(cfg_.op_timeout_ms), e.world});
}

void JobManager::note_arrivals(Job& job, std::span<const RankArrival> arrivals) {
  if (job.local_size < 2) return;
  job.stragglers.add(arrivals);
  // Looked at every 16 ops: the verdict moves slowly, and this is per op.
  // (seen, not ops: ops stays at the window's size once it is full, and
  // then every op would sort the window.)
  if (job.stragglers.seen() % 16 != 0) return;
  const auto lags = job.stragglers.lags();
  const int l = job.stragglers.straggler(lags);
  if (l < 0 || !job.slots[size_t(l)].session) return;
  if (!job.stragglers.may_warn(l, Clock::now())) return;
  const Session& s = *job.slots[size_t(l)].session;
  spdlog::warn("job {}: rank {} (local {}, pid {}) on {} is the straggler: last in {:.0f}% of the "
               "last {} ops, {:.1f} ms after the first (median; p99 {:.1f} ms)",
               job.id, s.rank, l, s.peer.pid, control_ ? "host " + control_->self_id() : "this host",
               100 * lags[size_t(l)].last_share, job.stragglers.ops(),
               1e3 * lags[size_t(l)].median_s, 1e3 * lags[size_t(l)].p99_s);
}

void JobManager::note_host_arrivals(Job& job, const HostArrivals& hosts) {
  if (!control_) return;
  job.host_lags.add(hosts, control_->self(), int(control_->cluster().hosts.size()));
  // As note_arrivals: looked at every 16 ops.
  if (job.host_lags.seen() % 16 != 0) return;
  const auto lags = job.host_lags.lags();
  const int i = job.host_lags.straggler(lags);
  if (i < 0 || !job.host_lags.may_warn(lags[size_t(i)].host, Clock::now())) return;
  const HostLag& l = lags[size_t(i)];
  spdlog::warn("job {}: host {} is the straggler host: last in {:.0f}% of the last {} ops, by a "
               "median {:.1f} ms behind the first host (p99 {:.1f} ms; on host {}'s clock)",
               job.id, control_->host_id(l.host), 100 * l.last_share, job.host_lags.ops(),
               1e3 * l.median_s, 1e3 * l.p99_s, control_->self_id());
}

}  // namespace gsync
