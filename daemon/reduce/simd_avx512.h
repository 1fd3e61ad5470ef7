// SPDX-License-Identifier: Apache-2.0
//
// The AVX-512 fp32 vector and its fp16 / bf16 conversions (16 lanes in zmm
// registers), shared by the reduction kernels (kernels_avx512.cc) and the
// codecs (codec_avx512.cc). Include it only from translation units built
// with the gsync_reduce_avx512 library's flags. Everything is in an
// anonymous namespace, so each TU has its own copies and the linker never
// merges them with another ISA's (docs/reduce.md, "ISA dispatch").
//
// fp16 goes through vcvtph2ps / vcvtps2ph with round-to-nearest-even, bf16
// through integer shifts, so both match the scalar conversions in half.h bit
// for bit. avx512_bf16's vcvtneps2bf16 is not used: it flushes subnormals to
// zero.
#pragma once

// GCC 12.2 warns that the _mm*_undefined_*() inside the intrinsics "may be
// used uninitialized" wherever they are inlined (GCC PR 105593, fixed in
// 12.3); the location it checks is the header's, so silence it there only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstddef>
#include <cstdint>

namespace gsync::reduce::avx512 {
namespace {

struct F32Math {
  using Scalar = float;
  using Vec = __m512;
  static constexpr size_t kLanes = 16;
  static Vec load_acc(const Scalar* p) { return _mm512_load_ps(p); }
  static void store_acc(Scalar* p, Vec v) { _mm512_store_ps(p, v); }
  static Vec set1(Scalar s) { return _mm512_set1_ps(s); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  // vminps(x, acc) = x < acc ? x : acc, which keeps acc on ties and when acc
  // is NaN; a NaN x is merged back in so that NaN always wins.
  static Vec min(Vec acc, Vec x) {
    return _mm512_mask_mov_ps(_mm512_min_ps(x, acc), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  }
  static Vec max(Vec acc, Vec x) {
    return _mm512_mask_mov_ps(_mm512_max_ps(x, acc), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  }
  static Vec divide(Vec acc, size_t n) {
    return _mm512_div_ps(acc, _mm512_set1_ps(static_cast<float>(n)));
  }
};

struct F32 : F32Math {
  using Elem = float;
  static Vec load(const Elem* p) { return _mm512_loadu_ps(p); }
  static void store(Elem* p, Vec v) { _mm512_storeu_ps(p, v); }
};

struct F16 : F32Math {
  using Elem = uint16_t;
  static Vec load(const Elem* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(Elem* p, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

struct BF16 : F32Math {
  using Elem = uint16_t;
  static Vec load(const Elem* p) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  // Round to nearest-even: add 0x7fff plus the lowest kept bit, keep the top
  // half. NaNs would carry into the sign, so they take (x >> 16) | 0x40
  // instead (quiet, sign kept).
  static void store(Elem* p, Vec v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i hi = _mm512_srli_epi32(x, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    const __m512i r = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
};

}  // namespace
}  // namespace gsync::reduce::avx512
