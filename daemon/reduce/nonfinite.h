// SPDX-License-Identifier: Apache-2.0
//
// Which rank's gradient made a guarded allreduce non-finite
// (docs/fault-tolerance.md, "The anomaly guard"), told to every host
// without a message: each host's fold marks a NaN or an Inf of a local
// rank's gradient in its contribution as a quiet NaN whose payload is that
// rank + 1. A NaN added to anything stays that NaN on x86 (a NaN
// operand's payload is kept, quieted; of two NaNs, the first operand's,
// whichever the compiler made first), and on the GPU (gpu/nan_rules.h),
// through the sums and averages of every host, so the reduced result
// every host holds carries a mark of a rank that was non-finite, and the
// guard reads the first of them. An Inf of an overflowing
// sum, or a NaN of Inf - Inf, carries none: no rank's gradient was
// non-finite on its own. The payload has room for ranks below 2^22 in
// float32, 2^9 in float16 and 2^6 in bfloat16 (beyond: unmarked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "daemon/reduce/reduce.h"

namespace gsync::reduce {

// The non-finite elements of [b, e) of a's inputs, as (element, input),
// the first input for an element; in element order. Scanned a block at a
// time, element by element only in a block that has one.
void find_nonfinite(const ReduceArgs& a, size_t b, size_t e,
                    std::vector<std::pair<size_t, size_t>>* hits);
// Marks each hit's element of a's first output with its input's rank.
void mark_nonfinite(const ReduceArgs& a, const std::vector<int>& ranks,
                    const std::vector<std::pair<size_t, size_t>>& hits);
// The rank marked in the first marked NaN of data's n values, or -1.
int64_t marked_rank(const void* data, proto::DType dtype, uint64_t n);
// The same of n fp32 values widened from `from` (to_f32 keeps a NaN's
// payload, shifted up by the mantissa bits fp32 has more: 13 from fp16,
// 16 from bf16).
int64_t marked_rank_widened(const float* data, uint64_t n, proto::DType from);
// What a verdict on a non-finite sum says of its origin, from the rank
// marked_rank found (-1: none): "; the first non-finite value is rank R's",
// or that no rank's gradient was non-finite itself (the sum overflowed).
std::string nonfinite_origin(int64_t rank);

}  // namespace gsync::reduce
