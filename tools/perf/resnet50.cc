// SPDX-License-Identifier: Apache-2.0
#include "tools/perf/resnet50.h"

namespace gsync::perf {

std::vector<size_t> resnet50_tensor_sizes() {
  std::vector<size_t> t;
  auto conv = [&](size_t out, size_t in, size_t k) { t.push_back(out * in * k * k); };
  auto bn = [&](size_t c) {  // weight and bias
    t.push_back(c);
    t.push_back(c);
  };
  conv(64, 3, 7);
  bn(64);
  size_t in = 64;
  const size_t widths[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  for (int layer = 0; layer < 4; layer++) {
    size_t w = widths[layer];
    for (int b = 0; b < blocks[layer]; b++) {
      conv(w, in, 1);
      bn(w);
      conv(w, w, 3);
      bn(w);
      conv(4 * w, w, 1);
      bn(4 * w);
      if (b == 0) {  // downsample path
        conv(4 * w, in, 1);
        bn(4 * w);
      }
      in = 4 * w;
    }
  }
  t.push_back(1000 * 2048);  // fc
  t.push_back(1000);
  return t;
}

std::vector<size_t> ddp_buckets(const std::vector<size_t>& tensors, size_t cap_bytes,
                                size_t elem_bytes) {
  std::vector<size_t> buckets;
  size_t cur = 0;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    if (cur > 0 && (cur + *it) * elem_bytes > cap_bytes) {
      buckets.push_back(cur);
      cur = 0;
    }
    cur += *it;
  }
  if (cur) buckets.push_back(cur);
  return buckets;
}

}  // namespace gsync::perf
