// SPDX-License-Identifier: Apache-2.0
//
// The host's NaN bits, written out for the GPU kernels (reduce_kernels.cu).
// The host kernels run on x86, whose SSE/AVX arithmetic gives a NaN result
// the first NaN operand's payload, made quiet, or, when no operand is a NaN
// (Inf - Inf, 0 * Inf), the "default NaN" 0xffc00000. The GPU's arithmetic
// gives its canonical NaN 0x7fffffff instead, and its fp16 conversions may
// too: without these rules a sum on the GPU would lose the payload the
// anomaly guard marks a rank with (reduce/nonfinite.h), and results would
// differ from the host's in their NaNs' bits.
//
// Each function takes the GPU's plain result and mends only a NaN, so the
// finite path costs one compare. The header has no CUDA in it beyond the
// qualifiers: the host's unit tests (tests/unit/test_nan_rules.cc) check
// the same functions against the host kernels.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GSYNC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GSYNC_HOST_DEVICE inline
#endif

namespace gsync::gpu::nan_rules {

GSYNC_HOST_DEVICE uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

GSYNC_HOST_DEVICE float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

GSYNC_HOST_DEVICE bool is_nan(float f) { return (bits_of(f) & 0x7fffffffu) > 0x7f800000u; }

inline constexpr uint32_t kDefaultNaN = 0xffc00000u;  // x86's, for a NaN of no NaN
inline constexpr uint32_t kQuietBit = 0x00400000u;

// r = a op b as the GPU computed it; the result x86 gives.
GSYNC_HOST_DEVICE float arith(float r, float a, float b) {
  if (!is_nan(r)) return r;
  if (is_nan(a)) return float_of(bits_of(a) | kQuietBit);
  if (is_nan(b)) return float_of(bits_of(b) | kQuietBit);
  return float_of(kDefaultNaN);
}

// fp16 to fp32 (exact for numbers): a NaN keeps its sign and payload and
// is made quiet, as vcvtph2ps does.
GSYNC_HOST_DEVICE float f16_nan_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  return float_of(sign | 0x7f800000u | kQuietBit | (static_cast<uint32_t>(h & 0x3ffu) << 13));
}

// fp32 NaN to fp16: sign and the payload's top 10 bits, made quiet, as
// vcvtps2ph does (half.h's f32_to_f16).
GSYNC_HOST_DEVICE uint16_t f32_nan_to_f16(float f) {
  const uint32_t x = bits_of(f);
  return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
}

GSYNC_HOST_DEVICE bool is_f16_nan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

// bf16 is fp32's top half: widening is a shift, NaN or not.
GSYNC_HOST_DEVICE float bf16_to_f32(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

// fp32 NaN to bf16: the top half, made quiet (half.h's f32_to_bf16).
GSYNC_HOST_DEVICE uint16_t f32_nan_to_bf16(float f) {
  return static_cast<uint16_t>((bits_of(f) >> 16) | 0x0040u);
}

}  // namespace gsync::gpu::nan_rules
