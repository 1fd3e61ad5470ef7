// SPDX-License-Identifier: Apache-2.0
//
// AVX2 kernels (8 fp32 lanes), built with -mavx2 -mfma -mf16c
// -ffp-contract=off. The fp32 vector and the fp16 / bf16 conversions are
// simd_avx2.h's, shared with the codecs.
#include <cstdint>
#include <cstring>

#include "daemon/reduce/kernels_impl.h"
#include "daemon/reduce/reduce.h"
#include "daemon/reduce/simd_avx2.h"

namespace gsync::reduce::avx2 {
namespace {

struct F64 {
  using Elem = double;
  using Scalar = double;
  using Vec = __m256d;
  static constexpr size_t kLanes = 4;
  static Vec load(const Elem* p) { return _mm256_loadu_pd(p); }
  static void store(Elem* p, Vec v) { _mm256_storeu_pd(p, v); }
  static Vec load_acc(const Scalar* p) { return _mm256_load_pd(p); }
  static void store_acc(Scalar* p, Vec v) { _mm256_store_pd(p, v); }
  static Vec set1(Scalar s) { return _mm256_set1_pd(s); }
  static Vec add(Vec a, Vec b) { return _mm256_add_pd(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_pd(a, b); }
  static Vec min(Vec acc, Vec x) {
    return _mm256_blendv_pd(_mm256_min_pd(x, acc), x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
  }
  static Vec max(Vec acc, Vec x) {
    return _mm256_blendv_pd(_mm256_max_pd(x, acc), x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
  }
  static Vec divide(Vec acc, size_t n) {
    return _mm256_div_pd(acc, _mm256_set1_pd(static_cast<double>(n)));
  }
};

struct I32 {
  using Elem = int32_t;
  using Scalar = int32_t;
  using Vec = __m256i;
  static constexpr size_t kLanes = 8;
  static Vec load(const Elem* p) { return _mm256_loadu_si256(reinterpret_cast<const Vec*>(p)); }
  static void store(Elem* p, Vec v) { _mm256_storeu_si256(reinterpret_cast<Vec*>(p), v); }
  static Vec load_acc(const Scalar* p) {
    return _mm256_load_si256(reinterpret_cast<const Vec*>(p));
  }
  static void store_acc(Scalar* p, Vec v) { _mm256_store_si256(reinterpret_cast<Vec*>(p), v); }
  static Vec set1(Scalar s) { return _mm256_set1_epi32(s); }
  static Vec add(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
  static Vec min(Vec acc, Vec x) { return _mm256_min_epi32(acc, x); }
  static Vec max(Vec acc, Vec x) { return _mm256_max_epi32(acc, x); }
  // There is no vector integer division. For |a| < 2^31 the double quotient
  // a / n is within 2^-22 / n of the exact one, less than its distance 1/n to
  // the next integer, so truncating it gives exactly a / n in C semantics.
  static Vec divide(Vec acc, size_t n) {
    const __m256d d = _mm256_set1_pd(static_cast<double>(n));
    const __m128i lo =
        _mm256_cvttpd_epi32(_mm256_div_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(acc)), d));
    const __m128i hi =
        _mm256_cvttpd_epi32(_mm256_div_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(acc, 1)), d));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  }
};

// Bytes (a reproducible allreduce's exponents): sum wraps mod 256, min and
// max unsigned. proto::defined() refuses avg and weighted avg on them, so
// divide() is never called; it exists for the templates.
struct U8 {
  using Elem = uint8_t;
  using Scalar = uint8_t;
  using Vec = __m256i;
  static constexpr size_t kLanes = 32;
  static Vec load(const Elem* p) { return _mm256_loadu_si256(reinterpret_cast<const Vec*>(p)); }
  static void store(Elem* p, Vec v) { _mm256_storeu_si256(reinterpret_cast<Vec*>(p), v); }
  static Vec load_acc(const Scalar* p) {
    return _mm256_load_si256(reinterpret_cast<const Vec*>(p));
  }
  static void store_acc(Scalar* p, Vec v) { _mm256_store_si256(reinterpret_cast<Vec*>(p), v); }
  static Vec set1(Scalar s) { return _mm256_set1_epi8(static_cast<char>(s)); }
  static Vec add(Vec a, Vec b) { return _mm256_add_epi8(a, b); }
  static Vec min(Vec acc, Vec x) { return _mm256_min_epu8(acc, x); }
  static Vec max(Vec acc, Vec x) { return _mm256_max_epu8(acc, x); }
  static Vec divide(Vec acc, size_t) { return acc; }
};

struct Target {
  using F32 = avx2::F32;
  using F16 = avx2::F16;
  using BF16 = avx2::BF16;
  using F64 = avx2::F64;
  using I32 = avx2::I32;
  using U8 = avx2::U8;

  // Copies one block of results to one output. Streaming stores need 32-byte
  // aligned addresses, so the unaligned head and the tail go through memcpy.
  static void copy(void* dst, const void* src, size_t bytes, bool stream) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    if (stream) {
      size_t head = (0 - reinterpret_cast<uintptr_t>(d)) & 31;
      if (head > bytes) head = bytes;
      std::memcpy(d, s, head);
      d += head;
      s += head;
      bytes -= head;
      for (; bytes >= 32; bytes -= 32, d += 32, s += 32) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
      }
    } else {
      for (; bytes >= 32; bytes -= 32, d += 32, s += 32) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
      }
    }
    std::memcpy(d, s, bytes);
  }
  // Streaming stores are weakly ordered: fence them before the caller
  // publishes the result to another thread or a peer.
  static void fence() { _mm_sfence(); }
};

}  // namespace
}  // namespace gsync::reduce::avx2

namespace gsync::reduce::impl {

void reduce_range_avx2(const ReduceArgs& args, size_t begin, size_t end) {
  detail::reduce_range_impl<avx2::Target>(args, begin, end);
}

}  // namespace gsync::reduce::impl
