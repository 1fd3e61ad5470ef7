// SPDX-License-Identifier: Apache-2.0
//
// Shared by the codec tests (tests/unit/test_codec*.cc): references written
// from codec.h's contract that share no code with the codecs (fp16 through
// the compiler's _Float16, bf16 by picking the nearer of two neighbours in
// double, int8 and top-k from their definitions with the standard library),
// and runners that put guard bytes around every buffer the codecs write.
// Byte layouts come from docs/compression.md, "Wire formats".
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/reduce.h"

namespace gsync::reduce::codec_testing {

inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
inline constexpr size_t kGuard = 64;
inline constexpr uint8_t kFill = 0xa5;
inline constexpr size_t kHeader = 32;
inline const float kNan = std::numeric_limits<float>::quiet_NaN();
inline const float kInf = std::numeric_limits<float>::infinity();

inline std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa i : kAllIsas) {
    if (isa_available(i)) out.push_back(i);
  }
  return out;
}

inline uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// Bit-exact, except that any NaN equals any NaN.
inline bool same(float a, float b) {
  return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b));
}

// A product rounded before its use: a call GCC cannot contract into an FMA.
[[gnu::noipa]] inline float product(float a, float b) { return a * b; }

// ---------------------------------------------------------------------------
// References.

inline uint16_t ref_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
inline float ref_from_f16(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

inline uint16_t ref_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;  // compared as "a NaN"
  const uint32_t b = bits(f);
  const uint32_t lo = b & 0xffff0000u;
  const uint32_t hi = lo + 0x10000u;
  const double x = std::fabs(static_cast<double>(f));
  const double dlo = std::fabs(static_cast<double>(from_bits(lo)));
  if (x == dlo) return static_cast<uint16_t>(lo >> 16);
  const double dhi = (hi & 0x7fffffffu) == 0x7f800000u
                         ? std::ldexp(1.0, 128)
                         : std::fabs(static_cast<double>(from_bits(hi)));
  if (x - dlo < dhi - x) return static_cast<uint16_t>(lo >> 16);
  if (dhi - x < x - dlo) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1u) == 0 ? lo >> 16 : hi >> 16);
}
inline float ref_from_bf16(uint16_t h) { return from_bits(static_cast<uint32_t>(h) << 16); }

inline bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
inline bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

struct RefInt8 {
  std::vector<uint32_t> scales;  // bits; +Inf marks a raw block
  std::vector<int8_t> q;
  std::vector<float> decoded, residual;
};

// codec.h's int8 rule, written from its text: absmax in double (exact for
// fp32 inputs), q = nearest-even of the fp32 product, then clamped.
inline RefInt8 ref_int8(const std::vector<float>& v, size_t block, const float* shared) {
  RefInt8 r;
  r.q.assign(v.size(), 0);
  r.decoded.assign(v.size(), 0.0f);
  r.residual.assign(v.size(), 0.0f);
  for (size_t off = 0, b = 0; off < v.size(); off += block, ++b) {
    const size_t end = std::min(v.size(), off + block);
    double local = 0;
    bool finite = true;
    for (size_t i = off; i < end; ++i) {
      finite = finite && std::isfinite(v[i]);
      local = std::max(local, std::fabs(static_cast<double>(v[i])));
    }
    const float eff = shared ? shared[b] : static_cast<float>(local);
    const bool zero = finite && eff == 0 && local == 0;
    const bool quantised = finite && std::isfinite(eff) && eff >= std::ldexp(1.0f, -100) &&
                           eff <= std::ldexp(1.0f, 126);
    if (!zero && !quantised) {
      r.scales.push_back(0x7f800000u);
      for (size_t i = off; i < end; ++i) r.decoded[i] = v[i];
      continue;
    }
    const float s = zero ? 0.0f : eff / 127.0f;
    const float inv = zero ? 0.0f : 127.0f / eff;
    r.scales.push_back(bits(s));
    for (size_t i = off; i < end; ++i) {
      const float q = std::clamp(std::nearbyint(product(v[i], inv)), -127.0f, 127.0f);
      r.q[i] = static_cast<int8_t>(q);
      r.decoded[i] = product(static_cast<float>(r.q[i]), s);
      r.residual[i] = std::isfinite(r.decoded[i]) ? v[i] - r.decoded[i] : 0.0f;
    }
  }
  return r;
}

