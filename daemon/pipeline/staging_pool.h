// SPDX-License-Identifier: Apache-2.0
//
// Pinned host memory for ops over device memory (docs/gpu.md): the wire's
// staging across hosts, and the stand-ins of the path through host memory.
// One buffer is kept per (job, tensor key, slot) and leased to the op that
// uses it, so a plan's registered data region stays where it is step after
// step (its idle plan holds a reference too: the lease is tracked, not read
// off the reference count). A second op of the tensor in flight at once
// gets a buffer of its own; a new size replaces the kept one.
//
// New memory is made off the event thread (cudaHostAlloc of a large
// buffer takes tens of milliseconds, and the first one on a GPU makes the
// runtime's context): on the daemon's GPU worker, the answer back on the
// event thread, while the op waits (Pipeline: its "staging"). A kept
// buffer is leased at once. Event thread only; no CUDA in this header.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "daemon/core/status.h"
#include "daemon/pipeline/op.h"

namespace gsync {
class Worker;
}

namespace gsync::pipeline {

class StagingPool {
 public:
  // The slot of the wire's staging; a stand-in's is its local rank.
  static constexpr int kWireSlot = -1;
  // Makes `bytes` of pinned memory as a host Buffer that owns it (ptr,
  // bytes, owner); may take long. Runs on the worker's thread.
  using Allocate = std::function<Status(uint64_t bytes, Buffer* out)>;
  // A new buffer (or why there is none), on the event thread.
  using Leased = std::function<void(const Status&, Buffer)>;

  // Pinned memory (gpu::PinnedBuffer), made and freed inline until
  // make_on().
  StagingPool();
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // New memory is made, and pinned memory freed, on worker's thread (its
  // done_fd watched by the event loop; it outlives every buffer); null:
  // inline.
  void make_on(Worker* worker) { worker_ = worker; }
  // New memory is made by allocate (tests: host memory; what it throws
  // is an error status).
  void make_with(Allocate allocate) { allocate_ = std::move(allocate); }

  // The kept buffer of (job, key, slot) when it is free and `bytes` long:
  // leased, as a host Buffer that owns it (its arena left for the caller).
  bool lease_kept(const std::string& job, uint64_t key, int slot, uint64_t bytes, Buffer* out);
  // Otherwise a new one: done gets it on the event thread (inline without
  // a worker; never once the pool is gone), leased. It becomes the kept
  // buffer unless the kept one is leased meanwhile or the job has closed;
  // whoever takes it releases it as any other. Pinned memory is made with
  // `device` current (a GPU of the op's): the daemon makes no context on a
  // GPU it has no buffer on (GPU 0's, the runtime's default).
  void lease_new(const std::string& job, uint64_t key, int slot, uint64_t bytes, int device,
                 Leased done);
  // The op that leased b is over: the kept buffer (if b is it) may serve
  // the next one.
  void release(const std::string& job, uint64_t key, int slot, const Buffer& b);
  void job_closed(const std::string& job);

  // Buffers being made now (tests).
  size_t making() const { return making_; }
  // Pinned bytes alive: every buffer this pool made that someone (the
  // pool, an op, a plan) still holds, whichever thread frees it.
  uint64_t pinned_bytes() const { return pinned_->load(std::memory_order_relaxed); }
  // What the pool keeps for the job's next steps (gsyncctl jobs).
  uint64_t kept_bytes(const std::string& job) const;

 private:
  struct Key {
    std::string job;
    uint64_t key = 0;
    int slot = 0;
    auto operator<=>(const Key&) const = default;
  };
  struct Kept {
    Buffer buf;           // ptr null: none kept yet
    bool leased = false;
    uint64_t generation;  // a new entry's: what is made for a closed job's is not kept
  };
  Kept& entry(const Key& k);
  void made(const Key& k, uint64_t generation, const Status& st, Buffer b, const Leased& done);

  Allocate allocate_;  // null: pinned memory
  Worker* worker_ = nullptr;
  std::map<Key, Kept> kept_;
  uint64_t next_generation_ = 1;
  size_t making_ = 0;
  // Shared with every buffer's owner, which may go after the pool.
  std::shared_ptr<std::atomic<uint64_t>> pinned_ = std::make_shared<std::atomic<uint64_t>>(0);
  // Answers from the worker hold it weakly: one that comes after the pool
  // (and the pipeline) is gone is dropped.
  std::shared_ptr<StagingPool*> self_;
};

}  // namespace gsync::pipeline
