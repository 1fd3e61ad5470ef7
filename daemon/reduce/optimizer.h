// SPDX-License-Identifier: Apache-2.0
//
// The parameter server's arithmetic on one shard (daemon/ps/,
// docs/parameter-server.md, "The optimizers"): a worker's gradient in its
// dtype into fp32, the sum of several in a fixed order, one optimizer step
// on the fp32 master values, and the values back into the workers' dtype.
// Element-wise loops the compiler vectorizes (-O3, no FMA contraction), so
// every element gets exactly the fp32 operations the comments give, in that
// order: a reference written the same way gets the same bits
// (tests/integration/test_ps.cc checks it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/ops.h"

namespace gsync::reduce {

// dst[i] = float(src[i]) for fp32, fp16 and bf16 sources.
void to_f32(const void* src, proto::DType dtype, size_t n, float* dst);
// dst[i] = src[i] in dtype (round to nearest even for fp16 and bf16).
void from_f32(const float* src, size_t n, proto::DType dtype, void* dst);
// acc[i] += float(src[i]).
void add_f32(const void* src, proto::DType dtype, size_t n, float* acc);

struct SgdArgs {
  float lr = 0, momentum = 0, weight_decay = 0;
  bool first = false;  // the first step: the momentum buffer starts as d
};
// d = g + wd * p; m = first ? d : momentum * m + d (when momentum != 0,
// else m is unused and d stays d); p = p - lr * d, with g = grad * scale.
void sgd_step(float* p, float* m, const float* grad, float scale, size_t n, const SgdArgs& a);

struct AdamArgs {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  bool decoupled = false;  // AdamW: p *= 1 - lr * wd first; Adam: g += wd * p
  uint64_t t = 1;          // this step's number, from 1
};
// PyTorch's Adam/AdamW: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
// p = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
void adam_step(float* p, float* m, float* v, const float* grad, float scale, size_t n,
               const AdamArgs& a);

}  // namespace gsync::reduce
