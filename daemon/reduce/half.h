// SPDX-License-Identifier: Apache-2.0
//
// Portable fp16 / bf16 <-> fp32 conversions for the scalar kernels. They give
// the same bits as the vector paths (F16C vcvtph2ps / vcvtps2ph with
// round-to-nearest-even, and the integer bf16 rounding in kernels_avx*.cc):
// exact IEEE round-to-nearest-even, overflow to infinity, subnormals kept, and
// a NaN stays a NaN (made quiet, sign and top payload bits kept).
//
// Only the scalar translation units include this file (through
// simd_scalar.h: kernels_scalar.cc, codec_scalar.cc), all compiled without -m
// flags; an ISA translation unit including it would emit its own copies of
// these inline functions, and the linker could then hand an AVX-512 copy to
// the scalar path.
#pragma once

#include <bit>
#include <cstdint>

namespace gsync::reduce::half {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) {
    // Inf, or NaN made quiet the way vcvtph2ps does.
    const uint32_t quiet = man != 0 ? 0x00400000u : 0;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (man << 13));
  }
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24 is exact in fp32 (and a normal fp32).
    const float mag = static_cast<float>(man) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(mag));
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  }
  // 65520 = 65504 + half an ulp: it and everything above round to infinity
  // (65504 has an odd mantissa, so the tie goes up).
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {
    // Normal fp16 (>= 2^-14): rebias the exponent, then round the 13 dropped
    // bits to nearest-even; a carry out of the mantissa bumps the exponent,
    // which is the correct encoding of the rounded value.
    uint32_t m = ax - (112u << 23);
    m += 0xfffu + ((m >> 13) & 1u);
    return static_cast<uint16_t>(sign | (m >> 13));
  }
  // Below 2^-25 everything rounds to zero (2^-25 itself ties to even: zero).
  if (ax <= 0x33000000u) return sign;
  // Subnormal fp16: the result counts units of 2^-24. The fp32 value is
  // mant * 2^(e - 150), so the quotient is mant >> (126 - e), shift in 14..24.
  const uint32_t e = ax >> 23;
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(sign | q);  // q may reach 0x400: the smallest normal
}

inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  // Round to nearest-even on the 16 dropped bits; finite values past the
  // largest bf16 carry into the exponent and become infinity.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace gsync::reduce::half
