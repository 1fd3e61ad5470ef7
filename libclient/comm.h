// SPDX-License-Identifier: Apache-2.0
//
// Comm, the client's side of a session with gsyncd (the daemon's side is
// its Session, daemon/shm/session.h): the submission and completion rings,
// the request table, the arena allocator and the waiting protocol. One
// mutex guards all of it;
// no thread sleeps or copies a tensor while holding it. Waiting threads elect
// one "poller" that blocks on the completion doorbell; the others wait on a
// condition variable and are woken by whoever drains the ring.
//
// The parts: comm.cc (open, the memory, liveness, the end), comm_submit.cc
// (checks, staging, the submission ring), comm_wait.cc (the completion
// ring, test and wait, results).
//
// Lifetime: gsync_comm and every gsync_request hold a shared_ptr. close()
// fails pending requests with GSYNC_ERR_CLOSED and releases the socket and
// doorbells at once; the mapping goes with the last reference.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gsync/gsync.h"
#include "libclient/arena_allocator.h"
#include "protocol/ops.h"
#include "libclient/connect.h"
#include "libclient/device_memory.h"
#include "libclient/request.h"
#include "protocol/wire.h"

namespace gsync::client {

// Key of every barrier: barriers are matched by step alone. Tensor
// operations may not use it.
using proto::kBarrierKey;

struct OpArgs {
  const char* api = "";  // "gsync_allreduce", for error text
  proto::Opcode opcode = proto::Opcode::kAllreduce;
  uint64_t key = 0;
  uint64_t step = 0;
  void* buf = nullptr;
  size_t count = 0;
  int dtype = 0;
  int redop = 0;
  double weight = 0.0;
  int root = 0;
  uint32_t timeout_ms = 0;  // 0: session default
  // An allreduce's compression (checked, defaults filled); nullptr: the
  // job's, where it applies (float32 sum, avg or weighted_avg).
  const proto::Compression* compress = nullptr;
  // Parameter-server ops: a declaration's options (checked), a push's
  // learning rate (0: the declared one).
  const proto::PsOptions* ps = nullptr;
  float lr = 0;
};

class Comm {
 public:
  static int open(const gsync_config_t* cfg, std::shared_ptr<Comm>* out);
  Comm(ConnectParams params, Connection conn, UniqueFd wake);
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int close();

  int alloc(size_t bytes, void** out);
  // alloc without an error: false when the arena has no room.
  bool try_alloc(size_t bytes, void** out);
  int free(void* ptr);
  // A gsync_alloc block the daemon may still be writing for st: freed now
  // if st is done, else when its completion is drained.
  void free_on_completion(RequestState& st, void* ptr);
  int alloc_device(size_t bytes, void** out);
  int free_device(void* ptr);
  int arena_info(size_t* capacity, size_t* free_bytes);
  int completion_fd();

  int submit(const OpArgs& args, std::shared_ptr<RequestState>* out);
  int test(RequestState& st);
  int wait(RequestState& st, int timeout_ms);
  // Waits until one of sts is done (test() or wait() it then); what() names
  // them in the error of a timeout (made only then). timeout_ms as
  // wait()'s, 0 a look.
  int wait_any(const std::vector<RequestState*>& sts, int timeout_ms,
               const std::function<std::string()>& what);
  const char* request_error(RequestState& st);
  // A completed declaration's resume clock; false for any other request.
  bool declared_clock(RequestState& st, uint64_t* clock);
  // A completed lease's batch (or GSYNC_LEASE_WAIT / GSYNC_LEASE_END);
  // false for any other request.
  bool leased_batch(RequestState& st, uint64_t* batch);
  // A completed push or push_pull: whether the anomaly guard rolled its
  // clock back, and why (valid while st is); false for any other request.
  bool rolled_back(RequestState& st, bool* rolled, const char** why);
  void release(RequestState& st);
  // gsync_world: asks the daemon and waits; learns this rank's number.
  int world(gsync_world_t* out, int timeout_ms);

  // "job J rank R", for error text.
  std::string context() const;
  // This rank's number and the job's size (0 and -1 while an elastic job
  // has not been told its world).
  int rank() const { return rank_.load(std::memory_order_relaxed); }
  int world_size() const { return world_size_.load(std::memory_order_relaxed); }
  // Whether this session's allreduces are reproducible unless an op says
  // otherwise (cfg.reproducible, $GSYNC_REPRODUCIBLE).
  bool reproducible() const { return params_.reproducible; }
  // Whether the job's sync mode is bsp (the hello's encoding, protocol/ps.h).
  bool bsp() const { return (params_.sync & 0xff) == 0; }

