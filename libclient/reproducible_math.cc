// SPDX-License-Identifier: Apache-2.0
#include "libclient/reproducible_math.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace gsync::client::repro {
namespace {

using proto::DType;
using proto::RedOp;

// 2^e as a double, for e well inside double's normal range (here -190 ..
// 190): built from its bits, so the loops below stay plain arithmetic.
inline double pow2(int e) { return std::bit_cast<double>(static_cast<uint64_t>(1023 + e) << 52); }

// Round half to even for |y| < 2^51 in the default rounding mode: adding
// 1.5 * 2^52 leaves no fraction bits, and the addition rounds as IEEE
// says. (std::nearbyint would be a call per element at -O2.) Where double
// arithmetic is wider than double (x87, FLT_EVAL_METHOD != 0) the sum
// would keep the fraction, so there it is nearbyint.
inline double round_even(double y) {
#if defined(__FLT_EVAL_METHOD__) && __FLT_EVAL_METHOD__ != 0
  return std::nearbyint(y);
#else
  constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  return (y + kMagic) - kMagic;
#endif
}

inline float load(const void* buf, size_t i, DType t) {
  switch (t) {
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const uint16_t*>(buf) + i, 2);
      return static_cast<float>(std::bit_cast<_Float16>(h));
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const uint16_t*>(buf) + i, 2);
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
    default: {
      float f;
      std::memcpy(&f, static_cast<const float*>(buf) + i, 4);
      return f;
    }
  }
}

inline uint16_t to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // stays a quiet NaN
  u += 0x7fff + ((u >> 16) & 1);  // nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

inline void store(void* buf, size_t i, DType t, double v) {
  const float f = static_cast<float>(v);
  switch (t) {
    case DType::kF16: {
      const uint16_t h = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
      std::memcpy(static_cast<uint16_t*>(buf) + i, &h, 2);
      break;
    }
    case DType::kBF16: {
      const uint16_t h = to_bf16(f);
      std::memcpy(static_cast<uint16_t*>(buf) + i, &h, 2);
      break;
    }
    default:
      std::memcpy(static_cast<float*>(buf) + i, &f, 4);
      break;
  }
}

// What a non-finite contribution counts as (see the header).
inline int32_t kind_count(float x) {
  if (std::isnan(x)) return 1;
  if (std::isinf(x)) return x > 0 ? 1 << 10 : 1 << 20;
  return 0;
}

inline double decode(int32_t s, uint8_t code, int p) {
  if (code == kNonFinite) {
    const int nans = s & 1023, pos = (s >> 10) & 1023, neg = (s >> 20) & 1023;
    if (nans > 0 || (pos > 0 && neg > 0)) return std::numeric_limits<double>::quiet_NaN();
    return pos > 0 ? std::numeric_limits<double>::infinity()
                   : -std::numeric_limits<double>::infinity();
  }
  return static_cast<double>(s) * pow2(code - 126 - p);  // exact: s has < 31 bits
}

}  // namespace

int precision_bits(int world) {
  int bits = 0;
  while ((1 << bits) < world) ++bits;
  return 30 - bits;
}

bool covered(DType dtype, RedOp op) {
  const bool floats = dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
  return floats && (op == RedOp::kSum || op == RedOp::kAvg || op == RedOp::kWeightedAvg);
}

size_t n_values(size_t count, RedOp op) { return count + (op == RedOp::kWeightedAvg ? 1 : 0); }

