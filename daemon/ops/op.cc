// SPDX-License-Identifier: Apache-2.0
#include "daemon/ops/op.h"

#include <fmt/format.h>

namespace gsync::ops {

Op::Op(proto::OpId id, const proto::OpShape& shape, int first, int local_size, uint64_t world,
       uint32_t timeout_ms, Clock::time_point now)
    : id_(id), shape_(shape), first_(first), arrivals_(size_t(local_size)), world_(world),
      started_(now), deadline_(now + std::chrono::milliseconds(timeout_ms)),
      timeout_ms_(timeout_ms) {}

void Op::arrive(int local_rank, Arrival a, uint32_t timeout_ms) {
  arrivals_[size_t(local_rank)] = std::move(a);
  arrived_++;
  // The shortest timeout any rank asked for wins.
  if (timeout_ms && timeout_ms < timeout_ms_) {
    timeout_ms_ = timeout_ms;
    deadline_ = started_ + std::chrono::milliseconds(timeout_ms_);
  }
}

void Op::withdraw(int local_rank) {
  if (!has(local_rank)) return;
  arrivals_[size_t(local_rank)] = Arrival{};
  arrived_--;
  if (first_ != local_rank) return;
  for (size_t i = 0; i < arrivals_.size(); i++)
    if (arrivals_[i].session) first_ = static_cast<int>(i);
}

std::vector<pipeline::Contribution> Op::contributions() const {
  std::vector<pipeline::Contribution> out;
  for (const auto& a : arrivals_) {
    if (!a.session) continue;  // a departed rank (a job that leases batches)
    pipeline::Contribution c;
    c.buf.ptr = static_cast<uint8_t*>(a.data);
    c.buf.bytes = bytes();
    c.buf.owner = a.session;  // the arena stays mapped while the op uses it
    c.buf.arena = a.session->id();
    if (a.device.owner) {  // the device memory's mapping, the same way
      c.buf.kind = pipeline::MemoryKind::kDevice;
      c.buf.device = a.device.device;
      c.buf.device_access = a.device.access;
      c.buf.owner = a.device.owner;
    }
    c.weight = a.weight;
    c.rank = a.session->rank;
    out.push_back(std::move(c));
  }
  return out;
}

std::string Op::describe(const std::string& job) const {
  return proto::describe_op(job, shape_.opcode, id_);
}

Status Op::timed_out(const std::string& job, const std::string& why) const {
  return Status(GSYNC_ERR_TIMEOUT,
                fmt::format("{} timed out after {} ms{}", describe(job), timeout_ms_, why));
}

OpEnd Op::end(std::string_view job, const Status& st, const pipeline::OpTimes* times,
              std::vector<RankArrival>* arrivals) const {
  arrivals->clear();
  for (const auto& a : arrivals_) arrivals->push_back({a.session ? a.session->rank : -1, a.at});
  OpEnd e;
  e.job = job;
  e.id = id_;
  e.shape = shape_;
  e.status = st;
  e.times = times;
  e.started = started_;
  e.arrivals = *arrivals;
  e.arrived = arrived_;
  e.local_size = static_cast<int>(arrivals_.size());
  e.world = world_;
  e.op = this;
  return e;
}

}  // namespace gsync::ops
