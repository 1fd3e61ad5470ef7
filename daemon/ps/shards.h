// SPDX-License-Identifier: Apache-2.0
//
// Where a parameter's values live (docs/parameter-server.md, "Placement"):
// every tensor is cut into as many contiguous ranges as its job has hosts,
// equal to within kAlign elements, and the p-th range is served by the
// job's p-th host in cluster order. Each host then serves 1/N of every
// tensor's bytes (BytePS's co-located servers), so a worker sends S and
// receives S per step, as in a ring allreduce; the map follows from the
// job's hosts and the tensor's size alone, so every host computes the same
// one without a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gsync::ps {

// Range boundaries fall on multiples of this many elements (64 bytes of
// fp32): the optimizer's loops start aligned.
constexpr uint64_t kAlign = 16;

struct Shard {
  uint64_t begin = 0, end = 0;  // elements
  uint64_t count() const { return end - begin; }
};

// The ranges of `hosts` hosts over `count` elements; some are empty when
// the tensor has fewer than hosts x kAlign elements.
std::vector<Shard> place(uint64_t count, size_t hosts);

}  // namespace gsync::ps
