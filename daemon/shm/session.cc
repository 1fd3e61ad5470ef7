// SPDX-License-Identifier: Apache-2.0
#include "daemon/shm/session.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "daemon/core/text.h"
#include "daemon/gpu/imported.h"
#include "protocol/device.h"

namespace gsync {

Status Session::create(uint64_t id, uint32_t ring_entries, uint64_t arena_bytes,
                       std::unique_ptr<Session>* out) {
  std::unique_ptr<Session> s(new Session());
  s->id_ = id;
  proto::ShmLayout l = proto::layout_for(ring_entries, ring_entries, arena_bytes);
  std::string name = fmt::format("gsync-session-{}", id);
  s->memfd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s->memfd_ < 0)
    return {GSYNC_ERR_NOMEM, fmt::format("memfd_create for session {}: {}", id, strerror(errno))};
  if (ftruncate(s->memfd_, static_cast<off_t>(l.total_bytes)) != 0)
    return {GSYNC_ERR_NOMEM, fmt::format("sizing the {}-byte shared memory of session {}: {}",
                                         l.total_bytes, id, strerror(errno))};
  // Sealed against shrinking before anyone else sees it: the daemon's mapping
  // can then never SIGBUS because a client truncated the file.
  if (fcntl(s->memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return {GSYNC_ERR_INTERNAL, fmt::format("sealing session {} memfd: {}", id, strerror(errno))};
  void* p = mmap(nullptr, l.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd_, 0);
  if (p == MAP_FAILED)
    return {GSYNC_ERR_NOMEM, fmt::format("mapping session {} ({} bytes): {}", id, l.total_bytes,
                                         strerror(errno))};
  s->base_ = static_cast<uint8_t*>(p);
  s->total_bytes_ = l.total_bytes;
  s->sq_entries_ = s->cq_entries_ = ring_entries;
  s->sq_offset_ = l.sq_offset;
  s->cq_offset_ = l.cq_offset;
  s->arena_offset_ = l.arena_offset;
  s->arena_bytes_ = l.total_bytes - l.arena_offset;

  auto* h = new (s->base_) proto::ShmHeader{};
  h->magic = proto::kShmMagic;
  h->version = proto::kVersion;
  h->total_bytes = l.total_bytes;
  h->session_id = id;
  h->sq_entries = ring_entries;
  h->cq_entries = ring_entries;
  h->sq_offset = l.sq_offset;
  h->cq_offset = l.cq_offset;
  h->arena_offset = l.arena_offset;
  h->arena_bytes = s->arena_bytes_;

  s->sq_efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  s->cq_efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->sq_efd_ < 0 || s->cq_efd_ < 0)
    return {GSYNC_ERR_INTERNAL, fmt::format("eventfd for session {}: {}", id, strerror(errno))};
  s->connected_at = std::chrono::steady_clock::now();
  *out = std::move(s);
  return Status::ok();
}

Session::~Session() {
  if (base_) munmap(base_, total_bytes_);
  for (int fd : {memfd_, sq_efd_, cq_efd_, socket_fd})
    if (fd >= 0) close(fd);
}

void Session::drain_doorbell() {
  // One read resets an eventfd's counter (no EFD_SEMAPHORE): a second would
  // only fail with EAGAIN, a syscall per doorbell for nothing.
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(sq_efd_, &v, sizeof v);
}

bool Session::pop(proto::SubmitEntry* entry, Status* error) {
  uint32_t tail = header()->sq_tail.load(std::memory_order_acquire);
  uint32_t pending = tail - sq_head_;
  if (pending == 0) return false;
  if (pending > sq_entries_) {
    *error = Status(GSYNC_ERR_PROTOCOL,
                    fmt::format("{}: submission ring tail {} is {} entries past head {}, but the "
                                "ring holds {}; ring is corrupt",
                                describe(), tail, pending, sq_head_, sq_entries_));
    return false;
  }
  const auto* ring = reinterpret_cast<const proto::SubmitEntry*>(base_ + sq_offset_);
  std::memcpy(entry, &ring[sq_head_ & (sq_entries_ - 1)], sizeof *entry);
  sq_head_++;
  header()->sq_head.store(sq_head_, std::memory_order_release);
  stats.ops_submitted++;
  return true;
}

Status Session::complete(uint64_t tag, int status, const std::string& message, uint64_t value) {
  auto* h = header();
  uint32_t head = h->cq_head.load(std::memory_order_acquire);
  uint32_t used = cq_tail_ - head;
  if (used >= cq_entries_) {
    return {GSYNC_ERR_PROTOCOL,
            fmt::format("{}: completion ring has no room (tail {}, client head {}, {} entries); "
                        "the client exceeded its in-flight limit or corrupted the ring",
                        describe(), cq_tail_, head, cq_entries_)};
  }
  auto* ring = reinterpret_cast<proto::CompleteEntry*>(base_ + cq_offset_);
  proto::CompleteEntry e{};
  e.tag = tag;
  e.status = status;
  e.value = static_cast<uint32_t>(value);
  // The message may quote a peer's or another client's text: printable,
  // cut to the field at a character boundary, always terminated (e is
  // zeroed).
  if (!message.empty()) {
    std::string text = printable(message, sizeof e.message - 1);
    std::memcpy(e.message, text.data(), text.size());
  }
  std::memcpy(&ring[cq_tail_ & (cq_entries_ - 1)], &e, sizeof e);
  cq_tail_++;
  h->cq_tail.store(cq_tail_, std::memory_order_release);
  if (status == 0)
    stats.ops_completed++;
  else
    stats.ops_failed++;
  // Pairs with the client's fence between raising cq_waiters and re-reading
  // cq_tail: either it sees the new tail or we see it waiting.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->cq_waiters.load(std::memory_order_relaxed) != 0) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(cq_efd_, &one, sizeof one);
  }
  return Status::ok();
}

bool Session::arena_range(uint64_t offset, uint64_t bytes, void** ptr) const {
  if (offset > arena_bytes_ || bytes > arena_bytes_ - offset) return false;
  *ptr = base_ + arena_offset_ + offset;
  return true;
}

Status Session::device_range(uint64_t entry_offset, uint64_t bytes, void** ptr,
                             DeviceSpan* span) const {
  const proto::DeviceOffset d = proto::from_entry_offset(entry_offset);
  auto it = device_memory.find(d.alloc_id);
  if (it == device_memory.end())
    return Status(GSYNC_ERR_INVALID, fmt::format("device allocation {} is not registered (freed, "
                                                 "or not made by gsync_alloc_device)",
                                                 d.alloc_id));
  const gpu::ImportedMemory& m = *it->second;
  if (!proto::in_allocation(entry_offset, bytes, m.bytes()))
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("a tensor at offset {} of {} bytes ends past device allocation {} "
                              "({} bytes)",
                              d.offset, bytes, d.alloc_id, m.bytes()));
  *ptr = static_cast<uint8_t*>(m.get()) + d.offset;
  span->owner = it->second;
  span->device = m.device();
  span->access = m.access();
  return Status::ok();
}

uint64_t Session::device_bytes() const {
  uint64_t n = 0;
  for (const auto& [id, m] : device_memory) n += m->bytes();
  return n;
}

std::string Session::describe() const {
  if (job_id.empty()) return fmt::format("session {} (pid {})", id_, peer.pid);
  if (rank < 0)  // an elastic job's rank before its first world
    return fmt::format("job {} local rank {} (pid {})", job_id, local_rank, peer.pid);
  return fmt::format("job {} rank {} (local {}, pid {})", job_id, rank, local_rank, peer.pid);
}

}  // namespace gsync
