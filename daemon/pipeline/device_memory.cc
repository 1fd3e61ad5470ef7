// SPDX-License-Identifier: Apache-2.0
//
// The pipeline's part for ops over device memory (docs/gpu.md): which path
// an op takes (on the GPU, or through host memory), and the pinned memory
// it needs on the way, made off the event thread (staging_pool.h) while
// the op waits.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/collective/engine.h"
#include "daemon/gpu/launch.h"
#include "daemon/pipeline/gpu_work.h"
#include "daemon/pipeline/guard_stage.h"
#include "daemon/pipeline/local_stages.h"
#include "daemon/pipeline/op_record.h"
#include "daemon/pipeline/pipeline.h"

namespace gsync::pipeline {

namespace {

// Where the pinned buffer of slot (StagingPool's) goes in the request: the
// wire's staging, or a rank's stand-in.
Buffer& slot_buffer(OpRequest& r, int slot) {
  return slot == StagingPool::kWireSlot ? r.staging : r.locals[size_t(slot)].buf;
}

// A pinned buffer into its place, which keeps its arena (the session its
// plans go with).
void place(Buffer& into, const Buffer& pinned) {
  const uint64_t arena = into.arena;
  into = pinned;
  into.arena = arena;
}

}  // namespace

std::string Pipeline::gpu_path_refusal(const OpRequest& r) const {
  uint64_t gpus = 0;  // the op's GPUs (bit d: GPU d)
  for (const auto& c : r.locals) {
    if (c.buf.kind == MemoryKind::kHost) return "host and device memory in one op";
    if (c.buf.device >= 0 && c.buf.device < 64) gpus |= uint64_t{1} << c.buf.device;
  }
  // Buffers on several GPUs are folded by kernels on each of them, each
  // reading every buffer: every GPU of the op must reach every buffer.
  for (const auto& c : r.locals) {
    if ((c.buf.device_access & gpus) == gpus) continue;
    int lacking = 0;
    while (!((gpus & ~c.buf.device_access) >> lacking & 1)) lacking++;
    return fmt::format("GPU {} cannot reach rank {}'s buffer on GPU {} (no peer access)", lacking,
                       c.rank, c.buf.device);
  }
  if (proto::is_ps(r.shape.opcode)) return "a parameter-server op";
  if (r.locals.size() > gpu::kMaxTensors)
    return fmt::format("{} local ranks, more than a kernel takes ({})", r.locals.size(),
                       gpu::kMaxTensors);
  if (GuardStage::wanted(r)) return "the anomaly guard reads host memory";
  // A broadcast only copies; an allreduce runs the kernels (fp32, fp16
  // and bf16 have them; the host's take the rest).
  if (r.shape.opcode == proto::Opcode::kAllreduce &&
      !gpu::supported(r.shape.dtype, reduce::Op::kSum))
    return fmt::format("no GPU kernel for {}", proto::name(r.shape.dtype));
  return "";
}

void Pipeline::stage_device_memory(Op& op) {
  OpRequest& r = op.req;
  bool device = false;
  for (const auto& c : r.locals) device |= c.buf.kind == MemoryKind::kDevice;
  if (!device || r.shape.count == 0) return;
  const uint64_t bytes = r.shape.bytes();
  if (std::string why = gpu_path_refusal(r); !why.empty()) {
    // Through host memory: each device buffer gets a pinned stand-in, the
    // host stages run on those, the copy stages move the bytes.
    spdlog::debug("{}: through host memory ({})", r.describe(), why);
    device_paths_.through_host++;
    device_paths_.last_refusal = std::move(why);
    r.device_locals.resize(r.locals.size());
    for (size_t i = 0; i < r.locals.size(); i++) {
      Buffer& b = r.locals[i].buf;
      if (b.kind != MemoryKind::kDevice) continue;
      const uint64_t arena = b.arena;  // the stand-in's plans go with the client's session
      r.device_locals[i] = std::move(b);
      b = Buffer{};
      b.arena = arena;
      lease_staging(op, static_cast<int>(i), bytes, r.device_locals[i].device);
    }
    return;
  }
  device_paths_.on_gpu++;
  if (!r.multi_host()) return;
  // The GPU path across hosts: the wire moves the host buffer's pinned staging.
  r.staging.arena = host_buffer(r).arena;
  lease_staging(op, StagingPool::kWireSlot, bytes, r.locals[0].buf.device);
}

size_t Pipeline::gpu_tasks_in_flight() const { return gpu_ ? gpu_->in_flight() : 0; }

void Pipeline::lease_staging(Op& op, int slot, uint64_t bytes, int device) {
  OpRequest& r = op.req;
  if (Buffer kept; staging_.lease_kept(r.job, r.id.key, slot, bytes, &kept)) {
    place(slot_buffer(r, slot), kept);
    return;
  }
  // Made off the event thread; the op waits (its view says "staging").
  op.staging++;
  op.waited = true;
  staging_.lease_new(r.job, r.id.key, slot, bytes, device,
                     [this, serial = op.serial, job = r.job, key = r.id.key, slot](
                         const Status& st, Buffer b) {
                       if (!staging_made(serial, slot, st, b) && st)
                         staging_.release(job, key, slot, b);  // its op ended meanwhile
                     });
}

bool Pipeline::staging_made(uint64_t serial, int slot, const Status& st, const Buffer& b) {
  Op* op = find(serial);  // gone: aborted while it waited, and reported
  if (op == nullptr) return false;
  OpRequest& r = op->req;
  if (st) {
    place(slot_buffer(r, slot), b);  // released with the op (release_staging)
  } else {
    fail_staging(*op, Status(st.code(), fmt::format("{}: {}", r.describe(), st.message())));
  }
  staging_arrived(*op);
  return true;
}

void Pipeline::fail_staging(Op& op, const Status& st) {
  if (op.failing) return;
  op.failing = true;
  op.status = st;
  // No stage of it has begun here: the hosts that began it hear now
  // rather than at their timeout (which would blame this host's ranks).
  if (op.req.multi_host() && engine_) engine_->abort_unbegun(op.req.job, op.req.id, st);
  maybe_end(op);
}

void Pipeline::release_staging(const OpRequest& r) {
  if (r.staging.ptr != nullptr) staging_.release(r.job, r.id.key, StagingPool::kWireSlot, r.staging);
  for (size_t i = 0; i < r.device_locals.size(); i++)
    if (r.device_locals[i].kind == MemoryKind::kDevice)
      staging_.release(r.job, r.id.key, static_cast<int>(i), r.locals[i].buf);
}

}  // namespace gsync::pipeline
