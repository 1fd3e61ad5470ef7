// SPDX-License-Identifier: Apache-2.0
//
// The codec loops on AVX-512 (16 fp32 lanes in zmm registers), built with
// the gsync_reduce_avx512 library's flags and -ffp-contract=off. The fp32
// vector and the fp16 / bf16 conversions are the reduction kernels'
// (simd_avx512.h), so both round alike; the int8 rounding is vcvtps2dq
// under the default MXCSR (nearest-even), as the scalar path's cvtss2si.
#include <cstddef>
#include <cstdint>

#include "daemon/reduce/codec_impl.h"
#include "daemon/reduce/codec_kernels.h"
#include "daemon/reduce/simd_avx512.h"

namespace gsync::reduce::avx512 {
namespace {

struct CodecOps {
  using Vec = __m512;
  using IVec = __m512i;
  static constexpr size_t kLanes = 16;

  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec load_bytes(const uint8_t* p) { return _mm512_loadu_ps(p); }
  static void store_bytes(uint8_t* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec set1(float s) { return _mm512_set1_ps(s); }
  static Vec add(Vec a, Vec b) { return F32::add(a, b); }
  static Vec sub(Vec a, Vec b) { return F32::sub(a, b); }
  static Vec mul(Vec a, Vec b) { return F32::mul(a, b); }

  static IVec abs_bits(Vec v) {
    return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  }
  static Vec finite_or_zero(Vec d, Vec x) {
    const __mmask16 finite = _mm512_cmplt_epi32_mask(abs_bits(d), _mm512_set1_epi32(0x7f800000));
    return _mm512_maskz_mov_ps(finite, x);
  }
  static IVec izero() { return _mm512_setzero_si512(); }
  static IVec max_bits(IVec a, IVec b) { return _mm512_max_epi32(a, b); }
  static uint32_t hmax_bits(IVec m) { return static_cast<uint32_t>(_mm512_reduce_max_epi32(m)); }

  static IVec quantise(Vec t) {
    const Vec c = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    return _mm512_cvtps_epi32(c);
  }
  static Vec to_float(IVec q) { return _mm512_cvtepi32_ps(q); }
  static IVec iadd(IVec a, IVec b) { return _mm512_add_epi32(a, b); }
  static IVec load_i8(const uint8_t* p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // vpmovsdb: sixteen int32 (already in [-127, 127]) to sixteen bytes.
  static void store_i8(uint8_t* p, IVec q) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(q));
  }

  struct F16 {
    static Vec load(const uint8_t* p) {
      return avx512::F16::load(reinterpret_cast<const uint16_t*>(p));
    }
    static void store(uint8_t* p, Vec v) { avx512::F16::store(reinterpret_cast<uint16_t*>(p), v); }
  };
  struct BF16 {
    static Vec load(const uint8_t* p) {
      return avx512::BF16::load(reinterpret_cast<const uint16_t*>(p));
    }
    static void store(uint8_t* p, Vec v) { avx512::BF16::store(reinterpret_cast<uint16_t*>(p), v); }
  };
};

}  // namespace
}  // namespace gsync::reduce::avx512

namespace gsync::reduce::impl {

constinit const CodecKernels codec_kernels_avx512 = detail::Entries<avx512::CodecOps>::table();

}  // namespace gsync::reduce::impl
