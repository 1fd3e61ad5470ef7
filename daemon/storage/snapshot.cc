// SPDX-License-Identifier: Apache-2.0
#include "daemon/storage/snapshot.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace gsync::storage {

Snapshot::Snapshot(std::vector<const float*> sources, size_t n)
    : src_(std::move(sources)), n_(n), blocks_((n + kBlock - 1) / kBlock) {
  bytes_ = uint64_t(n_) * sizeof(float) * src_.size();
  mapped_ = (kPayloadOffset + bytes_ + kFileAlign - 1) / kFileAlign * kFileAlign;
  // A mapping, not the heap: hundreds of MiB that go back to the kernel
  // when the checkpoint is written, zeroed, and page-aligned.
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) buf_ = static_cast<uint8_t*>(p);
  state_ = std::make_unique<std::atomic<uint8_t>[]>(std::max<size_t>(blocks_, 1));
  for (size_t b = 0; b < blocks_; b++) state_[b].store(0, std::memory_order_relaxed);
}

Snapshot::~Snapshot() {
  if (buf_) munmap(buf_, mapped_);
}

bool Snapshot::claim(size_t b) {
  uint8_t free_state = 0;
  return state_[b].compare_exchange_strong(free_state, 1, std::memory_order_acq_rel);
}

void Snapshot::copy_block(size_t b) {
  const size_t at = b * kBlock, len = std::min(kBlock, n_ - at);
  for (size_t i = 0; i < src_.size(); i++)
    std::memcpy(buf_ + kPayloadOffset + (i * n_ + at) * sizeof(float), src_[i] + at,
                len * sizeof(float));
  state_[b].store(2, std::memory_order_release);
  copied_.fetch_add(1, std::memory_order_acq_rel);
}

void Snapshot::wait_copied(size_t b) const {
  while (state_[b].load(std::memory_order_acquire) != 2) std::this_thread::yield();
}

void Snapshot::before_write(size_t begin, size_t end) {
  if (!buf_ || complete() || begin >= end) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t last = std::min(blocks_, (end + kBlock - 1) / kBlock);
  for (size_t b = begin / kBlock; b < last; b++) {
    if (claim(b)) {
      copy_block(b);
      inline_blocks_++;
    } else {
      wait_copied(b);
    }
  }
  inline_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Snapshot::copy_rest() {
  if (!buf_) return;
  for (size_t b = 0; b < blocks_; b++)
    if (claim(b)) copy_block(b);
  for (size_t b = 0; b < blocks_; b++) wait_copied(b);
}

}  // namespace gsync::storage
