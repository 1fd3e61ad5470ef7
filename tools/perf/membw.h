// SPDX-License-Identifier: Apache-2.0
//
// The memory reference every gsync-perf run prints beside its own figures:
// single-thread memcpy and fp32 a += b on buffers of the largest size, so a
// noisy shared machine cannot flatter or hide the daemon's numbers.
#pragma once

#include <cstddef>

namespace gsync::perf {

struct MemoryReference {
  double memcpy_gbps = 0;  // bytes copied x 2 (read + write) per second
  double add_gbps = 0;     // 3 x bytes (two reads, one write) per second
};

// Median of passes over two buffers of bytes each (touched before timing).
MemoryReference measure_memory(size_t bytes, int passes);

}  // namespace gsync::perf