// Top-k by its definition: a stable sort by magnitude (every NaN the
// largest, all NaNs equal), lowest index first among equals; indices of the
// first k, ascending.
inline std::vector<uint32_t> ref_topk(const std::vector<float>& v, size_t k) {
  std::vector<uint32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
    if (na != nb) return na;
    if (na) return false;
    return std::fabs(v[a]) > std::fabs(v[b]);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

// ---------------------------------------------------------------------------
// Running the codecs with guard bytes.

inline std::vector<float> gaussian(size_t n, std::mt19937_64& rng, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

struct Encoded {
  std::vector<uint8_t> bytes;
  uint8_t format() const { return bytes.empty() ? 0 : bytes[0]; }
};

inline Encoded run_encode(const CodecParams& p, std::vector<float>* x, std::vector<float>* r,
                          const float* shared = nullptr, bool write_back = false) {
  const size_t max = max_encoded_bytes(p, x->size());
  std::vector<uint8_t> out(max + kGuard, kFill);
  const size_t len =
      encode(p, x->data(), r ? r->data() : nullptr, x->size(), shared, write_back, out.data());
  EXPECT_LE(len, max) << "codec " << proto::name(p.codec) << " count " << x->size();
  for (size_t i = max; i < out.size(); ++i) {
    EXPECT_EQ(out[i], kFill) << "encode wrote past max_encoded_bytes at " << i;
  }
  out.resize(len);
  return {out};
}

// dst with guard floats on both sides, which decode must leave alone.
struct Landing {
  explicit Landing(size_t n, float fill = 0.0f) : buf(n + 2 * kGuard, from_bits(0x7fa5a5a5)) {
    std::fill(buf.begin() + kGuard, buf.begin() + kGuard + n, fill);
    count = n;
  }
  float* data() { return buf.data() + kGuard; }
  std::vector<float> values() const {
    return {buf.begin() + kGuard, buf.begin() + kGuard + static_cast<ptrdiff_t>(count)};
  }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (bits(buf[i]) != 0x7fa5a5a5 || bits(buf[kGuard + count + i]) != 0x7fa5a5a5) return false;
    }
    return true;
  }
  std::vector<float> buf;
  size_t count;
};

// Decodes from a heap copy of exactly the encoding's length, so an
// over-read runs off the allocation.
inline std::vector<float> run_decode(const Encoded& e, size_t count) {
  std::vector<uint8_t> exact(e.bytes);
  Landing dst(count, 12345.0f);
  const std::string why = decode(exact.data(), exact.size(), count, dst.data());
  EXPECT_EQ(why, "");
  EXPECT_TRUE(dst.guards_intact());
  return dst.values();
}

// ---------------------------------------------------------------------------
// The int8 layout.

struct Int8View {
  size_t blocks, q_offset, raw_offset;
};

// docs/compression.md: the scale table after the 32-byte header, the int8
// values and then the raw fp32 values each on a 64-byte boundary.
inline Int8View int8_view(size_t count, size_t block) {
  Int8View v;
  v.blocks = (count + block - 1) / block;
  v.q_offset = (kHeader + 4 * v.blocks + 63) / 64 * 64;
  v.raw_offset = (v.q_offset + count + 63) / 64 * 64;
  return v;
}

inline uint32_t scale_at(const Encoded& e, size_t b) {
  uint32_t s;
  std::memcpy(&s, e.bytes.data() + kHeader + 4 * b, 4);
  return s;
}

// Every test restores the ISA it found.
class CodecTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string names;
    for (Isa i : isas()) names += std::string(" ") + isa_name(i);
    std::printf("codecs tested on:%s\n", names.c_str());
  }
  void SetUp() override { original_ = active_isa(); }
  void TearDown() override { force_isa(original_); }
  Isa original_{};
};

}  // namespace gsync::reduce::codec_testing
