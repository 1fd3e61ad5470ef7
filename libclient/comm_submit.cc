// SPDX-License-Identifier: Apache-2.0
//
// A session's submissions (comm.h): an op's arguments checked, its tensor
// placed (in place in the arena, in device memory, or through a staging
// block) and its entry published on the submission ring.
#include <atomic>
#include <cmath>
#include <cstring>

#include "libclient/comm.h"
#include "libclient/doorbell.h"
#include "libclient/error.h"
#include "libclient/format.h"
#include "protocol/compression.h"
#include "protocol/device.h"
#include "protocol/lease.h"
#include "protocol/ps.h"

namespace gsync::client {

namespace {

// Why a lease's arguments are wrong, or "". key: the epoch, step: the
// clock, count: the epoch's batches.
std::string lease_error(const OpArgs& a) {
  if (a.count == 0 || a.count > proto::kMaxLeaseBatches)
    return format("batches %zu is outside 1 .. %llu", a.count,
                  static_cast<unsigned long long>(proto::kMaxLeaseBatches));
  if (a.step >= proto::kDeclareStep) return "clock is out of range";
  return "";
}

// Why a parameter-server op's arguments are wrong, or "".
std::string ps_error(const OpArgs& a, proto::DType dtype) {
  if (dtype != proto::DType::kF32 && dtype != proto::DType::kF16 && dtype != proto::DType::kBF16)
    return format("dtype %s: the parameter server keeps float32, float16 and bfloat16",
                  proto::name(dtype));
  if (a.count == 0) return "count is 0";
  if ((a.opcode == proto::Opcode::kPush || a.opcode == proto::Opcode::kPushPull) &&
      !(std::isfinite(a.weight) && a.weight >= 0))
    return format("opts.weight %g must be finite and >= 0 (0: a step without data)", a.weight);
  if (!(std::isfinite(a.lr) && a.lr >= 0))
    return format("opts.lr %g must be finite and >= 0 (0: the declared one)", a.lr);
  if (a.ps != nullptr)
    if (std::string why = proto::check(*a.ps); !why.empty()) return "opts." + why;
  return "";
}

// Why a tensor op's arguments but where its buffer lies are wrong, or "";
// *elem: the size of its elements. world: the job's size, 0 while an
// elastic job has not learnt it.
std::string argument_error(const OpArgs& a, int world, size_t* elem) {
  if (a.key == kBarrierKey) return "key 0xffffffffffffffff is reserved for barriers";
  proto::DType dtype{};
  if (!proto::dtype_from_wire(a.dtype, &dtype)) {
    return format("dtype %d is not a gsync_dtype (GSYNC_FLOAT32 .. GSYNC_UINT8)", a.dtype);
  }
  if (a.opcode == proto::Opcode::kAllreduce) {
    proto::RedOp redop{};
    if (!proto::redop_from_wire(a.redop, &redop)) {
      return format("op %d is not a gsync_redop (GSYNC_SUM .. GSYNC_MAX)", a.redop);
    }
    if (redop == proto::RedOp::kWeightedAvg && !(std::isfinite(a.weight) && a.weight >= 0)) {
      return format("weight %g must be finite and >= 0 for GSYNC_WEIGHTED_AVG", a.weight);
    }
  }
  if (proto::is_ps(a.opcode))
    if (std::string why = ps_error(a, dtype); !why.empty()) return why;
  // An elastic job's world is known once gsync_world said it; before that
  // the daemon answers GSYNC_ERR_WORLD_CHANGED, whatever the root.
  if (a.opcode == proto::Opcode::kBroadcast && (a.root < 0 || (world > 0 && a.root >= world))) {
    return format("root %d is not a rank of the job (world_size %d)", a.root, world);
  }
  if (a.compress != nullptr && a.opcode == proto::Opcode::kAllreduce) {
    proto::RedOp redop{};
    proto::redop_from_wire(a.redop, &redop);
    if (std::string why = proto::check_use(*a.compress, a.opcode, dtype, redop); !why.empty())
      return "compression: " + why;
  }
  *elem = proto::dtype_size(dtype);
  if (a.count > SIZE_MAX / *elem) {
    return format("count %zu of %zu-byte elements overflows", a.count, *elem);
  }
  if (a.buf == nullptr && a.count > 0) return format("buf is NULL with count %zu", a.count);
  return "";
}

}  // namespace

int Comm::validate(const OpArgs& a, bool* zero_copy, uint64_t* bytes,
                      uint64_t* device_offset) const {
  *zero_copy = false;
  *bytes = 0;
  if (a.opcode == proto::Opcode::kBarrier || a.opcode == proto::Opcode::kWorld) return GSYNC_OK;
  std::string why;
  if (a.opcode == proto::Opcode::kLease) {
    why = lease_error(a);
  } else {
    size_t elem = 0;
    why = argument_error(a, world_size_.load(std::memory_order_relaxed), &elem);
    if (why.empty() && a.opcode == proto::Opcode::kPsDeclare && params_.reproducible && !bsp())
      why = "reproducible pushes need the bsp sync mode (asp and ssp apply each push as it "
            "comes, in arrival order): turn off cfg.reproducible or use GSYNC_SYNC_BSP";
    if (why.empty()) why = buffer_error(a, elem, zero_copy, bytes, device_offset);
  }
  if (why.empty()) return GSYNC_OK;
  return fail(GSYNC_ERR_INVALID,
              format("%s: %s (key %llu step %llu, %s)", a.api, why.c_str(),
                     static_cast<unsigned long long>(a.key),
                     static_cast<unsigned long long>(a.step), context().c_str()));
}

std::string Comm::buffer_error(const OpArgs& a, size_t elem, bool* zero_copy, uint64_t* bytes,
                                  uint64_t* device_offset) const {
  const uint64_t n = uint64_t{a.count} * elem;
  if (n == 0) return "";
  const auto p = reinterpret_cast<uintptr_t>(a.buf);
  const auto a0 = reinterpret_cast<uintptr_t>(arena_);
  const uintptr_t a1 = a0 + arena_bytes_;
  if (p > UINTPTR_MAX - n)
    return format("buffer %p + %llu bytes wraps around", a.buf, static_cast<unsigned long long>(n));
  const bool inside = p >= a0 && p + n <= a1;
  const bool overlaps = p < a1 && p + n > a0;
  if (!overlaps) {
    std::string why;
    const int found = device_.find(a.buf, n, device_offset, &why);
    if (found == GSYNC_OK && proto::is_ps(a.opcode))
      return "buf is device memory; the parameter server takes host buffers (gsync_alloc)";
    if (found == GSYNC_OK && proto::from_entry_offset(*device_offset).offset % elem != 0)
      return format("device buffer %p is not aligned to its %zu-byte elements", a.buf, elem);
    if (found == GSYNC_OK) {
      *zero_copy = true;
      *bytes = n;
      return "";
    }
    if (found != GSYNC_ERR_AGAIN) return why;
    // Staging copies with memcpy: a device pointer there would crash.
    if (DeviceMemory::is_device_pointer(a.buf))
      return format("buffer %p is device memory that gsync_alloc_device did not allocate; "
                    "allocate it there, or copy it to host memory",
                    a.buf);
  }
  if (overlaps && !inside) {
    return format("buffer %p of %s straddles the arena boundary", a.buf, format_bytes(n).c_str());
  }
  if (inside && (p - a0) % elem != 0) {
    return format("buffer %p in the arena is not aligned to its %zu-byte elements", a.buf, elem);
  }
  // A declaration always goes through a staging block: its options take
  // the 64 bytes before its tensor.
  *zero_copy = inside && a.opcode != proto::Opcode::kPsDeclare;
  *bytes = n;
  return "";
}

proto::Compression Comm::compression_of(const OpArgs& a) const {
  if (a.opcode != proto::Opcode::kAllreduce) return {};
  if (a.compress != nullptr) return *a.compress;
  proto::DType dtype{};
  proto::RedOp redop{};
  if (!proto::dtype_from_wire(a.dtype, &dtype) || !proto::redop_from_wire(a.redop, &redop))
    return {};
  const proto::Compression& job = params_.compression;
  return proto::check_use(job, a.opcode, dtype, redop).empty() ? job : proto::Compression{};
}

int Comm::submit(const OpArgs& a, std::shared_ptr<RequestState>* out) {
  bool zero_copy;
  uint64_t bytes;
  uint64_t device_offset = 0;
  if (int rc = validate(a, &zero_copy, &bytes, &device_offset); rc != GSYNC_OK) return rc;
  auto st = std::make_shared<RequestState>();
  st->key = a.key;
  st->step = a.step;
  st->opcode = a.opcode;

  std::unique_lock lk(mu_);
  check_alive_locked();
  if (shut_) {
    return fail(
        closed_code_,
        format("%s: key %llu step %llu: %s (%s)", a.api, static_cast<unsigned long long>(a.key),
               static_cast<unsigned long long>(a.step), closed_why_.c_str(), context().c_str()));
  }
  if (inflight_ >= max_inflight_) drain_locked();
  if (inflight_ >= max_inflight_) {
    return fail(GSYNC_ERR_BUSY,
                format("%s: key %llu step %llu: %u operations in flight, the most the rings allow "
                       "(sq %u, cq %u entries); wait for some first (%s)",
                       a.api, static_cast<unsigned long long>(a.key),
                       static_cast<unsigned long long>(a.step), inflight_, sq_mask_ + 1,
                       cq_mask_ + 1, context().c_str()));
  }
  uint64_t offset = 0;
  bool copy_in = false;
  if (device_offset != 0) {
    offset = device_offset;  // the daemon checks it against its mapping
  } else if (zero_copy) {
    offset = reinterpret_cast<uintptr_t>(a.buf) - reinterpret_cast<uintptr_t>(arena_);
    // The daemon only bounds-checks; catching a use after gsync_free or a
    // range across two blocks here gives the caller a message instead of
    // silently reduced neighbours.
    const auto block = allocator_.find_block(offset);
    if (!block || user_blocks_.count(block->first) == 0 ||
        offset + bytes > block->first + block->second) {
      return fail(
          GSYNC_ERR_INVALID,
          format("%s: buffer %p of %s is in the arena but not inside one live gsync_alloc "
                 "block (key %llu step %llu, %s)",
                 a.api, a.buf, format_bytes(bytes).c_str(), static_cast<unsigned long long>(a.key),
                 static_cast<unsigned long long>(a.step), context().c_str()));
    }
  } else if (bytes > 0) {
    if (int rc = stage_locked(a, bytes, *st, &offset, &copy_in); rc != GSYNC_OK) return rc;
  }
  st->tag = next_tag_++;
  ++inflight_;
  if (copy_in) {
    // The staging block is ours alone until published; copy without the lock.
    lk.unlock();
    std::memcpy(arena_ + offset, a.buf, bytes);
    lk.lock();
  }
  if (int rc = publish_locked(a, st, offset); rc != GSYNC_OK) return rc;
  *out = std::move(st);
  return GSYNC_OK;
}

int Comm::stage_locked(const OpArgs& a, uint64_t bytes, RequestState& st, uint64_t* offset,
                          bool* copy_in) {
  const uint64_t skip = a.opcode == proto::Opcode::kPsDeclare ? sizeof(proto::PsDeclareHeader) : 0;
  const auto staging = allocator_.allocate(bytes + skip);
  if (!staging) {
    return fail(GSYNC_ERR_NOMEM,
                format("%s: no room to stage key %llu step %llu through the arena: %s; "
                       "allocate tensors with gsync_alloc to skip the copy (%s)",
                       a.api, static_cast<unsigned long long>(a.key),
                       static_cast<unsigned long long>(a.step),
                       allocator_.exhaustion_message(bytes).c_str(), context().c_str()));
  }
  *offset = *staging + skip;
  st.staging_held = true;
  st.staging_offset = *staging;
  st.data_skip = skip;
  st.bytes = bytes;
  st.user_buf = a.buf;
  if (a.ps != nullptr) {
    const proto::PsDeclareHeader h = proto::to_header(*a.ps);
    std::memcpy(arena_ + *staging, &h, sizeof h);
  }
  // A broadcast overwrites every rank's buffer with the root's: only the
  // root's data needs to go in, and only the others' needs to come out.
  const bool is_root = a.opcode == proto::Opcode::kBroadcast &&
                       a.root == rank_.load(std::memory_order_relaxed);
  *copy_in = a.opcode != proto::Opcode::kBroadcast || is_root;
  st.copy_out = !is_root;
  return GSYNC_OK;
}

int Comm::publish_locked(const OpArgs& a, const std::shared_ptr<RequestState>& st,
                            uint64_t offset) {
  if (shut_) {
    undo_submit_locked(*st);
    return fail(closed_code_, format("%s: %s: %s (%s)", a.api, op_name(*st).c_str(),
                                     closed_why_.c_str(), context().c_str()));
  }
  // Cannot fill while in-flight <= sq_entries, unless the daemon posts
  // completions before it advances sq_head; then this is transient.
  const uint32_t head = header_->sq_head.load(std::memory_order_acquire);
  if (sq_tail_ - head > sq_mask_) {
    undo_submit_locked(*st);
    return fail(GSYNC_ERR_BUSY,
                format("%s: %s: the submission ring is full (sq_head %u, sq_tail %u); try again "
                       "(%s)",
                       a.api, op_name(*st).c_str(), head, sq_tail_, context().c_str()));
  }
  // Into the table before the entry is visible: if this throws (bad_alloc),
  // nothing was published and the reservation is undone.
  try {
    table_.emplace(st->tag, st);
  } catch (...) {
    undo_submit_locked(*st);
    throw;
  }
  proto::SubmitEntry e{};
  e.tag = st->tag;
  e.key = a.opcode == proto::Opcode::kBarrier ? kBarrierKey : a.key;
  e.step = a.step;
  e.offset = offset;
  e.count = a.count;
  const bool pushes = a.opcode == proto::Opcode::kPush || a.opcode == proto::Opcode::kPushPull;
  e.weight = pushes || (a.opcode == proto::Opcode::kAllreduce &&
                        a.redop == proto::wire(proto::RedOp::kWeightedAvg))
                 ? a.weight
                 : 0.0;
  e.timeout_ms = a.timeout_ms;
  // dtype and redop were checked against the vocabulary by validate().
  e.opcode = proto::wire(a.opcode);
  e.dtype = static_cast<uint8_t>(a.dtype);
  e.redop = proto::is_ps(a.opcode) ? 0 : static_cast<uint8_t>(a.redop);
  proto::to_entry(compression_of(a), &e.compress, &e.compress_arg);
  if (pushes && a.lr > 0) std::memcpy(&e.compress_arg, &a.lr, sizeof a.lr);
  e.root = proto::is_ps(a.opcode) ? 0 : a.root;
  std::memcpy(static_cast<void*>(&sq_[sq_tail_ & sq_mask_]), &e, sizeof(e));
  ++sq_tail_;
  // Release: the entry and the tensor data (written by this thread, or by
  // the caller before it called us) are visible before the new tail.
  header_->sq_tail.store(sq_tail_, std::memory_order_release);
  // No doorbell while the daemon is looking at the ring by itself: the
  // write would cost this rank a syscall and the daemon a wakeup and a read.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->sq_polled.load(std::memory_order_relaxed) == 0) ring(conn_.sq_doorbell.get());
  return GSYNC_OK;
}

void Comm::undo_submit_locked(RequestState& st) {
  free_staging_locked(st);
  --inflight_;
}
}  // namespace gsync::client
