// SPDX-License-Identifier: Apache-2.0
//
// Checks of what a rank sends: its hello's identity and every field of a
// submission entry copied out of shared memory (the client can write
// anything there).
#include <cmath>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "daemon/core/text.h"
#include "daemon/shm/client_checks.h"
#include "protocol/compression.h"
#include "protocol/device.h"
#include "protocol/guard.h"
#include "protocol/plan_choice.h"
#include "protocol/lease.h"
#include "protocol/ps.h"
#include "protocol/world.h"

namespace gsync {

namespace {
constexpr uint64_t kMaxTimeoutMs = 24ull * 3600 * 1000;
// "#" and up to 16 hex digits of the epoch after it, and the NUL.
constexpr size_t kMaxElasticJobId = proto::kJobIdMax - 18;
}  // namespace

std::string describe_shape(const proto::OpShape& s) {
  switch (s.opcode) {
    case proto::Opcode::kAllreduce:
      return fmt::format("allreduce of {} {} ({}{})", s.count, proto::name(s.dtype),
                         proto::name(s.redop),
                         s.compress.on() ? ", compressed " + proto::describe(s.compress) : "");
    case proto::Opcode::kBroadcast:
      return fmt::format("broadcast of {} {} from rank {}", s.count, proto::name(s.dtype), s.root);
    case proto::Opcode::kPsDeclare:
      return fmt::format("declaration of {} {} ({})", s.count, proto::name(s.dtype),
                         proto::describe(s.ps));
    case proto::Opcode::kPush:
    case proto::Opcode::kPull:
    case proto::Opcode::kPushPull:
      return fmt::format("{} of {} {}{}", proto::name(s.opcode), s.count, proto::name(s.dtype),
                         s.lr > 0 ? fmt::format(" (lr {})", s.lr) : "");
    case proto::Opcode::kBarrier:
    case proto::Opcode::kLease:
    case proto::Opcode::kWorld:
      break;
  }
  return proto::name(s.opcode);
}

namespace {
using Bad = std::function<Status(int, const std::string&)>;

// The tensor's bytes lie inside the arena (offset + bytes cannot wrap).
Status check_range(const proto::SubmitEntry& e, uint64_t arena_bytes, const Bad& bad,
                   const proto::OpShape& shape, uint64_t* bytes) {
  size_t elem = proto::dtype_size(shape.dtype);
  if (e.count > (uint64_t{1} << 48) / elem)
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("count {} is absurd", e.count));
  *bytes = e.count * elem;
  // In device memory: checked against its allocation by JobManager::validate,
  // which has the session's table. Aligned here: a misaligned access on a
  // GPU is a sticky fault that ends the daemon's context there.
  if (proto::is_device_offset(e.offset)) {
    const proto::DeviceOffset d = proto::from_entry_offset(e.offset);
    if (d.offset % elem != 0)
      return bad(GSYNC_ERR_INVALID,
                 fmt::format("a tensor at offset {} of device allocation {} is not aligned to its "
                             "{}-byte elements",
                             d.offset, d.alloc_id, elem));
    return Status::ok();
  }
  if (e.offset > arena_bytes || *bytes > arena_bytes - e.offset)
    return bad(GSYNC_ERR_PROTOCOL,
               fmt::format("tensor at arena offset {} of {} bytes ends past the {}-byte arena",
                           e.offset, *bytes, arena_bytes));
  return Status::ok();
}

// A parameter-server op (protocol/ps.h): float data, no codec; a push's
// weight and learning rate; a declaration's options in the 64 bytes before
// its tensor (read by JobManager::validate, which has the arena).
Status check_ps_submission(const proto::SubmitEntry& e, uint64_t arena_bytes, const Bad& bad,
                           proto::OpShape* shape, uint64_t* bytes) {
  const proto::Opcode op = shape->opcode;
  if (proto::is_device_offset(e.offset))
    return bad(GSYNC_ERR_UNSUPPORTED, fmt::format("a {} of device memory: the parameter server "
                                                  "takes host buffers (gsync_alloc)",
                                                  proto::name(op)));
  if (!proto::dtype_from_wire(e.dtype, &shape->dtype))
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown dtype {}", e.dtype));
  if (shape->dtype != proto::DType::kF32 && shape->dtype != proto::DType::kF16 &&
      shape->dtype != proto::DType::kBF16)
    return bad(GSYNC_ERR_INVALID, fmt::format("a {} of {} values: the parameter server keeps "
                                              "float32, float16 and bfloat16",
                                              proto::name(op), proto::name(shape->dtype)));
  if (e.count == 0) return bad(GSYNC_ERR_INVALID, fmt::format("a {} of 0 values", proto::name(op)));
  if (e.compress != 0 || e.redop != 0 || e.root != 0)
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("a {} has no codec, reduce op or root", proto::name(op)));
  if (op == proto::Opcode::kPush || op == proto::Opcode::kPushPull) {
    // 0: a step without data (a rank that leases no batch this clock).
    if (!(std::isfinite(e.weight) && e.weight >= 0))
      return bad(GSYNC_ERR_INVALID,
                 fmt::format("weight {} must be finite and >= 0 (the samples it stands for)",
                             e.weight));
    if (std::string why = proto::check_push_lr(e.compress_arg, &shape->lr); !why.empty())
      return bad(GSYNC_ERR_INVALID, why);
    // The fold weighs each rank's gradient; the servers divide by the total.
    shape->redop = proto::RedOp::kWeightedAvg;
  } else if (e.compress_arg != 0) {
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("a {} carries no learning rate", proto::name(op)));
  }
  if (op == proto::Opcode::kPsDeclare && e.offset < sizeof(proto::PsDeclareHeader))
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("a declaration at arena offset {} has no room for "
                                               "its options before it",
                                               e.offset));
  return check_range(e, arena_bytes, bad, *shape, bytes);
}
}  // namespace

