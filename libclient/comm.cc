// SPDX-License-Identifier: Apache-2.0
//
// A session's lifecycle (comm.h): open, the views into the shared memory,
// the daemon's liveness, the end; and the memory a caller allocates through
// it. Submission is in comm_submit.cc, completions and waiting in
// comm_wait.cc.
#include "libclient/comm.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "libclient/cpu_share.h"
#include "libclient/doorbell.h"
#include "libclient/error.h"
#include "libclient/format.h"

namespace gsync::client {
namespace {

using Clock = std::chrono::steady_clock;

// A session looks at its socket for a hangup at most this often on the fast
// path (submit, test, the first look of wait). A daemon that died in between
// is still noticed: the op it never completes fails at the wait, whose
// blocking poll watches the socket too.
constexpr auto kAliveEvery = std::chrono::milliseconds(1);

}  // namespace

int Comm::open(const gsync_config_t* cfg, std::shared_ptr<Comm>* out) {
  ConnectParams params;
  if (int rc = parse_config(cfg, &params); rc != GSYNC_OK) return rc;
  Connection conn;
  if (int rc = connect_session(params, &conn); rc != GSYNC_OK) return rc;
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) {
    return fail(GSYNC_ERR_NOMEM, format("eventfd: %s (job %s rank %d)", std::strerror(errno),
                                        params.job_id.c_str(), params.rank));
  }
  *out = std::make_shared<Comm>(std::move(params), std::move(conn), std::move(wake));
  return GSYNC_OK;
}

Comm::Comm(ConnectParams params, Connection conn, UniqueFd wake)
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

std::string Comm::context() const {
  const int rank = rank_.load(std::memory_order_relaxed);
  if (rank < 0)  // an elastic job's rank before gsync_world told it
    return format("job %s local rank %d", params_.job_id.c_str(), params_.local_rank);
  return format("job %s rank %d", params_.job_id.c_str(), rank);
}

std::string Comm::op_name(const RequestState& st) const {
  if (st.opcode == proto::Opcode::kBarrier) {
    return format("barrier step %llu (tag %llu)", static_cast<unsigned long long>(st.step),
                  static_cast<unsigned long long>(st.tag));
  }
  return format("%s key %llu step %llu (tag %llu)", proto::name(st.opcode),
                static_cast<unsigned long long>(st.key), static_cast<unsigned long long>(st.step),
                static_cast<unsigned long long>(st.tag));
}

int Comm::close() {
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

int Comm::alloc(size_t bytes, void** out) {
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

bool Comm::try_alloc(size_t bytes, void** out) {
  std::lock_guard lk(mu_);
  if (shut_) return false;
  const auto offset = allocator_.allocate(bytes);
  if (!offset) return false;
  user_blocks_.insert(*offset);
  *out = arena_ + *offset;
  return true;
}

void Comm::free_on_completion(RequestState& st, void* ptr) {
  std::lock_guard lk(mu_);
  const uint64_t off = static_cast<uint64_t>(static_cast<char*>(ptr) - arena_);
  if (user_blocks_.erase(off) == 0) return;
  if (st.done) {
    allocator_.release(off);
  } else {
    st.free_on_done.push_back(off);
  }
}

int Comm::free(void* ptr) {
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

int Comm::device_socket() {
  std::lock_guard lk(mu_);
  return shut_ || fds_closed_ ? -1 : conn_.sock.get();
}

int Comm::alloc_device(size_t bytes, void** out) {
  if (out == nullptr) return fail(GSYNC_ERR_INVALID, "gsync_alloc_device: out is NULL");
  std::string why;
  const int rc = device_.alloc(device_socket(), bytes, out, &why);
  if (rc != GSYNC_OK)
    return fail(rc, format("gsync_alloc_device: %s (%s)", why.c_str(), context().c_str()));
  return GSYNC_OK;
}

int Comm::free_device(void* ptr) {
  if (ptr == nullptr) return GSYNC_OK;
  std::string why;
  const int rc = device_.free(device_socket(), ptr, &why);
  if (rc != GSYNC_OK)
    return fail(rc, format("gsync_free_device: %s (%s)", why.c_str(), context().c_str()));
  return GSYNC_OK;
}

int Comm::arena_info(size_t* capacity, size_t* free_bytes) {
  std::lock_guard lk(mu_);
  if (capacity != nullptr) *capacity = allocator_.capacity();
  if (free_bytes != nullptr) *free_bytes = allocator_.free_bytes();
  return GSYNC_OK;
}

int Comm::completion_fd() {
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

void Comm::check_alive_locked(bool force) {
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

void Comm::shut_down_locked(int code, const std::string& why) {
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
    for (uint64_t off : st->free_on_done) allocator_.release(off);
    st->free_on_done.clear();
  }
  table_.clear();
  inflight_ = 0;
  kick_poller_locked();
  cv_.notify_all();
}

}  // namespace gsync::client
