// SPDX-License-Identifier: Apache-2.0
//
// A session's completions and waiting (comm.h): the completion ring
// drained, a request's result handed to its caller, and the waiting
// protocol (spin, then one poller asleep on the doorbell, the other waiters
// on the condition variable).
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "libclient/comm.h"
#include "libclient/doorbell.h"
#include "libclient/error.h"
#include "libclient/format.h"
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

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

void Comm::drain_locked() {
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

void Comm::complete_locked(uint64_t tag, int32_t status, std::string message,
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
  for (uint64_t off : st->free_on_done) allocator_.release(off);
  st->free_on_done.clear();
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

void Comm::free_staging_locked(RequestState& st) {
  if (!st.staging_held) return;
  allocator_.release(st.staging_offset);
  st.staging_held = false;
  st.copy_out_pending = false;
}

void Comm::kick_poller_locked() {
  if (poller_active_) ring(wake_.get());
}

int Comm::finish(RequestState& st, std::unique_lock<std::mutex>& lk) {
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

int Comm::test(RequestState& st) {
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

int Comm::wait(RequestState& st, int timeout_ms) {
  if (timeout_ms == 0) return test(st);
  std::unique_lock lk(mu_);
  // The op's name is made only for an error: not per wait of a small op.
  const int rc = wait_locked(
      lk, [&] { return st.done; }, timeout_ms, [&] { return op_name(st); });
  if (rc != GSYNC_OK) return rc;
  return finish(st, lk);
}

int Comm::wait_any(const std::vector<RequestState*>& sts, int timeout_ms,
                      const std::function<std::string()>& what) {
  std::unique_lock lk(mu_);
  auto any = [&] {
    for (RequestState* st : sts)
      if (st->done) return true;
    return false;
  };
  if (timeout_ms == 0) {
    if (!any() && !fds_closed_) {
      if (armed_) drain_eventfd(conn_.cq_doorbell.get());
      drain_locked();
      if (!any()) check_alive_locked();
    }
    if (any()) return GSYNC_OK;
    return fail(GSYNC_ERR_AGAIN,
                format("%s is not complete yet (%s)", what().c_str(), context().c_str()));
  }
  return wait_locked(lk, any, timeout_ms, what);
}

int Comm::wait_locked(std::unique_lock<std::mutex>& lk, const std::function<bool()>& done,
                         int timeout_ms, const std::function<std::string()>& what) {
  const auto start = Clock::now();
  // After a block the socket is looked at every time: the block may have
  // ended on its hangup.
  for (bool blocked = false;; blocked = true) {
    if (!done() && !fds_closed_) {
      drain_locked();
      if (!done()) check_alive_locked(blocked);
    }
    if (done()) return GSYNC_OK;
    if (fds_closed_) {  // close() completes everything; never poll closed fds
      return fail(GSYNC_ERR_CLOSED,
                  format("%s: the session is closed (%s)", what().c_str(), context().c_str()));
    }
    int slice = kSliceMs;
    if (timeout_ms > 0) {
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      if (waited >= timeout_ms) {
        return fail(GSYNC_ERR_AGAIN, format("%s is still pending after %d ms (%s)",
                                            what().c_str(), timeout_ms, context().c_str()));
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

void Comm::block_for_completion(int slice_ms) {
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

bool Comm::leased_batch(RequestState& st, uint64_t* batch) {
  std::lock_guard lk(mu_);
  if (!st.done || st.status != GSYNC_OK || st.opcode != proto::Opcode::kLease) return false;
  *batch = st.value;
  return true;
}

int Comm::world(gsync_world_t* out, int timeout_ms) {
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

bool Comm::declared_clock(RequestState& st, uint64_t* clock) {
  std::lock_guard lk(mu_);
  if (!st.done || st.status != GSYNC_OK || st.opcode != proto::Opcode::kPsDeclare) return false;
  *clock = st.value;
  return true;
}

bool Comm::rolled_back(RequestState& st, bool* rolled, const char** why) {
  std::lock_guard lk(mu_);
  if (!st.done || st.status != GSYNC_OK || !proto::is_push(st.opcode)) return false;
  // value 1 and the verdict's text (daemon/ps/guard.cc).
  *rolled = st.value == 1;
  *why = *rolled ? st.text.c_str() : "";
  return true;
}

const char* Comm::request_error(RequestState& st) {
  std::lock_guard lk(mu_);
  return st.done && st.status != GSYNC_OK ? st.error.c_str() : "";
}

void Comm::release(RequestState& st) {
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