namespace {

// The hot loops, plain enough for the compiler to vectorise, cloned for
// AVX2 where the CPU has it (the results are the same bits either way:
// integer arithmetic, and IEEE double with no FMA or reassociation).
[[gnu::target_clones("avx2", "default")]] void codes_f32(const float* x, size_t n,
                                                         uint8_t* codes) {
  for (size_t i = 0; i < n; ++i)
    codes[i] = static_cast<uint8_t>((std::bit_cast<uint32_t>(x[i]) >> 23) & 0xff);
}

// q = round-half-even(x * 2^(p - c + 126)), in integers: x is
// +-m * 2^(F - 150) (m the 24-bit significand, F the exponent field; F = 0
// is a subnormal, m without its leading bit, at F = 1's scale), so the
// product is +-m / 2^s with s = c - F - p + 24, at least -6 (c >= F, p <=
// 30). The same value the double arithmetic of the slot path rounds.
// 0 where c says non-finite (fixed after).
[[gnu::target_clones("avx2", "default")]] void quantise_f32(const float* x, const uint8_t* c,
                                                            size_t n, int p, int32_t* q) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    const int32_t f = static_cast<int32_t>((u >> 23) & 0xff);
    const uint32_t m = (u & 0x7fffffu) | (f != 0 ? 0x800000u : 0u);
    const int32_t s = static_cast<int32_t>(c[i]) - (f != 0 ? f : 1) - p + 24;
    const uint32_t left = static_cast<uint32_t>(s < 0 ? -s : 0);
    const uint32_t right = static_cast<uint32_t>(s < 0 ? 0 : (s > 31 ? 31 : s));
    const uint32_t kept = (m << left) >> right;
    const uint32_t rest = m & ((1u << right) - 1u);
    const uint32_t half = (1u << right) >> 1;
    // Branch-free (the loop vectorises): above half, or a tie to odd.
    const uint32_t up =
        static_cast<uint32_t>(right != 0) &
        (static_cast<uint32_t>(rest > half) | (static_cast<uint32_t>(rest == half) & kept));
    const int32_t r = static_cast<int32_t>(kept + up);
    const int32_t neg = -static_cast<int32_t>(u >> 31);  // all ones for a negative x
    const int32_t signed_r = (r ^ neg) - neg;
    q[i] = c[i] == kNonFinite ? 0 : signed_r;
  }
}

// S * 2^(c - 126 - p) / div, rounded once to fp32, where 2^(c - 126 - p) is
// a normal float (c >= p) and c is finite; elsewhere a value the fix-up
// overwrites (no select here: GCC will not vectorise one on a converted
// float). The double product is exact.
[[gnu::target_clones("avx2", "default")]] void finish_f32(const int32_t* sums, const uint8_t* c,
                                                          size_t n, int p, double div,
                                                          float* out) {
  for (size_t i = 0; i < n; ++i) {
    const int32_t e = static_cast<int32_t>(c[i]) + 1 - p;  // the scale's exponent field
    const float scale = std::bit_cast<float>(static_cast<uint32_t>(e > 0 ? e : 1) << 23);
    const double d = static_cast<double>(sums[i]) * static_cast<double>(scale) / div;
    out[i] = static_cast<float>(d);
  }
}

// Whether a block has a code the loops above leave for the fix-up: a
// non-finite one, or one below `low`.
[[gnu::target_clones("avx2", "default")]] bool any_special(const uint8_t* c, size_t n, int low) {
  uint8_t lo = 255, hi = 0;  // min and max reduce in vectors
  for (size_t i = 0; i < n; ++i) {
    lo = c[i] < lo ? c[i] : lo;
    hi = c[i] > hi ? c[i] : hi;
  }
  return hi == kNonFinite || lo < low;
}

constexpr size_t kBlock = 4096;

void quantise_fast(const float* x, const uint8_t* c, size_t n, int p, int32_t* q) {
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    quantise_f32(x + b, c + b, m, p, q + b);
    if (!any_special(c + b, m, 0)) continue;
    for (size_t i = b; i < b + m; ++i)
      if (c[i] == kNonFinite) q[i] = kind_count(x[i]);
  }
}

// Where the tensor is not plain fp32 values: converted a block at a time.

// f(values, offset from begin, m) for values [begin, begin + n).
template <class F>
void by_blocks(const Source& src, size_t begin, size_t n, F&& f) {
  float tmp[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    for (size_t i = 0; i < m; ++i) {
      const size_t at = begin + b + i;
      if (at == src.count) {
        tmp[i] = static_cast<float>(src.weight);
      } else {
        const float v = load(src.buf, at, src.dtype);
        tmp[i] = src.op == RedOp::kWeightedAvg
                     ? static_cast<float>(static_cast<double>(v) * src.weight)
                     : v;
      }
    }
    f(tmp, b, m);
  }
}

bool plain(const Source& src) { return src.dtype == DType::kF32 && src.op != RedOp::kWeightedAvg; }

}  // namespace

