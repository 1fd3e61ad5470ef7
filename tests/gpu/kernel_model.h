// SPDX-License-Identifier: Apache-2.0
//
// A model of the GPU reduce kernel's fold (daemon/gpu/reduce_kernels.cu)
// on the host: the launch the daemon plans, the GPU's plain arithmetic
// (IEEE results, its canonical NaN for any NaN), the NaN rules
// (nan_rules.h) mending them. tests/unit/test_nan_rules.cc holds it to the
// host kernels; tests/gpu/test_gpu_reduce.cc holds the kernel to it.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "daemon/gpu/launch.h"
#include "daemon/gpu/nan_rules.h"
#include "daemon/reduce/half.h"
#include "daemon/reduce/reduce.h"

namespace gsync::gpu::kernel_model {

namespace nr = nan_rules;
using reduce::DType;
using reduce::Op;

inline constexpr uint32_t kGpuNaN = 0x7fffffffu;  // what the GPU's arithmetic gives

// The GPU's plain arithmetic: IEEE results, any NaN the canonical one.
inline float gpu(float r) { return nr::is_nan(r) ? nr::float_of(kGpuNaN) : r; }
inline float add(float a, float b) { return nr::arith(gpu(a + b), a, b); }
inline float mul(float a, float b) { return nr::arith(gpu(a * b), a, b); }
inline float div(float a, float b) { return nr::arith(gpu(a / b), a, b); }

inline float load(DType t, const uint8_t* p) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (t == DType::kBF16) return nr::bf16_to_f32(h);
  return nr::is_f16_nan(h) ? nr::f16_nan_to_f32(h) : reduce::half::f16_to_f32(h);
}

inline void store(DType t, float v, uint8_t* p) {
  if (t == DType::kF32) {
    std::memcpy(p, &v, 4);
    return;
  }
  uint16_t h;
  if (t == DType::kBF16)
    h = nr::is_nan(v) ? nr::f32_nan_to_bf16(v) : reduce::half::f32_to_bf16(v);
  else
    h = nr::is_nan(v) ? nr::f32_nan_to_f16(v) : reduce::half::f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// reduce_kernels.cu's fold of element i, on the host.
inline void model_fold(const Launch& k, Op op, DType t, size_t i, size_t es, uint8_t* out) {
  auto in = [&](int r) { return load(t, static_cast<const uint8_t*>(k.in[r]) + i * es); };
  float acc = op == Op::kWeightedAvg ? mul(in(0), k.w[0]) : in(0);
  for (int r = 1; r < k.n_in; r++) {
    const float x = in(r);
    if (op == Op::kSum || op == Op::kAvg)
      acc = add(acc, x);
    else if (op == Op::kWeightedAvg)
      acc = add(acc, mul(x, k.w[r]));
    else if (op == Op::kMin)
      acc = x != x ? x : (x < acc ? x : acc);
    else
      acc = x != x ? x : (x > acc ? x : acc);
  }
  if (op == Op::kAvg) acc = div(acc, k.divisor);
  if (k.scaled) acc = mul(acc, k.scale);
  store(t, acc, out + i * es);
}

// Values of dtype t as raw bits: NaNs of every kind, infinities, numbers.
inline std::vector<uint32_t> specials(DType t) {
  if (t == DType::kF32)
    return {0x7fc00000u, 0x7fc00003u /* rank 2's mark */, 0xffc01234u, 0x7f800001u /* signalling */,
            0xff812345u, 0x7f800000u, 0xff800000u, 0x3f800000u, 0xc0200000u, 0x00000000u};
  if (t == DType::kF16)
    return {0x7e00u, 0x7e03u, 0xfe15u, 0x7c01u /* signalling */, 0xfd23u, 0x7c00u, 0xfc00u,
            0x3c00u, 0xc100u, 0x0000u};
  return {0x7fc0u, 0x7fc3u, 0xffd2u, 0x7f81u /* signalling */, 0xff85u, 0x7f80u, 0xff80u,
          0x3f80u, 0xc020u, 0x0000u};
}

// n_in inputs whose elements are every combination of t's specials:
// input r's element j is specials[(j / size^r) % size].
inline std::vector<std::vector<uint8_t>> combinations(DType t, size_t n_in) {
  const std::vector<uint32_t> v = specials(t);
  const size_t es = reduce::dtype_size(t);
  size_t count = 1;
  for (size_t r = 0; r < n_in; r++) count *= v.size();
  std::vector<std::vector<uint8_t>> ins(n_in, std::vector<uint8_t>(count * es));
  for (size_t j = 0; j < count; j++) {
    size_t c = j;
    for (size_t r = 0; r < n_in; r++, c /= v.size())
      std::memcpy(&ins[r][j * es], &v[c % v.size()], es);
  }
  return ins;
}

}  // namespace gsync::gpu::kernel_model
