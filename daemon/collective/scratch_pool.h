// SPDX-License-Identifier: Apache-2.0
//
// Scratch memory for the rendezvous schedules: the slots peers' partial sums
// land in before they are folded. Anonymous mappings (THP where the kernel
// gives it), kept and handed out again: prepare once, run many. Mappings,
// not malloc, because the verbs provider's registration cache must see
// every unmap (transport/verbs/buffer.h). Event thread only.
#pragma once

#include <cstdint>
#include <vector>

namespace gsync::collective {

struct Scratch {
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
};

class ScratchPool {
 public:
  ScratchPool() = default;
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  // At least bytes; {nullptr, 0} when the memory is not to be had.
  Scratch take(uint64_t bytes);
  void give(Scratch s);

 private:
  std::vector<Scratch> free_;
};

}  // namespace gsync::collective
