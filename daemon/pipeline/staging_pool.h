// SPDX-License-Identifier: Apache-2.0
//
// Pinned host memory for ops over device memory (docs/gpu.md): the wire's
// staging across hosts, and the stand-ins of the path through host memory.
// One buffer is kept per (job, tensor key, slot) and leased to the op that
// uses it, so a plan's registered data region stays where it is step after
// step (its idle plan holds a reference too: the lease is tracked, not read
// off the reference count). A second op of the tensor in flight at once
// gets a buffer of its own; a new size replaces the kept one. Event thread
// only; no CUDA in this header.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "daemon/core/status.h"
#include "daemon/pipeline/op.h"

namespace gsync::gpu {
class PinnedBuffer;
}

namespace gsync::pipeline {

class StagingPool {
 public:
  // The slot of the wire's staging; a stand-in's is its local rank.
  static constexpr int kWireSlot = -1;

  StagingPool();
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // bytes of pinned memory for (job, key, slot), as a host Buffer that
  // owns it (its arena left for the caller).
  Status lease(const std::string& job, uint64_t key, int slot, uint64_t bytes, Buffer* out);
  // The op that leased b is over: the kept buffer (if b is it) may serve
  // the next one.
  void release(const std::string& job, uint64_t key, int slot, const Buffer& b);
  void job_closed(const std::string& job);

 private:
  struct Key {
    std::string job;
    uint64_t key = 0;
    int slot = 0;
    auto operator<=>(const Key&) const = default;
  };
  struct Kept {
    std::shared_ptr<gpu::PinnedBuffer> buf;
    bool leased = false;
  };
  std::map<Key, Kept> kept_;
};

}  // namespace gsync::pipeline
