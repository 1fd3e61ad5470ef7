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

void contributions(const void* buf, size_t count, DType dtype, RedOp op, double weight,
                   float* out) {
  if (op != RedOp::kWeightedAvg) {
    if (dtype == DType::kF32) {
      std::memcpy(out, buf, count * sizeof(float));
      return;
    }
    for (size_t i = 0; i < count; ++i) out[i] = load(buf, i, dtype);
    return;
  }
  // x * w in double, rounded once to fp32: what this rank adds, the same
  // bits on any machine.
  for (size_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(static_cast<double>(load(buf, i, dtype)) * weight);
  out[count] = static_cast<float>(weight);
}

void exponent_codes(const float* x, size_t n, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i)
    codes[i] = static_cast<uint8_t>((std::bit_cast<uint32_t>(x[i]) >> 23) & 0xff);
}

void quantise(const float* x, const uint8_t* max_codes, size_t n, int world, int32_t* q) {
  const int p = precision_bits(world);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = max_codes[i];
    if (c == kNonFinite) {
      q[i] = kind_count(x[i]);
      continue;
    }
    // |x| < 2^(c - 126), so |x * 2^(p - c + 126)| < 2^p: exact in double,
    // and its rounding is at most 2^p.
    q[i] = static_cast<int32_t>(round_even(static_cast<double>(x[i]) * pow2(p - c + 126)));
  }
}

void finish(const int32_t* sums, const uint8_t* max_codes, size_t count, int world, DType dtype,
            RedOp op, void* out) {
  const int p = precision_bits(world);
  if (op == RedOp::kWeightedAvg) {
    const double total = decode(sums[count], max_codes[count], p);
    for (size_t i = 0; i < count; ++i) store(out, i, dtype, decode(sums[i], max_codes[i], p) / total);
  } else if (op == RedOp::kAvg) {
    for (size_t i = 0; i < count; ++i)
      store(out, i, dtype, decode(sums[i], max_codes[i], p) / world);
  } else {
    for (size_t i = 0; i < count; ++i) store(out, i, dtype, decode(sums[i], max_codes[i], p));
  }
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