void contributions(const Source& src, float* out) {
  if (plain(src)) {
    std::memcpy(out, src.buf, src.count * sizeof(float));
    return;
  }
  by_blocks(src, 0, src.n_values(),
            [&](const float* v, size_t b, size_t m) { std::memcpy(out + b, v, m * 4); });
}

void contributions(const void* buf, size_t count, DType dtype, RedOp op, double weight,
                   float* out) {
  contributions(Source{buf, count, dtype, op, weight}, out);
}

void exponent_codes(const Source& src, size_t begin, size_t n, uint8_t* codes) {
  if (plain(src)) return codes_f32(static_cast<const float*>(src.buf) + begin, n, codes);
  by_blocks(src, begin, n, [&](const float* v, size_t b, size_t m) { codes_f32(v, m, codes + b); });
}

void exponent_codes(const Source& src, uint8_t* codes) {
  exponent_codes(src, 0, src.n_values(), codes);
}

void exponent_codes(const float* x, size_t n, uint8_t* codes) { codes_f32(x, n, codes); }

void quantise(const float* x, const uint8_t* max_codes, size_t n, int world, int32_t* q) {
  quantise_fast(x, max_codes, n, precision_bits(world), q);
}

void quantise(const Source& src, size_t begin, size_t n, const uint8_t* max_codes, int world,
              int32_t* q) {
  if (plain(src))
    return quantise(static_cast<const float*>(src.buf) + begin, max_codes, n, world, q);
  by_blocks(src, begin, n, [&](const float* v, size_t b, size_t m) {
    quantise(v, max_codes + b, m, world, q + b);
  });
}

void quantise(const Source& src, const uint8_t* max_codes, int world, int32_t* q) {
  quantise(src, 0, src.n_values(), max_codes, world, q);
}

double decode_value(int32_t sum, uint8_t max_code, int world) {
  return decode(sum, max_code, precision_bits(world));
}

void finish_range(const int32_t* sums, const uint8_t* max_codes, size_t begin, size_t n,
                  int world, DType dtype, double divisor, void* out) {
  const int p = precision_bits(world);
  if (dtype == DType::kF32) {
    auto* f = static_cast<float*>(out) + begin;
    for (size_t b = 0; b < n; b += kBlock) {
      const size_t m = std::min(kBlock, n - b);
      finish_f32(sums + b, max_codes + b, m, p, divisor, f + b);
      if (!any_special(max_codes + b, m, p)) continue;
      for (size_t i = b; i < b + m; ++i)
        if (max_codes[i] == kNonFinite || max_codes[i] < p)
          f[i] = static_cast<float>(decode(sums[i], max_codes[i], p) / divisor);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i)
    store(out, begin + i, dtype, decode(sums[i], max_codes[i], p) / divisor);
}

void finish(const int32_t* sums, const uint8_t* max_codes, size_t count, int world, DType dtype,
            RedOp op, void* out) {
  double divisor = 1.0;
  if (op == RedOp::kAvg) divisor = world;
  if (op == RedOp::kWeightedAvg) divisor = decode_value(sums[count], max_codes[count], world);
  finish_range(sums, max_codes, 0, count, world, dtype, divisor, out);
}

void fold_slots(const float* slots, size_t n, int world, uint8_t* max_codes, int32_t* sums) {
  const int p = precision_bits(world);
  for (size_t i = 0; i < n; ++i) {
    uint8_t c = 0;
    for (int r = 0; r < world; ++r) {
      const auto code = static_cast<uint8_t>((std::bit_cast<uint32_t>(slots[r * n + i]) >> 23) & 0xff);
      c = code > c ? code : c;
    }
    uint32_t s = 0;  // the daemons' int32 sum wraps; so does this (it never needs to)
    for (int r = 0; r < world; ++r) {
      const float x = slots[r * n + i];
      const int32_t q = c == kNonFinite
                            ? kind_count(x)
                            : static_cast<int32_t>(round_even(static_cast<double>(x) * pow2(p - c + 126)));
      s += static_cast<uint32_t>(q);
    }
    max_codes[i] = c;
    sums[i] = static_cast<int32_t>(s);
  }
}

}  // namespace gsync::client::repro
