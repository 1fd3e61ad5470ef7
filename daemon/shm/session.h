// SPDX-License-Identifier: Apache-2.0
//
// One client's session: the sealed memfd that holds its rings and tensor
// arena, its doorbells, and the daemon's private copies of everything the
// daemon must not re-read from shared memory (sizes, its own ring indices).
// The client can write anything into the mapping at any time; every value
// read from it is checked before use.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "daemon/core/status.h"
#include "protocol/wire.h"

namespace gsync::gpu {
class ImportedMemory;
}

namespace gsync {

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// A submitted tensor's device memory (protocol/device.h): the mapping it is
// in (held by the op), its GPU, and the GPUs whose kernels may reach it
// (bit d: GPU d).
struct DeviceSpan {
  std::shared_ptr<const void> owner;  // null: host memory
  int device = -1;
  uint64_t access = 0;
};

struct SessionStats {
  uint64_t ops_submitted = 0;
  uint64_t ops_completed = 0;
  uint64_t ops_failed = 0;
  uint64_t bytes = 0;
};

class Session {
 public:
  // Creates, sizes, seals and maps the memfd and the two eventfds.
  static Status create(uint64_t id, uint32_t ring_entries, uint64_t arena_bytes,
                       std::unique_ptr<Session>* out);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Next submission, copied out of shared memory. Returns false when the ring
  // is empty. A corrupt tail index (more entries than the ring holds) sets
  // *error and the session must be closed: nothing in the ring is trustworthy.
  bool pop(proto::SubmitEntry* entry, Status* error);
  // Publishes a completion. Fails only when the client broke the protocol
  // (completion ring full or its head index corrupt).
  Status complete(uint64_t tag, int status, const std::string& message, uint64_t value = 0);

  // Arena bounds check for a tensor of bytes at offset. On success *ptr is the
  // daemon's address of it.
  bool arena_range(uint64_t offset, uint64_t bytes, void** ptr) const;
  // The same for a tensor in the client's device memory (entry_offset as
  // protocol/device.h packs it): *ptr the daemon's device address, *span
  // its mapping and GPUs; else an error naming the allocation.
  Status device_range(uint64_t entry_offset, uint64_t bytes, void** ptr, DeviceSpan* span) const;
  // What device_memory maps, in bytes (gsyncctl clients, the metrics).
  uint64_t device_bytes() const;

  uint64_t id() const { return id_; }
  int memfd() const { return memfd_; }
  int sq_doorbell() const { return sq_efd_; }
  int cq_doorbell() const { return cq_efd_; }
  uint64_t shm_bytes() const { return total_bytes_; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  void drain_doorbell();
  // The client has published submissions not yet popped.
  bool has_submissions() const {
    return header()->sq_tail.load(std::memory_order_relaxed) != sq_head_;
  }
  // Tells the client whether the daemon is looking at the ring by itself, so
  // that it may skip the doorbell (proto::ShmHeader::sq_polled). The caller
  // fences before it looks at the rings after clearing it.
  void set_polled(bool on) { header()->sq_polled.store(on ? 1 : 0, std::memory_order_relaxed); }

  // Identity, filled in by the listener after the handshake.
  int socket_fd = -1;
  Peer peer;
  std::string job_id;
  int rank = -1;
  int local_rank = -1;
  int world_size = 0;
  int local_size = 0;
  uint32_t sync = 0;  // the job's sync mode as the hello gave it (checked at join)
  uint32_t guard = 0;  // the job's anomaly guard as the hello gave it (checked at join)
  uint32_t plan = 0;   // the job's algorithm and chunk size, the same way
  int min_hosts = 0, max_hosts = 0;  // an elastic job's bounds (checked at join)
  uint32_t timeout_ms = 0;
  std::chrono::steady_clock::time_point connected_at;
  SessionStats stats;
  bool closed = false;
  // Device memory the client shared (protocol/device.h), by allocation id
  // (device_requests.h); ops over it hold their own references.
  std::map<uint64_t, std::shared_ptr<const gpu::ImportedMemory>> device_memory;
  // A device memory request is being answered (a registration imported off
  // the event thread); while it is, the socket is read for hangup only
  // (device_reading_paused) and later requests wait.
  bool device_request_busy = false;
  bool device_reading_paused = false;

  // "job train-1 rank 2 (local 2, pid 1234)" for error messages.
  std::string describe() const;

 private:
  Session() = default;
  uint64_t id_ = 0;
  int memfd_ = -1, sq_efd_ = -1, cq_efd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t total_bytes_ = 0;
  uint32_t sq_entries_ = 0, cq_entries_ = 0;
  uint64_t sq_offset_ = 0, cq_offset_ = 0, arena_offset_ = 0, arena_bytes_ = 0;
  uint32_t sq_head_ = 0;  // private: the daemon's consumer index
  uint32_t cq_tail_ = 0;  // private: the daemon's producer index
  proto::ShmHeader* header() const { return reinterpret_cast<proto::ShmHeader*>(base_); }
};

}  // namespace gsync
