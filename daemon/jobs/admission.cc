// SPDX-License-Identifier: Apache-2.0
//
// Checks of what a rank submits: every field of a submission entry copied
// out of shared memory (the client can write anything there), and the
// agreement of every rank of an op on its shape.
#include <cmath>

#include <fmt/format.h>

#include "daemon/jobs/job_manager.h"

namespace gsync {

namespace {
constexpr uint64_t kMaxTimeoutMs = 24ull * 3600 * 1000;

// "allreduce of 100 float32 (sum)" - what one rank asked for.
std::string shape_of(const proto::OpShape& s) {
  switch (s.opcode) {
    case proto::Opcode::kAllreduce:
      return fmt::format("allreduce of {} {} ({})", s.count, proto::name(s.dtype),
                         proto::name(s.redop));
    case proto::Opcode::kBroadcast:
      return fmt::format("broadcast of {} {} from rank {}", s.count, proto::name(s.dtype), s.root);
    case proto::Opcode::kBarrier:
      break;
  }
  return proto::name(s.opcode);
}
}  // namespace

Status JobManager::validate(const Session& s, const Job& job, const proto::SubmitEntry& e,
                            proto::OpShape* shape, void** data) const {
  auto bad = [&](int code, const std::string& what) {
    return Status(code, fmt::format("{}: submission tag {} key {} step {}: {}", s.describe(), e.tag,
                                    e.key, e.step, what));
  };
  if (e.flags != 0 || e.reserved != 0)
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("flags {:#x} / reserved {:#x} must be 0", e.flags,
                                               e.reserved));
  if (!proto::opcode_from_wire(e.opcode, &shape->opcode))
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown opcode {}", e.opcode));
  if (e.timeout_ms > kMaxTimeoutMs)
    return bad(GSYNC_ERR_INVALID, fmt::format("timeout {} ms is over 24 h", e.timeout_ms));
  *data = nullptr;
  shape->count = e.count;
  if (shape->opcode == proto::Opcode::kBarrier) {
    if (e.count != 0) return bad(GSYNC_ERR_PROTOCOL, "a barrier carries no tensor (count must be 0)");
    return Status::ok();
  }
  if (e.key == proto::kBarrierKey)
    return bad(GSYNC_ERR_PROTOCOL, "key 0xffffffffffffffff is reserved for barriers");
  if (!proto::dtype_from_wire(e.dtype, &shape->dtype))
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown dtype {}", e.dtype));
  if (shape->opcode == proto::Opcode::kAllreduce) {
    if (!proto::redop_from_wire(e.redop, &shape->redop))
      return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown reduce op {}", e.redop));
    if (!proto::defined(shape->dtype, shape->redop))
      return bad(GSYNC_ERR_UNSUPPORTED, fmt::format("{} is not defined on {}",
                                                    proto::name(shape->redop),
                                                    proto::name(shape->dtype)));
    if (shape->redop == proto::RedOp::kWeightedAvg && (!std::isfinite(e.weight) || e.weight < 0))
      return bad(GSYNC_ERR_INVALID, fmt::format("weight {} must be finite and >= 0", e.weight));
  } else if (e.root < 0 || e.root >= job.world_size) {
    return bad(GSYNC_ERR_INVALID,
               fmt::format("broadcast root {} is not a rank of a {}-rank job", e.root, job.world_size));
  } else {
    shape->root = e.root;
  }
  size_t elem = proto::dtype_size(shape->dtype);
  if (e.count > (uint64_t{1} << 48) / elem)
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("count {} is absurd", e.count));
  uint64_t bytes = e.count * elem;
  if (!s.arena_range(e.offset, bytes, data))
    return bad(GSYNC_ERR_PROTOCOL,
               fmt::format("tensor at arena offset {} of {} bytes ends past the {}-byte arena",
                           e.offset, bytes, s.arena_bytes()));
  return Status::ok();
}

Status JobManager::check_shape(const Job& job, const JobOp& op, const Session& s,
                               const proto::OpShape& shape) const {
  if (op.shape == shape) return Status::ok();
  const Session& first = *op.arrivals[static_cast<size_t>(op.first)].session;
  return {GSYNC_ERR_MISMATCH,
          fmt::format("job {} key {} step {}: ranks disagree: rank {} (pid {}) submitted {}, rank "
                      "{} (pid {}) submitted {}",
                      job.id, op.id.key, op.id.step, first.rank, first.peer.pid,
                      shape_of(op.shape), s.rank, s.peer.pid, shape_of(shape))};
}

}  // namespace gsync
