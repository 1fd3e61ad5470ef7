// SPDX-License-Identifier: Apache-2.0
//
// The portable codec loops: one lane, built without -m flags in the
// gsync_reduce_scalar library (GCC may still vectorise them with SSE2).
// They define what the vector paths match bit for bit: fp16 / bf16 through
// half.h (simd_scalar.h), int8 rounding nearest-even in plain fp32
// arithmetic, as vcvtps2dq does on the vector paths under the default MXCSR.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "daemon/reduce/codec_impl.h"
#include "daemon/reduce/codec_kernels.h"
#include "daemon/reduce/simd_scalar.h"

namespace gsync::reduce::scalar {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

struct CodecOps {
  using Vec = float;
  using IVec = int32_t;
  static constexpr size_t kLanes = 1;

  static Vec load(const float* p) { return *p; }
  static void store(float* p, Vec v) { *p = v; }
  static Vec load_bytes(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
  }
  static void store_bytes(uint8_t* p, Vec v) { std::memcpy(p, &v, sizeof v); }
  static Vec set1(float s) { return s; }
  static Vec add(Vec a, Vec b) { return F32::add(a, b); }
  static Vec sub(Vec a, Vec b) { return F32::sub(a, b); }
  static Vec mul(Vec a, Vec b) { return F32::mul(a, b); }

  static IVec abs_bits(Vec v) { return static_cast<int32_t>(bits_of(v) & 0x7fffffffu); }
  static Vec finite_or_zero(Vec d, Vec x) {
    return (bits_of(d) & 0x7fffffffu) < 0x7f800000u ? x : 0.0f;
  }
  static IVec izero() { return 0; }
  static IVec max_bits(IVec a, IVec b) { return a > b ? a : b; }
  static uint32_t hmax_bits(IVec m) { return static_cast<uint32_t>(m); }

  // The comparisons clamp like vmaxps / vminps do for a number t (t is never
  // NaN: the caller quantises finite values only).
  static IVec quantise(Vec t) {
    const float c = t < -127.0f ? -127.0f : (t > 127.0f ? 127.0f : t);
    // 1.5 * 2^23 + c, for |c| <= 127, rounds c to an integer nearest-even
    // (the sum's ulp is 1); subtracting it back is exact. The same as
    // cvtss2si under the default MXCSR, but plain fp32 arithmetic that GCC
    // can vectorise: 3x faster in cache than a cvtss2si per value.
    return static_cast<int32_t>((c + 0x1.8p23f) - 0x1.8p23f);
  }
  static Vec to_float(IVec q) { return static_cast<float>(q); }
  static IVec iadd(IVec a, IVec b) { return a + b; }
  static IVec load_i8(const uint8_t* p) { return static_cast<int8_t>(*p); }
  static void store_i8(uint8_t* p, IVec q) { *p = static_cast<uint8_t>(static_cast<int8_t>(q)); }

  // A 16-bit format read from and written to unaligned wire bytes, through
  // its conversion in simd_scalar.h (H: scalar::F16 or scalar::BF16).
  template <class H>
  struct Bytes16 {
    static Vec load(const uint8_t* p) {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return H::load(&h);
    }
    static void store(uint8_t* p, Vec v) {
      uint16_t h;
      H::store(&h, v);
      std::memcpy(p, &h, sizeof h);
    }
  };
  using F16 = Bytes16<scalar::F16>;
  using BF16 = Bytes16<scalar::BF16>;
};

}  // namespace
}  // namespace gsync::reduce::scalar

namespace gsync::reduce::impl {

constinit const CodecKernels codec_kernels_scalar = detail::Entries<scalar::CodecOps>::table();

}  // namespace gsync::reduce::impl
