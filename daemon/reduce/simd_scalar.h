// SPDX-License-Identifier: Apache-2.0
//
// The portable "vector" of one lane and its fp16 / bf16 conversions
// (half.h), shared by the scalar reduction kernels (kernels_scalar.cc) and
// the scalar codecs (codec_scalar.cc). They define the semantics the vector
// paths (simd_avx2.h, simd_avx512.h) match bit for bit. Include it only from
// translation units built without -m flags (the gsync_reduce_scalar
// library); everything is in an anonymous namespace, so no copy is ever
// shared with another ISA's TU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "daemon/reduce/half.h"

namespace gsync::reduce::scalar {
namespace {

template <class S>
struct FloatMath {
  using Scalar = S;
  using Vec = S;
  static constexpr size_t kLanes = 1;
  static Vec load_acc(const Scalar* p) { return *p; }
  static void store_acc(Scalar* p, Vec v) { *p = v; }
  static Vec set1(Scalar s) { return s; }
  static Vec add(Vec a, Vec b) { return a + b; }
  static Vec sub(Vec a, Vec b) { return a - b; }
  static Vec mul(Vec a, Vec b) { return a * b; }
  // x != x is the NaN test; the comparison keeps acc on ties, and on a NaN
  // acc (x < NaN is false), which is what vminps(x, acc) does.
  static Vec min(Vec acc, Vec x) { return x != x ? x : (x < acc ? x : acc); }
  static Vec max(Vec acc, Vec x) { return x != x ? x : (x > acc ? x : acc); }
  static Vec divide(Vec acc, size_t n) { return acc / static_cast<Scalar>(n); }
};

struct F32 : FloatMath<float> {
  using Elem = float;
  static Vec load(const Elem* p) { return *p; }
  static void store(Elem* p, Vec v) { *p = v; }
};

struct F16 : FloatMath<float> {
  using Elem = uint16_t;
  static Vec load(const Elem* p) { return half::f16_to_f32(*p); }
  static void store(Elem* p, Vec v) { *p = half::f32_to_f16(v); }
};

struct BF16 : FloatMath<float> {
  using Elem = uint16_t;
  static Vec load(const Elem* p) { return half::bf16_to_f32(*p); }
  static void store(Elem* p, Vec v) { *p = half::f32_to_bf16(v); }
};

}  // namespace
}  // namespace gsync::reduce::scalar
