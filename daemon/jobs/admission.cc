// SPDX-License-Identifier: Apache-2.0
//
// What the jobs layer checks of a submission beyond its fields
// (shm/client_checks.h): where its tensor lies in the rank's arena or
// device memory, a declaration's options, and that every rank of an op
// asks for the same shape.
#include <cstring>

#include <fmt/format.h>

#include "daemon/jobs/job_manager.h"
#include "daemon/shm/client_checks.h"
#include "protocol/device.h"
#include "protocol/ps.h"

namespace gsync {

Status JobManager::validate(const Session& s, const Job& job, const proto::SubmitEntry& e,
                            proto::OpShape* shape, void** data, DeviceSpan* device) const {
  uint64_t bytes = 0;
  *data = nullptr;
  if (Status st = check_submission(e, job.world_size, s.arena_bytes(), s.describe(), shape, &bytes);
      !st)
    return st;
  if (shape->opcode == proto::Opcode::kBarrier || shape->opcode == proto::Opcode::kLease ||
      shape->opcode == proto::Opcode::kWorld)
    return Status::ok();
  if (proto::is_device_offset(e.offset)) {
    if (Status st = s.device_range(e.offset, bytes, data, device); !st)
      return Status(st.code(), fmt::format("{}: submission tag {} key {} step {}: {}",
                                           s.describe(), e.tag, e.key, e.step, st.message()));
    return Status::ok();
  }
  // Checked above against the same arena size; this only finds the address.
  if (!s.arena_range(e.offset, bytes, data))
    return Status(GSYNC_ERR_INTERNAL, fmt::format("{}: arena range check disagrees", s.describe()));
  if (shape->opcode == proto::Opcode::kPsDeclare) {
    // Its options, the 64 bytes before the tensor: copied out, then read.
    void* at = nullptr;
    proto::PsDeclareHeader h;
    if (!s.arena_range(e.offset - sizeof h, sizeof h, &at))
      return Status(GSYNC_ERR_INTERNAL, fmt::format("{}: arena range check disagrees", s.describe()));
    std::memcpy(&h, at, sizeof h);
    if (std::string why = proto::from_header(h, &shape->ps); !why.empty())
      return Status(GSYNC_ERR_INVALID, fmt::format("{}: submission tag {} key {}: {}", s.describe(),
                                                   e.tag, e.key, why));
    shape->root = 0;
  }
  return Status::ok();
}

Status JobManager::check_shape(const Job& job, const ops::Op& op, const Session& s,
                               const proto::OpShape& shape) const {
  if (op.shape() == shape) return Status::ok();
  const Session& first = *op.arrivals()[static_cast<size_t>(op.first())].session;
  return {GSYNC_ERR_MISMATCH,
          fmt::format("job {} key {} step {}: ranks disagree: rank {} (pid {}) submitted {}, rank "
                      "{} (pid {}) submitted {}",
                      job.id, op.id().key, op.id().step, first.rank, first.peer.pid,
                      describe_shape(op.shape()), s.rank, s.peer.pid, describe_shape(shape))};
}

}  // namespace gsync