Status check_submission(const proto::SubmitEntry& e, int world_size, uint64_t arena_bytes,
                        const std::string& who, proto::OpShape* shape, uint64_t* bytes) {
  Bad bad = [&](int code, const std::string& what) {
    return Status(code, fmt::format("{}: submission tag {} key {} step {}: {}", who, e.tag, e.key,
                                    e.step, what));
  };
  if (!proto::opcode_from_wire(e.opcode, &shape->opcode))
    return bad(GSYNC_ERR_PROTOCOL, fmt::format("unknown opcode {}", e.opcode));
  if (e.timeout_ms > kMaxTimeoutMs)
    return bad(GSYNC_ERR_INVALID, fmt::format("timeout {} ms is over 24 h", e.timeout_ms));
  *bytes = 0;
  shape->count = e.count;
  if (shape->opcode == proto::Opcode::kLease) {
    // key: the epoch, step: the clock, count: the epoch's batches.
    if (e.count == 0 || e.count > proto::kMaxLeaseBatches)
      return bad(GSYNC_ERR_INVALID, fmt::format("a lease of an epoch of {} batches (1 to {})",
                                                e.count, proto::kMaxLeaseBatches));
    if (e.step >= proto::kDeclareStep)
      return bad(GSYNC_ERR_INVALID, fmt::format("a lease for clock {}", e.step));
    if (e.offset != 0 || e.dtype != 0 || e.redop != 0 || e.compress != 0 || e.root != 0 ||
        e.compress_arg != 0 || e.weight != 0)
      return bad(GSYNC_ERR_PROTOCOL, "a lease carries no tensor, codec, weight or root");
    return Status::ok();
  }
  if (shape->opcode == proto::Opcode::kWorld) {
    if (e.key != 0 || e.step != 0 || e.count != 0 || e.offset != 0 || e.dtype != 0 ||
        e.redop != 0 || e.compress != 0 || e.root != 0 || e.compress_arg != 0 || e.weight != 0)
      return bad(GSYNC_ERR_PROTOCOL, "a world query carries no key, step, tensor, codec or root");
    return Status::ok();
  }
  if (proto::is_ps(shape->opcode)) {
    if (e.key == proto::kBarrierKey)
      return bad(GSYNC_ERR_PROTOCOL, "key 0xffffffffffffffff is reserved for barriers");
    return check_ps_submission(e, arena_bytes, bad, shape, bytes);
  }
  if (std::string why = proto::from_entry(e.compress, e.compress_arg, &shape->compress);
      !why.empty())
    return bad(GSYNC_ERR_PROTOCOL, why);
  if (shape->opcode == proto::Opcode::kBarrier) {
    if (e.count != 0) return bad(GSYNC_ERR_PROTOCOL, "a barrier carries no tensor (count must be 0)");
    // Found by tests/fuzz (regressions/submission/barrier-with-a-codec).
    if (shape->compress.on()) return bad(GSYNC_ERR_PROTOCOL, "a barrier carries no codec");
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
  } else if (e.root < 0 || e.root >= world_size) {
    return bad(GSYNC_ERR_INVALID,
               fmt::format("broadcast root {} is not a rank of a {}-rank job", e.root, world_size));
  } else {
    shape->root = e.root;
  }
  if (std::string why = proto::check_use(shape->compress, shape->opcode, shape->dtype,
                                         shape->redop);
      !why.empty())
    return bad(GSYNC_ERR_INVALID, why);
  return check_range(e, arena_bytes, bad, *shape, bytes);
}

