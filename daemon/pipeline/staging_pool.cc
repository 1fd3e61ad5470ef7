// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/staging_pool.h"

#include <iterator>

#include "daemon/gpu/device.h"

namespace gsync::pipeline {

StagingPool::StagingPool() = default;
StagingPool::~StagingPool() = default;

Status StagingPool::lease(const std::string& job, uint64_t key, int slot, uint64_t bytes,
                          Buffer* out) {
  Kept& kept = kept_[Key{job, key, slot}];
  std::shared_ptr<gpu::PinnedBuffer> use;
  if (kept.buf && !kept.leased && kept.buf->bytes() == bytes) {
    use = kept.buf;
    kept.leased = true;
  } else {
    std::unique_ptr<gpu::PinnedBuffer> made;
    if (Status st = gpu::PinnedBuffer::allocate(bytes, &made); !st) return st;
    use = std::move(made);
    if (!kept.leased) {
      kept.buf = use;
      kept.leased = true;
    }
  }
  out->kind = MemoryKind::kHost;
  out->ptr = static_cast<uint8_t*>(use->get());
  out->bytes = bytes;
  out->owner = std::move(use);
  return Status::ok();
}

void StagingPool::release(const std::string& job, uint64_t key, int slot, const Buffer& b) {
  auto it = kept_.find(Key{job, key, slot});
  if (it != kept_.end() && it->second.buf && it->second.buf->get() == b.ptr)
    it->second.leased = false;
}

void StagingPool::job_closed(const std::string& job) {
  for (auto it = kept_.begin(); it != kept_.end();)
    it = it->first.job == job ? kept_.erase(it) : std::next(it);
}

}  // namespace gsync::pipeline
