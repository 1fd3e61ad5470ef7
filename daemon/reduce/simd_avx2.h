// SPDX-License-Identifier: Apache-2.0
//
// The AVX2 fp32 vector and its fp16 / bf16 conversions (8 lanes), shared by
// the reduction kernels (kernels_avx2.cc) and the codecs (codec_avx2.cc).
// Include it only from translation units built with -mavx2 -mfma -mf16c
// (the gsync_reduce_avx2 library). Everything is in an anonymous namespace,
// so each TU has its own copies and the linker never merges them with
// another ISA's (docs/reduce.md, "ISA dispatch").
//
// fp16 goes through F16C (vcvtph2ps / vcvtps2ph with round-to-nearest-even),
// bf16 through integer shifts, so both match the scalar conversions in
// half.h bit for bit.
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

namespace gsync::reduce::avx2 {
namespace {

struct F32Math {
  using Scalar = float;
  using Vec = __m256;
  static constexpr size_t kLanes = 8;
  static Vec load_acc(const Scalar* p) { return _mm256_load_ps(p); }
  static void store_acc(Scalar* p, Vec v) { _mm256_store_ps(p, v); }
  static Vec set1(Scalar s) { return _mm256_set1_ps(s); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  // vminps(x, acc) = x < acc ? x : acc, which keeps acc on ties and when acc
  // is NaN; a NaN x is blended back in so that NaN always wins.
  static Vec min(Vec acc, Vec x) {
    return _mm256_blendv_ps(_mm256_min_ps(x, acc), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static Vec max(Vec acc, Vec x) {
    return _mm256_blendv_ps(_mm256_max_ps(x, acc), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static Vec divide(Vec acc, size_t n) {
    return _mm256_div_ps(acc, _mm256_set1_ps(static_cast<float>(n)));
  }
};

struct F32 : F32Math {
  using Elem = float;
  static Vec load(const Elem* p) { return _mm256_loadu_ps(p); }
  static void store(Elem* p, Vec v) { _mm256_storeu_ps(p, v); }
};

struct F16 : F32Math {
  using Elem = uint16_t;
  static Vec load(const Elem* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(Elem* p, Vec v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

struct BF16 : F32Math {
  using Elem = uint16_t;
  static Vec load(const Elem* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  // Round to nearest-even: add 0x7fff plus the lowest kept bit, keep the top
  // half. NaNs would carry into the sign, so they take (x >> 16) | 0x40
  // instead (quiet, sign kept). vcvtneps2bf16 is not used: it flushes
  // subnormals, which the scalar path does not.
  static void store(Elem* p, Vec v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // Every lane is <= 0xffff, so the saturating pack is a plain narrowing.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
};

}  // namespace
}  // namespace gsync::reduce::avx2
