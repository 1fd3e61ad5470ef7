// SPDX-License-Identifier: Apache-2.0
#include "daemon/ps/shards.h"

#include <algorithm>

namespace gsync::ps {

std::vector<Shard> place(uint64_t count, size_t hosts) {
  std::vector<Shard> out(std::max<size_t>(hosts, 1));
  uint64_t units = (count + kAlign - 1) / kAlign, n = out.size();
  for (uint64_t p = 0; p < n; p++) {
    // Units split as evenly as they go; the last range ends at count.
    out[p].begin = std::min(count, units * p / n * kAlign);
    out[p].end = std::min(count, units * (p + 1) / n * kAlign);
  }
  return out;
}

}  // namespace gsync::ps
