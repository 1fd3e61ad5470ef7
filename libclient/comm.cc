// SPDX-License-Identifier: Apache-2.0
#include "libclient/comm.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "libclient/cpu_share.h"
#include "libclient/error.h"
#include "libclient/format.h"
#include "protocol/compression.h"
#include "protocol/device.h"
#include "protocol/lease.h"
#include "protocol/ps.h"
#include "protocol/world.h"

namespace gsync::client {
namespace {

using Clock = std::chrono::steady_clock;

// Spin this long on the completion ring (yielding the core between looks)
// before sleeping on the doorbell: a local reduce of a small bucket finishes
// in microseconds, a small op across hosts in about a hundred, and a sleep
// plus wakeup costs the rank two syscalls and a context switch and the
// daemon an eventfd write. Measured, 4 KiB across 4 hosts on 2 cores:
// median 109 us with 50 us of spin, 91 us with 200 (five interleaved
// pairs); one host's 4 ranks: no difference. Not at all when the rank and
// its daemon share their one CPU (cpu_share.h): with each host pinned to
// one core (gsync-perf --pin) 82 us without spin, 100-130 with it.
constexpr auto kSpin = std::chrono::microseconds(200);
// Sleep at most this long at a time, then look again: bounds the damage of
// a lost wakeup and lets several waiting threads take turns.
constexpr int kSliceMs = 10;
// A session looks at its socket for a hangup at most this often on the fast
// path (submit, test, the first look of wait). A daemon that died in between
// is still noticed: the op it never completes fails at the wait, whose
// blocking poll watches the socket too.
constexpr auto kAliveEvery = std::chrono::milliseconds(1);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

void ring(int eventfd_fd) {
  const uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(eventfd_fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
  // EAGAIN means the counter is saturated: the reader has a wakeup pending.
}

void drain_eventfd(int eventfd_fd) {
  uint64_t value;
  ssize_t n;
  do {
    n = ::read(eventfd_fd, &value, sizeof(value));
  } while (n < 0 && errno == EINTR);
}

}  // namespace

int Session::open(const gsync_config_t* cfg, std::shared_ptr<Session>* out) {
  ConnectParams params;
  if (int rc = parse_config(cfg, &params); rc != GSYNC_OK) return rc;
  Connection conn;
  if (int rc = connect_session(params, &conn); rc != GSYNC_OK) return rc;
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return fail(GSYNC_ERR_NOMEM, format("eventfd: %s (job %s rank %d)", std::strerror(errno),
                                        params.job_id.c_str(), params.rank));
  }
  *out = std::make_shared<Session>(std::move(params), std::move(conn), std::move(wake));
  return GSYNC_OK;
}

Session::Session(ConnectParams params, Connection conn, UniqueFd wake)
    : params_(std::move(params)),
      conn_(std::move(conn)),
      wake_(std::move(wake)),
      allocator_(conn_.geometry.arena_bytes) {
  rank_.store(params_.min_hosts > 0 ? -1 : params_.rank, std::memory_order_relaxed);
  world_size_.store(params_.min_hosts > 0 ? 0 : params_.world_size, std::memory_order_relaxed);
  const ShmGeometry& g = conn_.geometry;
  char* base = conn_.shm.base();
  header_ = reinterpret_cast<proto::ShmHeader*>(base);
  sq_ = reinterpret_cast<proto::SubmitEntry*>(base + g.sq_offset);
  cq_ = reinterpret_cast<proto::CompleteEntry*>(base + g.cq_offset);
  arena_ = base + g.arena_offset;
  arena_bytes_ = g.arena_bytes;
  sq_mask_ = g.sq_entries - 1;
  cq_mask_ = g.cq_entries - 1;
  // With no more than this many operations unconsumed, the daemon always
  // finds room for a completion and the client for a submission.
  max_inflight_ = std::min(g.sq_entries, g.cq_entries);
  sq_tail_ = header_->sq_tail.load(std::memory_order_relaxed);
  cq_head_ = header_->cq_head.load(std::memory_order_relaxed);
  ucred cred{};
  socklen_t len = sizeof cred;
  pid_t daemon = getsockopt(conn_.sock.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
  spin_ = !shares_one_cpu_with(daemon);
}

std::string Session::context() const {
  const int rank = rank_.load(std::memory_order_relaxed);
  if (rank < 0)  // an elastic job's rank before gsync_world told it
    return format("job %s local rank %d", params_.job_id.c_str(), params_.local_rank);
  return format("job %s rank %d", params_.job_id.c_str(), rank);
}

std::string Session::op_name(const RequestState& st) const {
  if (st.opcode == proto::Opcode::kBarrier) {
    return format("barrier step %llu (tag %llu)", static_cast<unsigned long long>(st.step),
                  static_cast<unsigned long long>(st.tag));
  }
  return format("%s key %llu step %llu (tag %llu)", proto::name(st.opcode),
                static_cast<unsigned long long>(st.key), static_cast<unsigned long long>(st.step),
                static_cast<unsigned long long>(st.tag));
}

int Session::close() {
  std::unique_lock lk(mu_);
  if (fds_closed_) return GSYNC_OK;
  // Results that already arrived are kept; only what is still pending fails.
  if (!shut_) drain_locked();
  shut_down_locked(GSYNC_ERR_CLOSED, format("the session was closed by gsync_close (socket %s)",
                                            params_.socket_path.c_str()));
  // The poller blocks in poll() on the fds about to be closed: wake it and
  // wait until it has left.
  kick_poller_locked();
  while (poller_active_) cv_.wait_for(lk, std::chrono::milliseconds(1));
  fds_closed_ = true;
  conn_.sock.reset();
  conn_.sq_doorbell.reset();
  conn_.cq_doorbell.reset();
  return GSYNC_OK;
}

int Session::alloc(size_t bytes, void** out) {
  if (out == nullptr) return fail(GSYNC_ERR_INVALID, "gsync_alloc: out is NULL");
  *out = nullptr;
  std::lock_guard lk(mu_);
  if (shut_) {
    return fail(closed_code_,
                format("gsync_alloc: %s (%s)", closed_why_.c_str(), context().c_str()));
  }
  const auto offset = allocator_.allocate(bytes);
  if (!offset) {
    return fail(GSYNC_ERR_NOMEM,
                format("%s (%s)", allocator_.exhaustion_message(bytes).c_str(), context().c_str()));
  }
  user_blocks_.insert(*offset);
  *out = arena_ + *offset;
  return GSYNC_OK;
}

int Session::free(void* ptr) {
  if (ptr == nullptr) return GSYNC_OK;
  std::lock_guard lk(mu_);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  const auto a0 = reinterpret_cast<uintptr_t>(arena_);
  if (p < a0 || p - a0 >= arena_bytes_ || user_blocks_.erase(p - a0) == 0) {
    return fail(GSYNC_ERR_INVALID,
                format("gsync_free: %p was not returned by gsync_alloc on this comm, or was freed "
                       "already (%s)",
                       ptr, context().c_str()));
  }
  allocator_.release(p - a0);
  return GSYNC_OK;
}

int Session::device_socket() {
  std::lock_guard lk(mu_);
  return shut_ || fds_closed_ ? -1 : conn_.sock.get();
}

int Session::alloc_device(size_t bytes, void** out) {
  if (out == nullptr) return fail(GSYNC_ERR_INVALID, "gsync_alloc_device: out is NULL");
  std::string why;
  const int rc = device_.alloc(device_socket(), bytes, out, &why);
  if (rc != GSYNC_OK)
    return fail(rc, format("gsync_alloc_device: %s (%s)", why.c_str(), context().c_str()));
  return GSYNC_OK;
}

int Session::free_device(void* ptr) {
  if (ptr == nullptr) return GSYNC_OK;
  std::string why;
  const int rc = device_.free(device_socket(), ptr, &why);
  if (rc != GSYNC_OK)
    return fail(rc, format("gsync_free_device: %s (%s)", why.c_str(), context().c_str()));
  return GSYNC_OK;
}

int Session::arena_info(size_t* capacity, size_t* free_bytes) {
  std::lock_guard lk(mu_);
  if (capacity != nullptr) *capacity = allocator_.capacity();
  if (free_bytes != nullptr) *free_bytes = allocator_.free_bytes();
  return GSYNC_OK;
}

int Session::completion_fd() {
  std::lock_guard lk(mu_);
  if (shut_) {
    return fail(closed_code_,
                format("gsync_completion_fd: %s (%s)", closed_why_.c_str(), context().c_str()));
  }
  if (!armed_) {
    // The daemon rings the doorbell only while cq_waiters != 0. A caller
    // that polls this fd from its own event loop is a waiter for as long as
    // the session lives, so count it once, for good.
    armed_ = true;
    header_->cq_waiters.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // Completions posted before the count went up rang no doorbell; make the
    // fd readable once so the caller looks.
    ring(conn_.cq_doorbell.get());
  }
  return conn_.cq_doorbell.get();
}

int Session::validate(const OpArgs& a, bool* zero_copy, uint64_t* bytes,
                      uint64_t* device_offset) const {
  auto bad = [&](const std::string& what) {
    return fail(GSYNC_ERR_INVALID,
                format("%s: %s (key %llu step %llu, %s)", a.api, what.c_str(),
                       static_cast<unsigned long long>(a.key),
                       static_cast<unsigned long long>(a.step), context().c_str()));
  };
  *zero_copy = false;
  *bytes = 0;
  if (a.opcode == proto::Opcode::kBarrier || a.opcode == proto::Opcode::kWorld) return GSYNC_OK;
  if (a.opcode == proto::Opcode::kLease) {
    // key: the epoch, step: the clock, count: the epoch's batches.
    if (a.count == 0 || a.count > proto::kMaxLeaseBatches)
      return bad(format("batches %zu is outside 1 .. %llu", a.count,
                        static_cast<unsigned long long>(proto::kMaxLeaseBatches)));
    if (a.step >= proto::kDeclareStep) return bad("clock is out of range");
    return GSYNC_OK;
  }
  if (a.key == kBarrierKey) return bad("key 0xffffffffffffffff is reserved for barriers");
  proto::DType dtype{};
  if (!proto::dtype_from_wire(a.dtype, &dtype)) {
    return bad(format("dtype %d is not a gsync_dtype (GSYNC_FLOAT32 .. GSYNC_INT32)", a.dtype));
  }
  if (a.opcode == proto::Opcode::kAllreduce) {
    proto::RedOp redop{};
    if (!proto::redop_from_wire(a.redop, &redop)) {
      return bad(format("op %d is not a gsync_redop (GSYNC_SUM .. GSYNC_MAX)", a.redop));
    }
    if (redop == proto::RedOp::kWeightedAvg && !(std::isfinite(a.weight) && a.weight >= 0)) {
      return bad(format("weight %g must be finite and >= 0 for GSYNC_WEIGHTED_AVG", a.weight));
    }
  }
  if (proto::is_ps(a.opcode)) {
    if (dtype != proto::DType::kF32 && dtype != proto::DType::kF16 && dtype != proto::DType::kBF16)
      return bad(format("dtype %s: the parameter server keeps float32, float16 and bfloat16",
                        proto::name(dtype)));
    if (a.count == 0) return bad("count is 0");
    if ((a.opcode == proto::Opcode::kPush || a.opcode == proto::Opcode::kPushPull) &&
        !(std::isfinite(a.weight) && a.weight >= 0))
      return bad(format("opts.weight %g must be finite and >= 0 (0: a step without data)",
                        a.weight));
    if (!(std::isfinite(a.lr) && a.lr >= 0))
      return bad(format("opts.lr %g must be finite and >= 0 (0: the declared one)", a.lr));
    if (a.ps != nullptr)
      if (std::string why = proto::check(*a.ps); !why.empty()) return bad("opts." + why);
  }
  // An elastic job's world is known once gsync_world said it; before that
  // the daemon answers GSYNC_ERR_WORLD_CHANGED, whatever the root.
  const int world = world_size_.load(std::memory_order_relaxed);
  if (a.opcode == proto::Opcode::kBroadcast && (a.root < 0 || (world > 0 && a.root >= world))) {
    return bad(format("root %d is not a rank of the job (world_size %d)", a.root, world));
  }
  if (a.compress != nullptr && a.opcode == proto::Opcode::kAllreduce) {
    proto::RedOp redop{};
    proto::redop_from_wire(a.redop, &redop);
    if (std::string why = proto::check_use(*a.compress, a.opcode, dtype, redop); !why.empty())
      return bad("compression: " + why);
  }
  const size_t elem = proto::dtype_size(dtype);
  if (a.count > SIZE_MAX / elem) {
    return bad(format("count %zu of %zu-byte elements overflows", a.count, elem));
  }
  if (a.buf == nullptr && a.count > 0) return bad(format("buf is NULL with count %zu", a.count));
  const uint64_t n = uint64_t{a.count} * elem;
  if (n == 0) return GSYNC_OK;
  const auto p = reinterpret_cast<uintptr_t>(a.buf);
  const auto a0 = reinterpret_cast<uintptr_t>(arena_);
  const uintptr_t a1 = a0 + arena_bytes_;
  if (p > UINTPTR_MAX - n)
    return bad(
        format("buffer %p + %llu bytes wraps around", a.buf, static_cast<unsigned long long>(n)));
  const bool inside = p >= a0 && p + n <= a1;
  const bool overlaps = p < a1 && p + n > a0;
  if (!overlaps) {
    std::string why;
    const int found = device_.find(a.buf, n, device_offset, &why);
    if (found == GSYNC_OK && proto::is_ps(a.opcode))
      return bad("buf is device memory; the parameter server takes host buffers (gsync_alloc)");
    if (found == GSYNC_OK && proto::from_entry_offset(*device_offset).offset % elem != 0)
      return bad(format("device buffer %p is not aligned to its %zu-byte elements", a.buf, elem));
    if (found == GSYNC_OK) {
      *zero_copy = true;
      *bytes = n;
      return GSYNC_OK;
    }
    if (found != GSYNC_ERR_AGAIN) return bad(why);
    // Staging copies with memcpy: a device pointer there would crash.
    if (DeviceMemory::is_device_pointer(a.buf))
      return bad(format("buffer %p is device memory that gsync_alloc_device did not allocate; "
                        "allocate it there, or copy it to host memory",
                        a.buf));
  }
  if (overlaps && !inside) {
    return bad(
        format("buffer %p of %s straddles the arena boundary", a.buf, format_bytes(n).c_str()));
  }
  if (inside && (p - a0) % elem != 0) {
    return bad(
        format("buffer %p in the arena is not aligned to its %zu-byte elements", a.buf, elem));
  }
  // A declaration always goes through a staging block: its options take
  // the 64 bytes before its tensor.
  *zero_copy = inside && a.opcode != proto::Opcode::kPsDeclare;
  *bytes = n;
  return GSYNC_OK;
}

proto::Compression Session::compression_of(const OpArgs& a) const {
  if (a.opcode != proto::Opcode::kAllreduce) return {};
  if (a.compress != nullptr) return *a.compress;
  proto::DType dtype{};
  proto::RedOp redop{};
  if (!proto::dtype_from_wire(a.dtype, &dtype) || !proto::redop_from_wire(a.redop, &redop))
    return {};
  const proto::Compression& job = params_.compression;
  return proto::check_use(job, a.opcode, dtype, redop).empty() ? job : proto::Compression{};
}

int Session::submit(const OpArgs& a, std::shared_ptr<RequestState>* out) {
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
    offset = *staging + skip;
    st->staging_held = true;
    st->staging_offset = *staging;
    st->data_skip = skip;
    st->bytes = bytes;
    st->user_buf = a.buf;
    if (a.ps != nullptr) {
      const proto::PsDeclareHeader h = proto::to_header(*a.ps);
      std::memcpy(arena_ + *staging, &h, sizeof h);
    }
    // A broadcast overwrites every rank's buffer with the root's: only the
    // root's data needs to go in, and only the others' needs to come out.
    const bool is_root = a.opcode == proto::Opcode::kBroadcast &&
                         a.root == rank_.load(std::memory_order_relaxed);
    copy_in = a.opcode != proto::Opcode::kBroadcast || is_root;
    st->copy_out = !is_root;
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

int Session::publish_locked(const OpArgs& a, const std::shared_ptr<RequestState>& st,
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

void Session::undo_submit_locked(RequestState& st) {
  free_staging_locked(st);
  --inflight_;
}

void Session::drain_locked() {
  if (fds_closed_) return;
  // Acquire: the entries and the reduced tensors are visible once the tail is.
  const uint32_t tail = header_->cq_tail.load(std::memory_order_acquire);
  const uint32_t ready = tail - cq_head_;
  if (ready == 0) return;
  if (ready > cq_mask_ + 1) {
    shut_down_locked(GSYNC_ERR_PROTOCOL,
                     format("gsyncd corrupted the completion ring: cq_tail %u is %u entries past "
                            "cq_head %u in a ring of %u (session %llu)",
                            tail, ready, cq_head_, cq_mask_ + 1,
                            static_cast<unsigned long long>(conn_.session_id)));
    return;
  }
  while (cq_head_ != tail) {
    // Copied out whole: the slot may be reused as soon as cq_head moves.
    proto::CompleteEntry e;
    std::memcpy(&e, &cq_[cq_head_ & cq_mask_], sizeof(e));
    ++cq_head_;
    complete_locked(e.tag, e.status, std::string(e.message, strnlen(e.message, sizeof(e.message))),
                    e.value);
  }
  header_->cq_head.store(cq_head_, std::memory_order_release);
  kick_poller_locked();
  cv_.notify_all();
}

void Session::complete_locked(uint64_t tag, int32_t status, std::string message,
                              uint32_t value) {
  auto it = table_.find(tag);
  // An unknown tag is a daemon bug; there is no one to tell but nothing to
  // corrupt either.
  if (it == table_.end()) return;
  std::shared_ptr<RequestState> st = std::move(it->second);
  table_.erase(it);
  --inflight_;
  if (status > 0) {
    message = format("gsyncd completed %s with invalid status %d (%s)", op_name(*st).c_str(),
                     status, context().c_str());
    status = GSYNC_ERR_PROTOCOL;
  }
  st->done = true;
  st->status = status;
  st->value = value;
  if (status == GSYNC_OK) st->text = std::move(message);
  if (status != GSYNC_OK) {
    st->error = !message.empty() ? std::move(message)
                                 : format("%s: %s (%s)", op_name(*st).c_str(), error_name(status),
                                          context().c_str());
  }
  if (st->staging_held) {
    if (status == GSYNC_OK && st->copy_out && !st->abandoned) {
      st->copy_out_pending = true;
    } else {
      free_staging_locked(*st);
    }
  }
}

void Session::check_alive_locked(bool force) {
  if (shut_ || fds_closed_) return;
  const auto now = Clock::now();
  if (!force && now - alive_checked_ < kAliveEvery) return;
  alive_checked_ = now;
  // POLLRDHUP alone, never a read: the only messages after the hello are
  // the replies to device memory requests, and those are their requester's
  // (device_memory.cc). A hangup is reported whatever was asked for.
  pollfd p{conn_.sock.get(), POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return;
  const bool gone = (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) != 0;
  if (!gone) return;
  // Completions already posted are valid results; keep them.
  drain_locked();
  shut_down_locked(GSYNC_ERR_CLOSED, format("gsyncd closed session %llu (socket %s)",
                                            static_cast<unsigned long long>(conn_.session_id),
                                            params_.socket_path.c_str()));
}

void Session::shut_down_locked(int code, const std::string& why) {
  if (!shut_) {
    shut_ = true;
    closed_code_ = code;
    closed_why_ = why;
  }
  for (auto& [tag, st] : table_) {
    st->done = true;
    st->status = code;
    st->error = format("%s did not complete: %s (%s)", op_name(*st).c_str(), why.c_str(),
                       context().c_str());
    // No new operation can start after shut_, so the block is never reused
    // while a confused or dying daemon might still write to it.
    free_staging_locked(*st);
  }
  table_.clear();
  inflight_ = 0;
  kick_poller_locked();
  cv_.notify_all();
}

void Session::free_staging_locked(RequestState& st) {
  if (!st.staging_held) return;
  allocator_.release(st.staging_offset);
  st.staging_held = false;
  st.copy_out_pending = false;
}

void Session::kick_poller_locked() {
  if (poller_active_) ring(wake_.get());
}

int Session::finish(RequestState& st, std::unique_lock<std::mutex>& lk) {
  if (st.copy_out_pending) {
    // Copy the result out on the caller's thread, without the lock; the
    // block stays allocated (staging_held) until the copy is done.
    st.copy_out_pending = false;
    void* dst = st.user_buf;
    const char* src = arena_ + st.staging_offset + st.data_skip;
    const size_t n = st.bytes;
    lk.unlock();
    std::memcpy(dst, src, n);
    lk.lock();
    free_staging_locked(st);
  }
  if (st.status != GSYNC_OK) return fail(st.status, st.error);
  return GSYNC_OK;
}

int Session::test(RequestState& st) {
  std::unique_lock lk(mu_);
  if (!st.done && !fds_closed_) {
    // Clear the doorbell before looking at the ring: a completion posted
    // after the look rings it again, so an event loop never misses one.
    if (armed_) drain_eventfd(conn_.cq_doorbell.get());
    drain_locked();
    if (!st.done) check_alive_locked();
  }
  if (!st.done) {
    return fail(GSYNC_ERR_AGAIN,
                format("%s is not complete yet (%s)", op_name(st).c_str(), context().c_str()));
  }
  return finish(st, lk);
}

int Session::wait(RequestState& st, int timeout_ms) {
  if (timeout_ms == 0) return test(st);
  const auto start = Clock::now();
  std::unique_lock lk(mu_);
  // After a block the socket is looked at every time: the block may have
  // ended on its hangup.
  for (bool blocked = false;; blocked = true) {
    if (!st.done && !fds_closed_) {
      drain_locked();
      if (!st.done) check_alive_locked(blocked);
    }
    if (st.done) return finish(st, lk);
    if (fds_closed_) {  // close() completes everything; never poll closed fds
      return fail(GSYNC_ERR_CLOSED,
                  format("%s: the session is closed (%s)", op_name(st).c_str(), context().c_str()));
    }
    int slice = kSliceMs;
    if (timeout_ms > 0) {
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      if (waited >= timeout_ms) {
        return fail(GSYNC_ERR_AGAIN, format("%s is still pending after %d ms (%s)",
                                            op_name(st).c_str(), timeout_ms, context().c_str()));
      }
      slice = static_cast<int>(std::min<int64_t>(slice, timeout_ms - waited));
    }
    if (poller_active_) {
      cv_.wait_for(lk, std::chrono::milliseconds(slice));
      continue;
    }
    poller_active_ = true;
    lk.unlock();
    block_for_completion(slice);
    lk.lock();
    poller_active_ = false;
    // Another waiter may take the poller's place (or close() may proceed).
    cv_.notify_all();
  }
}

void Session::block_for_completion(int slice_ms) {
  auto completion_ready = [this] {
    return header_->cq_tail.load(std::memory_order_acquire) !=
           header_->cq_head.load(std::memory_order_relaxed);
  };
  const auto spin_end = Clock::now() + kSpin;
  while (spin_) {
    for (int i = 0; i < 64; ++i) {
      if (completion_ready()) return;
      cpu_relax();
    }
    // Ranks often outnumber cores, and the daemon that must run for the
    // completion to exist may be waiting for this core: hand it over.
    sched_yield();
    if (Clock::now() >= spin_end) break;
  }

  // Dekker with the daemon: announce the waiter, then look at the ring; the
  // daemon publishes the tail, then looks at cq_waiters. With a seq_cst
  // fence on both sides at least one of the two sees the other, so either
  // this thread sees the completion or the daemon rings the doorbell.
  header_->cq_waiters.fetch_add(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!completion_ready()) {
    pollfd fds[3] = {
        {conn_.cq_doorbell.get(), POLLIN, 0},
        {wake_.get(), POLLIN, 0},
        {conn_.sock.get(), POLLRDHUP, 0},  // hangup: the daemon is gone
    };
    if (::poll(fds, 3, slice_ms) > 0) {
      if (fds[0].revents & POLLIN) drain_eventfd(conn_.cq_doorbell.get());
      if (fds[1].revents & POLLIN) drain_eventfd(wake_.get());
    }
  }
  header_->cq_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

bool Session::leased_batch(RequestState& st, uint64_t* batch) {
  std::lock_guard lk(mu_);
  if (!st.done || st.status != GSYNC_OK || st.opcode != proto::Opcode::kLease) return false;
  *batch = st.value;
  return true;
}

int Session::world(gsync_world_t* out, int timeout_ms) {
  std::shared_ptr<RequestState> st;
  const OpArgs args{.api = "gsync_world", .opcode = proto::Opcode::kWorld};
  if (int rc = submit(args, &st); rc != GSYNC_OK) return rc;
  int rc = wait(*st, timeout_ms);
  if (rc == GSYNC_ERR_AGAIN) {
    // The daemon still answers it when a world forms; nobody waits then.
    release(*st);
    return fail(GSYNC_ERR_TIMEOUT, format("gsync_world: no world after %d ms: %s (%s)", timeout_ms,
                                          "the job waits for enough hosts (min_hosts)",
                                          context().c_str()));
  }
  if (rc != GSYNC_OK) return rc;
  proto::WorldView w;
  std::string text;
  {
    std::lock_guard lk(mu_);
    text = st->text;
  }
  if (!proto::world_from_text(text, &w))
    return fail(GSYNC_ERR_PROTOCOL, format("gsync_world: gsyncd answered '%s', not a world (%s)",
                                           text.c_str(), context().c_str()));
  rank_.store(w.rank, std::memory_order_relaxed);
  world_size_.store(w.world_size, std::memory_order_relaxed);
  out->epoch = w.epoch;
  out->world_size = w.world_size;
  out->rank = w.rank;
  out->local_rank = w.local_rank;
  out->local_size = w.local_size;
  out->hosts = w.hosts;
  return GSYNC_OK;
}

bool Session::declared_clock(RequestState& st, uint64_t* clock) {
  std::lock_guard lk(mu_);
  if (!st.done || st.status != GSYNC_OK || st.opcode != proto::Opcode::kPsDeclare) return false;
  *clock = st.value;
  return true;
}

bool Session::rolled_back(RequestState& st, bool* rolled, const char** why) {
  std::lock_guard lk(mu_);
  if (!st.done || st.status != GSYNC_OK || !proto::is_push(st.opcode)) return false;
  // value 1 and the verdict's text (daemon/ps/guard.cc).
  *rolled = st.value == 1;
  *why = *rolled ? st.text.c_str() : "";
  return true;
}

const char* Session::request_error(RequestState& st) {
  std::lock_guard lk(mu_);
  return st.done && st.status != GSYNC_OK ? st.error.c_str() : "";
}

void Session::release(RequestState& st) {
  std::lock_guard lk(mu_);
  if (!st.done) {
    // The completion is consumed and dropped by whoever drains it; the
    // staging block is freed then (the daemon may be writing it now).
    st.abandoned = true;
    return;
  }
  free_staging_locked(st);
}

}  // namespace gsync::client