 private:
  // *device_offset: the entry offset of a buffer in device memory
  // (protocol/device.h), 0 for host memory.
  int validate(const OpArgs& a, bool* zero_copy, uint64_t* bytes, uint64_t* device_offset) const;
  // validate()'s look at where a buffer of count x elem bytes lies (the
  // arena, gsync_alloc_device's memory, other host memory): why it cannot
  // be used there, or "".
  std::string buffer_error(const OpArgs& a, size_t elem, bool* zero_copy, uint64_t* bytes,
                           uint64_t* device_offset) const;
  // The session's socket for a device memory request, or -1 after close.
  int device_socket();
  // What the op's submission carries: its own codec, or the job's where
  // the job's can apply.
  proto::Compression compression_of(const OpArgs& a) const;
  // Reserves the staging block of a tensor outside the arena and fills the
  // request's copy fields; *copy_in: whether its data must go in.
  int stage_locked(const OpArgs& a, uint64_t bytes, RequestState& st, uint64_t* offset,
                   bool* copy_in);
  int publish_locked(const OpArgs& a, const std::shared_ptr<RequestState>& st, uint64_t offset);
  void undo_submit_locked(RequestState& st);

  // Consume every completion the daemon has posted.
  void drain_locked();
  void complete_locked(uint64_t tag, int32_t status, std::string message, uint32_t value = 0);
  // Polls the socket without blocking; a hangup ends the session. At most
  // once per kAliveEvery unless forced: a rank submitting small ops back to
  // back would otherwise pay two syscalls per op for it.
  void check_alive_locked(bool force = false);
  // Ends the session: later submissions fail with `code`, pending requests
  // complete with it.
  void shut_down_locked(int code, const std::string& why);
  void free_staging_locked(RequestState& st);
  // Status of a done request; copies a staged result out first.
  int finish(RequestState& st, std::unique_lock<std::mutex>& lk);
  // wait()'s loop: until done() or timeout_ms (< 0: forever), as the
  // poller or beside it.
  int wait_locked(std::unique_lock<std::mutex>& lk, const std::function<bool()>& done,
                  int timeout_ms, const std::function<std::string()>& what);
  // The poller's blocking step: spin, then sleep on the doorbell.
  void block_for_completion(int slice_ms);
  void kick_poller_locked();

  std::string op_name(const RequestState& st) const;

  const ConnectParams params_;
  // This rank's number: the hello's, or (an elastic job) the last world's;
  // -1 before an elastic job's first gsync_world.
  std::atomic<int> rank_{-1};
  std::atomic<int> world_size_{0};  // likewise: 0 before the first
  Connection conn_;
  UniqueFd wake_;  // private eventfd to interrupt the poller

  // Views into conn_.shm, from the validated geometry.
  proto::ShmHeader* header_;
  proto::SubmitEntry* sq_;
  proto::CompleteEntry* cq_;
  char* arena_;
  uint64_t arena_bytes_;
  uint32_t sq_mask_;
  uint32_t cq_mask_;
  uint32_t max_inflight_;
  std::chrono::steady_clock::time_point alive_checked_{};

  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t sq_tail_;  // local copies of the indices this client owns
  uint32_t cq_head_;
  uint64_t next_tag_ = 1;
  uint32_t inflight_ = 0;  // submitted, completion not yet consumed
  std::unordered_map<uint64_t, std::shared_ptr<RequestState>> table_;
  ArenaAllocator allocator_;
  std::unordered_set<uint64_t> user_blocks_;  // offsets from gsync_alloc
  DeviceMemory device_;  // gsync_alloc_device's allocations (their own lock)
  // Spin before sleeping on the doorbell: not when this rank and its daemon
  // may only run on the same one CPU (cpu_share.h). Decided at connect.
  bool spin_ = true;
  bool poller_active_ = false;
  bool armed_ = false;       // gsync_completion_fd registered a waiter for good
  bool shut_ = false;        // no new operations; closed_code_ says why
  bool fds_closed_ = false;  // gsync_close released the socket and doorbells
  int closed_code_ = GSYNC_OK;
  std::string closed_why_;
};

}  // namespace gsync::client

// The opaque C handle.
struct gsync_comm {
  std::shared_ptr<gsync::client::Comm> impl;
};
