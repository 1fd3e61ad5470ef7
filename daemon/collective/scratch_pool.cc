// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/scratch_pool.h"

#include <sys/mman.h>

#include <algorithm>

#include "protocol/wire.h"

namespace gsync::collective {

namespace {
// Mappings kept for reuse; beyond this they are unmapped when given back.
constexpr size_t kKeep = 8;
}  // namespace

ScratchPool::~ScratchPool() {
  for (auto& s : free_) munmap(s.base, s.bytes);
}

Scratch ScratchPool::take(uint64_t bytes) {
  for (size_t i = 0; i < free_.size(); i++) {
    if (free_[i].bytes >= bytes) {
      Scratch s = free_[i];
      free_.erase(free_.begin() + static_cast<long>(i));
      return s;
    }
  }
  Scratch s;
  s.bytes = proto::align_up(std::max<uint64_t>(bytes, 1), 2 << 20);
  void* p = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return {};
  madvise(p, s.bytes, MADV_HUGEPAGE);
  s.base = static_cast<uint8_t*>(p);
  return s;
}

void ScratchPool::give(Scratch s) {
  if (!s.base) return;
  if (free_.size() < kKeep) {
    free_.push_back(s);
  } else {
    munmap(s.base, s.bytes);
  }
}

}  // namespace gsync::collective
