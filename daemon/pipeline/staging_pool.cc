// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/staging_pool.h"

#include <climits>
#include <exception>
#include <iterator>
#include <string>

#include "daemon/core/worker.h"
#include "daemon/gpu/device.h"

namespace gsync::pipeline {

namespace {

// cudaHostAlloc'd memory, freed (cudaFreeHost waits for the device) on
// worker's thread when there is one: never on the event thread.
Status pinned(int device, uint64_t bytes, Buffer* out, Worker* worker) {
  std::unique_ptr<gpu::PinnedBuffer> made;
  if (Status st = gpu::PinnedBuffer::allocate(device, bytes, &made); !st) return st;
  out->ptr = static_cast<uint8_t*>(made->get());
  out->bytes = bytes;
  out->owner = std::shared_ptr<const void>(made.release(), [worker](gpu::PinnedBuffer* b) {
    if (worker == nullptr) {
      delete b;
      return;
    }
    worker->later([b] { delete b; });
  });
  return Status::ok();
}

}  // namespace

StagingPool::StagingPool() : self_(std::make_shared<StagingPool*>(this)) {}
StagingPool::~StagingPool() = default;

StagingPool::Kept& StagingPool::entry(const Key& k) {
  auto [it, fresh] = kept_.try_emplace(k, Kept{Buffer{}, false, 0});
  if (fresh) it->second.generation = next_generation_++;
  return it->second;
}

bool StagingPool::lease_kept(const std::string& job, uint64_t key, int slot, uint64_t bytes,
                             Buffer* out) {
  auto it = kept_.find(Key{job, key, slot});
  if (it == kept_.end()) return false;
  Kept& kept = it->second;
  if (kept.buf.ptr == nullptr || kept.leased || kept.buf.bytes != bytes) return false;
  kept.leased = true;
  *out = kept.buf;
  return true;
}

void StagingPool::lease_new(const std::string& job, uint64_t key, int slot, uint64_t bytes,
                            int device, Leased done) {
  Key k{job, key, slot};
  const uint64_t generation = entry(k).generation;
  making_++;
  auto result = std::make_shared<std::pair<Status, Buffer>>();
  result->first = Status(GSYNC_ERR_INTERNAL, "pinned memory: not made");
  std::weak_ptr<StagingPool*> self = self_;
  auto work = [allocate = allocate_, worker = worker_, device, bytes, result, self] {
    // A pool gone meanwhile (the daemon stopping) takes nothing: none made.
    if (self.expired()) return;
    try {
      result->first = allocate ? allocate(bytes, &result->second)
                               : pinned(device, bytes, &result->second, worker);
    } catch (const std::exception& e) {
      result->first = Status(GSYNC_ERR_INTERNAL, std::string("pinned memory: ") + e.what());
    } catch (...) {
      result->first = Status(GSYNC_ERR_INTERNAL, "pinned memory: the allocator threw");
    }
  };
  auto answer = [self, k = std::move(k), generation, result, done = std::move(done)] {
    if (auto pool = self.lock())
      (*pool)->made(k, generation, result->first, std::move(result->second), done);
  };
  if (worker_ == nullptr) {
    work();
    answer();
  } else {
    worker_->then(std::move(work), std::move(answer));
  }
}

void StagingPool::made(const Key& k, uint64_t generation, const Status& st, Buffer b,
                       const Leased& done) {
  making_--;
  if (st) {
    b.kind = MemoryKind::kHost;
    b.arena = 0;
    // Counted while anyone holds it: the count goes down with the last
    // owner, before the memory itself is freed.
    pinned_->fetch_add(b.bytes, std::memory_order_relaxed);
    b.owner = std::shared_ptr<const void>(
        b.ptr, [inner = std::move(b.owner), pinned = pinned_, bytes = b.bytes](const void*) mutable {
          pinned->fetch_sub(bytes, std::memory_order_relaxed);
          inner.reset();
        });
    auto it = kept_.find(k);
    if (it != kept_.end() && it->second.generation == generation && !it->second.leased) {
      it->second.buf = b;
      it->second.leased = true;
    }
  }
  done(st, std::move(b));
}

void StagingPool::release(const std::string& job, uint64_t key, int slot, const Buffer& b) {
  auto it = kept_.find(Key{job, key, slot});
  if (it != kept_.end() && it->second.buf.ptr != nullptr && it->second.buf.ptr == b.ptr)
    it->second.leased = false;
}

uint64_t StagingPool::kept_bytes(const std::string& job) const {
  uint64_t sum = 0;
  for (auto it = kept_.lower_bound(Key{job, 0, INT_MIN}); it != kept_.end() && it->first.job == job;
       ++it)
    sum += it->second.buf.bytes;
  return sum;
}

void StagingPool::job_closed(const std::string& job) {
  for (auto it = kept_.begin(); it != kept_.end();)
    it = it->first.job == job ? kept_.erase(it) : std::next(it);
}

}  // namespace gsync::pipeline
