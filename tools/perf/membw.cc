// SPDX-License-Identifier: Apache-2.0
#include "tools/perf/membw.h"
#include "tools/perf/perf.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace gsync::perf {

namespace {

// Cloned per ISA and picked at load time, so the reference loop is as wide
// as the daemon's kernels on this CPU and the ratio compares like with like.
__attribute__((target_clones("avx512f", "avx2", "default"), noinline)) void add_into(
    float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) a[i] += b[i];
}

}  // namespace

MemoryReference measure_memory(size_t bytes, int passes) {
  size_t n = bytes / sizeof(float);
  std::unique_ptr<float[]> a(new float[n]), b(new float[n]);
  for (size_t i = 0; i < n; i++) {  // first touch outside the timing
    a[i] = 1.0f;
    b[i] = 0.5f;
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> copy, add;
  for (int p = 0; p <= passes; p++) {
    auto t0 = Clock::now();
    std::memcpy(a.get(), b.get(), n * sizeof(float));
    auto t1 = Clock::now();
    add_into(a.get(), b.get(), n);
    auto t2 = Clock::now();
    if (p == 0) continue;  // warm-up pass
    copy.push_back(std::chrono::duration<double>(t1 - t0).count());
    add.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  MemoryReference r;
  r.memcpy_gbps = 2.0 * double(n * sizeof(float)) / median(copy) / 1e9;
  r.add_gbps = 3.0 * double(n * sizeof(float)) / median(add) / 1e9;
  return r;
}

}  // namespace gsync::perf
