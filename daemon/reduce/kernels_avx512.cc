// SPDX-License-Identifier: Apache-2.0
//
// AVX-512 kernels (16 fp32 lanes in zmm registers), built with -mavx512f
// -mavx512bw -mavx512vl -mavx512dq -mf16c -mfma -ffp-contract=off. The fp32
// vector and the fp16 / bf16 conversions are simd_avx512.h's, shared with
// the codecs.
#include <cstdint>

#include "daemon/reduce/kernels_impl.h"
#include "daemon/reduce/reduce.h"
#include "daemon/reduce/simd_avx512.h"

namespace gsync::reduce::avx512 {
namespace {

struct F64 {
  using Elem = double;
  using Scalar = double;
  using Vec = __m512d;
  static constexpr size_t kLanes = 8;
  static Vec load(const Elem* p) { return _mm512_loadu_pd(p); }
  static void store(Elem* p, Vec v) { _mm512_storeu_pd(p, v); }
  static Vec load_acc(const Scalar* p) { return _mm512_load_pd(p); }
  static void store_acc(Scalar* p, Vec v) { _mm512_store_pd(p, v); }
  static Vec set1(Scalar s) { return _mm512_set1_pd(s); }
  static Vec add(Vec a, Vec b) { return _mm512_add_pd(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_pd(a, b); }
  static Vec min(Vec acc, Vec x) {
    return _mm512_mask_mov_pd(_mm512_min_pd(x, acc), _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), x);
  }
  static Vec max(Vec acc, Vec x) {
    return _mm512_mask_mov_pd(_mm512_max_pd(x, acc), _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), x);
  }
  static Vec divide(Vec acc, size_t n) {
    return _mm512_div_pd(acc, _mm512_set1_pd(static_cast<double>(n)));
  }
};

struct I32 {
  using Elem = int32_t;
  using Scalar = int32_t;
  using Vec = __m512i;
  static constexpr size_t kLanes = 16;
  static Vec load(const Elem* p) { return _mm512_loadu_si512(p); }
  static void store(Elem* p, Vec v) { _mm512_storeu_si512(p, v); }
  static Vec load_acc(const Scalar* p) { return _mm512_load_si512(p); }
  static void store_acc(Scalar* p, Vec v) { _mm512_store_si512(p, v); }
  static Vec set1(Scalar s) { return _mm512_set1_epi32(s); }
  static Vec add(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
  static Vec min(Vec acc, Vec x) { return _mm512_min_epi32(acc, x); }
  static Vec max(Vec acc, Vec x) { return _mm512_max_epi32(acc, x); }
  // There is no vector integer division. For |a| < 2^31 the double quotient
  // a / n is within 2^-22 / n of the exact one, less than its distance 1/n to
  // the next integer, so truncating it gives exactly a / n in C semantics.
  static Vec divide(Vec acc, size_t n) {
    const __m512d d = _mm512_set1_pd(static_cast<double>(n));
    const __m256i lo =
        _mm512_cvttpd_epi32(_mm512_div_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(acc)), d));
    const __m256i hi = _mm512_cvttpd_epi32(
        _mm512_div_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc, 1)), d));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
};

// Bytes (a reproducible allreduce's exponents): sum wraps mod 256, min and
// max unsigned. proto::defined() refuses avg and weighted avg on them, so
// divide() is never called; it exists for the templates.
struct U8 {
  using Elem = uint8_t;
  using Scalar = uint8_t;
  using Vec = __m512i;
  static constexpr size_t kLanes = 64;
  static Vec load(const Elem* p) { return _mm512_loadu_si512(p); }
  static void store(Elem* p, Vec v) { _mm512_storeu_si512(p, v); }
  static Vec load_acc(const Scalar* p) { return _mm512_load_si512(p); }
  static void store_acc(Scalar* p, Vec v) { _mm512_store_si512(p, v); }
  static Vec set1(Scalar s) { return _mm512_set1_epi8(static_cast<char>(s)); }
  static Vec add(Vec a, Vec b) { return _mm512_add_epi8(a, b); }
  static Vec min(Vec acc, Vec x) { return _mm512_min_epu8(acc, x); }
  static Vec max(Vec acc, Vec x) { return _mm512_max_epu8(acc, x); }
  static Vec divide(Vec acc, size_t) { return acc; }
};

struct Target {
  using F32 = avx512::F32;
  using F16 = avx512::F16;
  using BF16 = avx512::BF16;
  using F64 = avx512::F64;
  using I32 = avx512::I32;
  using U8 = avx512::U8;

  // Copies one block of results to one output. Streaming stores need 64-byte
  // aligned addresses; the unaligned head and the tail use byte-masked stores
  // (the source is the stack block, so the masked load cannot fault).
  static void copy(void* dst, const void* src, size_t bytes, bool stream) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    if (stream) {
      size_t head = (0 - reinterpret_cast<uintptr_t>(d)) & 63;
      if (head > bytes) head = bytes;
      copy_partial(d, s, head);
      d += head;
      s += head;
      bytes -= head;
      for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(s));
      }
    } else {
      for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        _mm512_storeu_si512(d, _mm512_loadu_si512(s));
      }
    }
    copy_partial(d, s, bytes);
  }
  // Streaming stores are weakly ordered: fence them before the caller
  // publishes the result to another thread or a peer.
  static void fence() { _mm_sfence(); }

 private:
  static void copy_partial(char* d, const char* s, size_t bytes) {  // bytes < 64
    if (bytes == 0) return;
    const __mmask64 m = (uint64_t{1} << bytes) - 1;
    _mm512_mask_storeu_epi8(d, m, _mm512_maskz_loadu_epi8(m, s));
  }
};

}  // namespace
}  // namespace gsync::reduce::avx512

namespace gsync::reduce::impl {

void reduce_range_avx512(const ReduceArgs& args, size_t begin, size_t end) {
  detail::reduce_range_impl<avx512::Target>(args, begin, end);
}

}  // namespace gsync::reduce::impl
