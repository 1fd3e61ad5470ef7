// SPDX-License-Identifier: Apache-2.0
//
// The codec loops on AVX2 (8 fp32 lanes), built with -mavx2 -mfma -mf16c
// -ffp-contract=off in the gsync_reduce_avx2 library. The fp32 vector and
// the fp16 / bf16 conversions are the reduction kernels' (simd_avx2.h), so
// both round alike; the int8 rounding is vcvtps2dq under the default MXCSR
// (nearest-even), as the scalar path's cvtss2si.
#include <cstddef>
#include <cstdint>

#include "daemon/reduce/codec_impl.h"
#include "daemon/reduce/codec_kernels.h"
#include "daemon/reduce/simd_avx2.h"

namespace gsync::reduce::avx2 {
namespace {

struct CodecOps {
  using Vec = __m256;
  using IVec = __m256i;
  static constexpr size_t kLanes = 8;

  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec load_bytes(const uint8_t* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
  static void store_bytes(uint8_t* p, Vec v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
  static Vec set1(float s) { return _mm256_set1_ps(s); }
  static Vec add(Vec a, Vec b) { return F32::add(a, b); }
  static Vec sub(Vec a, Vec b) { return F32::sub(a, b); }
  static Vec mul(Vec a, Vec b) { return F32::mul(a, b); }

  static IVec abs_bits(Vec v) {
    return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff));
  }
  static Vec finite_or_zero(Vec d, Vec x) {
    const IVec finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f800000), abs_bits(d));
    return _mm256_and_ps(_mm256_castsi256_ps(finite), x);
  }
  static IVec izero() { return _mm256_setzero_si256(); }
  static IVec max_bits(IVec a, IVec b) { return _mm256_max_epi32(a, b); }
  static uint32_t hmax_bits(IVec m) {
    const __m128i a = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    const __m128i b = _mm_max_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    const __m128i c = _mm_max_epi32(b, _mm_shuffle_epi32(b, 0xb1));
    return static_cast<uint32_t>(_mm_cvtsi128_si32(c));
  }

  static IVec quantise(Vec t) {
    const Vec c = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_cvtps_epi32(c);
  }
  static Vec to_float(IVec q) { return _mm256_cvtepi32_ps(q); }
  static IVec iadd(IVec a, IVec b) { return _mm256_add_epi32(a, b); }
  static IVec load_i8(const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  // Eight int32 in [-127, 127] to eight bytes: the packs work within each
  // 128-bit half, leaving q0..q3 in the low dword of one half and q4..q7 in
  // the other's.
  static void store_i8(uint8_t* p, IVec q) {
    const __m256i w = _mm256_packs_epi32(q, q);
    const __m256i b = _mm256_packs_epi16(w, w);
    const __m128i lo =
        _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), lo);
  }

  struct F16 {
    static Vec load(const uint8_t* p) {
      return avx2::F16::load(reinterpret_cast<const uint16_t*>(p));
    }
    static void store(uint8_t* p, Vec v) { avx2::F16::store(reinterpret_cast<uint16_t*>(p), v); }
  };
  struct BF16 {
    static Vec load(const uint8_t* p) {
      return avx2::BF16::load(reinterpret_cast<const uint16_t*>(p));
    }
    static void store(uint8_t* p, Vec v) { avx2::BF16::store(reinterpret_cast<uint16_t*>(p), v); }
  };
};

}  // namespace
}  // namespace gsync::reduce::avx2

namespace gsync::reduce::impl {

constinit const CodecKernels codec_kernels_avx2 = detail::Entries<avx2::CodecOps>::table();

}  // namespace gsync::reduce::impl
