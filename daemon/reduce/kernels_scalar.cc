// SPDX-License-Identifier: Apache-2.0
//
// Portable kernels: compiled with no -m flags so they run on any x86-64 (GCC
// still auto-vectorises the fp32/fp64/int32 loops with SSE2, which x86-64
// always has). They define the semantics the vector paths must match bit for
// bit.
#include <emmintrin.h>

#include <cstdint>
#include <cstring>

#include "daemon/reduce/kernels_impl.h"
#include "daemon/reduce/reduce.h"
#include "daemon/reduce/simd_scalar.h"

namespace gsync::reduce::scalar {
namespace {

struct F64 : FloatMath<double> {
  using Elem = double;
  static Vec load(const Elem* p) { return *p; }
  static void store(Elem* p, Vec v) { *p = v; }
};

struct I32 {
  using Elem = int32_t;
  using Scalar = int32_t;
  using Vec = int32_t;
  static constexpr size_t kLanes = 1;
  static Vec load(const Elem* p) { return *p; }
  static void store(Elem* p, Vec v) { *p = v; }
  static Vec load_acc(const Scalar* p) { return *p; }
  static void store_acc(Scalar* p, Vec v) { *p = v; }
  static Vec set1(Scalar s) { return s; }
  // Wrapping add: signed overflow is undefined in C++, unsigned is not.
  static Vec add(Vec a, Vec b) {
    return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
  }
  static Vec min(Vec acc, Vec x) { return x < acc ? x : acc; }
  static Vec max(Vec acc, Vec x) { return x > acc ? x : acc; }
  static Vec divide(Vec acc, size_t n) {
    return static_cast<int32_t>(static_cast<int64_t>(acc) / static_cast<int64_t>(n));
  }
};

// Bytes (a reproducible allreduce's exponents): sum wraps mod 256, min and
// max unsigned. proto::defined() refuses avg and weighted avg on them, so
// divide() is never called; it exists for the templates.
struct U8 {
  using Elem = uint8_t;
  using Scalar = uint8_t;
  using Vec = uint8_t;
  static constexpr size_t kLanes = 1;
  static Vec load(const Elem* p) { return *p; }
  static void store(Elem* p, Vec v) { *p = v; }
  static Vec load_acc(const Scalar* p) { return *p; }
  static void store_acc(Scalar* p, Vec v) { *p = v; }
  static Vec set1(Scalar s) { return s; }
  static Vec add(Vec a, Vec b) { return static_cast<uint8_t>(a + b); }
  static Vec min(Vec acc, Vec x) { return x < acc ? x : acc; }
  static Vec max(Vec acc, Vec x) { return x > acc ? x : acc; }
  static Vec divide(Vec acc, size_t) { return acc; }
};

struct Target {
  using F32 = scalar::F32;
  using F16 = scalar::F16;
  using BF16 = scalar::BF16;
  using F64 = scalar::F64;
  using I32 = scalar::I32;
  using U8 = scalar::U8;
  // SSE2 is part of x86-64, so even this path can stream its stores (16-byte
  // aligned); the unaligned head and the tail go through memcpy.
  static void copy(void* dst, const void* src, size_t bytes, bool stream) {
    if (!stream) {
      std::memcpy(dst, src, bytes);
      return;
    }
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    size_t head = (0 - reinterpret_cast<uintptr_t>(d)) & 15;
    if (head > bytes) head = bytes;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    for (; bytes >= 16; bytes -= 16, d += 16, s += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    }
    std::memcpy(d, s, bytes);
  }
  // Streaming stores are weakly ordered: fence them before the caller
  // publishes the result to another thread or a peer.
  static void fence() { _mm_sfence(); }
};

}  // namespace
}  // namespace gsync::reduce::scalar

namespace gsync::reduce::impl {

void reduce_range_scalar(const ReduceArgs& args, size_t begin, size_t end) {
  detail::reduce_range_impl<scalar::Target>(args, begin, end);
}

}  // namespace gsync::reduce::impl