Status check_join_request(const JoinRequest& r, bool multi_host_ok) {
  if (r.job_id.empty()) return {GSYNC_ERR_INVALID, "job id is empty"};
  if (r.job_id.size() >= proto::kJobIdMax)
    return {GSYNC_ERR_INVALID, fmt::format("job id '{}' is longer than {} bytes",
                                           printable(r.job_id, 96), proto::kJobIdMax - 1)};
  for (char c : r.job_id)
    if (c < 0x21 || c > 0x7e)
      return {GSYNC_ERR_INVALID, fmt::format("job id '{}' has a character outside printable ASCII",
                                             printable(r.job_id, 96))};
  if (r.min_hosts > 0 || r.max_hosts > 0) {
    if (r.min_hosts < 1 || r.min_hosts > proto::kMaxElasticHosts ||
        (r.max_hosts != 0 && r.max_hosts < r.min_hosts))
      return {GSYNC_ERR_INVALID, fmt::format("job {}: min_hosts {} max_hosts {}: an elastic job "
                                             "has 1 <= min_hosts <= max_hosts (0: no bound) <= {}",
                                             r.job_id, r.min_hosts, r.max_hosts,
                                             proto::kMaxElasticHosts)};
    // Its worlds go between hosts as "id#epoch" in the 64-byte job field.
    if (r.job_id.size() > kMaxElasticJobId)
      return {GSYNC_ERR_INVALID, fmt::format("job {}: an elastic job's id is at most {} bytes",
                                             r.job_id, kMaxElasticJobId)};
    if (r.world_size != 0 || r.rank != 0 || r.local_size < 1 || r.local_rank < 0 ||
        r.local_rank >= r.local_size)
      return {GSYNC_ERR_INVALID,
              fmt::format("job {}: an elastic job's rank says world_size 0 and rank 0 (the "
                          "daemons number its ranks), and 0 <= local_rank < local_size: got "
                          "world_size={} rank={} local_size={} local_rank={}",
                          r.job_id, r.world_size, r.rank, r.local_size, r.local_rank)};
  } else if (r.world_size < 1 || r.local_size < 1 || r.local_size > r.world_size || r.rank < 0 ||
      r.rank >= r.world_size || r.local_rank < 0 || r.local_rank >= r.local_size)
    return {GSYNC_ERR_INVALID,
            fmt::format("job {}: inconsistent shape world_size={} rank={} local_size={} "
                        "local_rank={}",
                        r.job_id, r.world_size, r.rank, r.local_size, r.local_rank)};
  proto::Sync sync;
  if (std::string why = proto::from_wire(r.sync, &sync); !why.empty())
    return {GSYNC_ERR_INVALID, fmt::format("job {}: {}", r.job_id, why)};
  proto::Guard guard;
  if (std::string why = proto::from_wire_guard(r.guard, &guard); !why.empty())
    return {GSYNC_ERR_INVALID, fmt::format("job {}: {}", r.job_id, why)};
  proto::PlanChoice plan;
  if (std::string why = proto::from_wire_plan(r.plan, &plan); !why.empty())
    return {GSYNC_ERR_INVALID, fmt::format("job {}: {}", r.job_id, why)};
  if (r.min_hosts == 0 && r.world_size != r.local_size && !multi_host_ok)
    return {GSYNC_ERR_REFUSED,
            fmt::format("job {}: world_size {} spans more hosts than this one (local_size {}), but "
                        "this daemon has no cluster configured",
                        r.job_id, r.world_size, r.local_size)};
  return Status::ok();
}

}  // namespace gsync
