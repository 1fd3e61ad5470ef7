// SPDX-License-Identifier: Apache-2.0
//
// The gradient codecs (daemon/reduce/codec.h): params, sizes, fp16 / bf16
// and int8 against the references of tests/util/codec_testing.h, on every
// ISA this CPU runs. int8_sum, top-k and error feedback are
// test_codec_sparse.cc's; a peer's malformed bytes test_codec_decode.cc's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/reduce.h"
#include "tests/util/codec_testing.h"

namespace gsync::reduce {
namespace {

using namespace codec_testing;  // NOLINT: the helpers, shared by the codec tests
using Codecs = CodecTest;

// The vocabulary is constexpr: checked at compile time.
static_assert(proto::wire(proto::Codec::kTopk) == GSYNC_CODEC_TOPK);
static_assert(std::string_view(proto::name(proto::Codec::kF16)) == "fp16");
static_assert(std::string_view(proto::codec_name(9)) == "unknown-codec");
static_assert([] {
  proto::Codec c{};
  return proto::parse_codec("int8", &c) && c == proto::Codec::kInt8 &&
         !proto::parse_codec("Int8", &c);
}());

// ---------------------------------------------------------------------------
// Params and sizes.

TEST_F(Codecs, CheckParamsRefusesBadFields) {
  auto check = [](Codec c, uint32_t block, double fraction) {
    CodecParams p;
    p.codec = c;
    p.block = block;
    p.topk_fraction = fraction;
    return check_params(p);
  };
  EXPECT_EQ(check(Codec::kInt8, 1024, 0.01), "");
  EXPECT_EQ(check(Codec::kInt8, 64, 0.01), "");
  EXPECT_EQ(check(Codec::kInt8, 0, 0.01), "block 0 is not a positive multiple of 64");
  EXPECT_EQ(check(Codec::kInt8, 100, 0.01), "block 100 is not a positive multiple of 64");
  EXPECT_NE(check(Codec::kInt8, 32, 0.01), "");
  EXPECT_EQ(check(Codec::kTopk, 1024, 1.0), "");
  EXPECT_EQ(check(Codec::kTopk, 1024, 1e-9), "");
  EXPECT_EQ(check(Codec::kTopk, 1024, 1.5), "topk_fraction 1.5 is outside (0, 1]");
  EXPECT_NE(check(Codec::kTopk, 1024, 0.0), "");
  EXPECT_NE(check(Codec::kTopk, 1024, -0.5), "");
  EXPECT_NE(check(Codec::kTopk, 1024, std::nan("")).find("topk_fraction"), std::string::npos);
  EXPECT_NE(check(Codec::kTopk, 1024, std::numeric_limits<double>::infinity()), "");
  EXPECT_NE(check(static_cast<Codec>(9), 1024, 0.01), "");
  // Fields a codec does not read are not its problem.
  EXPECT_EQ(check(Codec::kF16, 0, 7.0), "");
}

TEST_F(Codecs, InvalidParamsEncodeExactDense) {
  std::mt19937_64 rng(1);
  std::vector<float> x = gaussian(100, rng), before = x;
  CodecParams p{Codec::kInt8, 100, 0.01};
  const Encoded e = run_encode(p, &x, nullptr);
  EXPECT_EQ(e.format(), static_cast<uint8_t>(Format::kDense32));
  const std::vector<float> d = run_decode(e, x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits(d[i]), bits(before[i]));
}

// An empty chunk: every codec encodes a header (and int8 its padding) that
// decodes to nothing.
TEST_F(Codecs, EmptyTensors) {
  for (Codec c : {Codec::kNone, Codec::kF16, Codec::kBF16, Codec::kInt8, Codec::kTopk}) {
    std::vector<float> x, r;
    const Encoded e = run_encode(CodecParams{c}, &x, &r, nullptr, true);
    EXPECT_GE(e.bytes.size(), kHeader) << proto::name(c);
    run_decode(e, 0);
    Landing dst(0);
    EXPECT_EQ(decode_add(e.bytes.data(), e.bytes.size(), 0, dst.data()), "");
    EXPECT_NE(decode(e.bytes.data(), e.bytes.size(), 1, dst.data()), "");
    EXPECT_TRUE(dst.guards_intact());
  }
}

// ---------------------------------------------------------------------------
// fp16 / bf16.

std::vector<float> half_inputs(std::mt19937_64& rng) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          kNan,
                          -kNan,
                          kInf,
                          -kInf,
                          65504.0f,
                          65519.996f,
                          65520.0f,
                          -65520.0f,
                          1e30f,
                          -3.4e38f,
                          0x1p-14f,
                          0x1p-24f,
                          0x1p-25f,
                          0x1.8p-25f,
                          0x1p-26f,
                          0x1.ff8p-15f,
                          0x1p-126f,
                          0x1p-149f,
                          -0x1p-140f,
                          3.3895314e38f,
                          3.4028235e38f,
                          1.00048828125f,
                          1.001953125f,
                          from_bits(0x7f800001),
                          from_bits(0xffbfffff)};
  // Ties in both formats, then raw bit patterns and ordinary values.
  for (uint32_t m = 0; m < 16; ++m) v.push_back(from_bits(0x3f800000u | (m << 12) | 0x1000u));
  for (uint32_t m = 0; m < 16; ++m) v.push_back(from_bits(0x3f800000u | (m << 16) | 0x8000u));
  for (int i = 0; i < 3000; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng())));
  std::vector<float> g = gaussian(3000, rng, 100.0f);
  v.insert(v.end(), g.begin(), g.end());
  return v;
}

void expect_half_matches(Codec c, const std::vector<float>& x, const Encoded& e) {
  ASSERT_EQ(e.bytes.size(), kHeader + 2 * x.size());
  ASSERT_EQ(e.format(), static_cast<uint8_t>(c == Codec::kF16 ? Format::kF16 : Format::kBF16));
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, e.bytes.data() + kHeader + 2 * i, 2);
    if (std::isnan(x[i])) {
      EXPECT_TRUE(c == Codec::kF16 ? f16_is_nan(h) : bf16_is_nan(h)) << i;
      continue;
    }
    const uint16_t want = c == Codec::kF16 ? ref_f16(x[i]) : ref_bf16(x[i]);
    ASSERT_EQ(h, want) << proto::name(c) << " of " << x[i] << " (0x" << std::hex << bits(x[i])
                       << ") isa " << isa_name(active_isa());
  }
}

TEST_F(Codecs, HalfEncodeIsBitExact) {
  std::mt19937_64 rng(2);
  const std::vector<float> all = half_inputs(rng);
  for (Codec c : {Codec::kF16, Codec::kBF16}) {
    CodecParams p{c};
    std::vector<uint8_t> first;
    for (Isa isa : isas()) {
      force_isa(isa);
      for (size_t n : {size_t{1}, size_t{7}, size_t{15}, size_t{17}, size_t{33}, all.size()}) {
        std::vector<float> x(all.begin(), all.begin() + static_cast<ptrdiff_t>(n));
        const Encoded e = run_encode(p, &x, nullptr);
        expect_half_matches(c, x, e);
        const std::vector<float> d = run_decode(e, n);
        for (size_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, e.bytes.data() + kHeader + 2 * i, 2);
          const float want = c == Codec::kF16 ? ref_from_f16(h) : ref_from_bf16(h);
          ASSERT_TRUE(same(d[i], want)) << i;
        }
        if (n == all.size()) {
          // Every ISA writes the same bytes, NaNs included.
          if (first.empty()) first = e.bytes;
          EXPECT_EQ(e.bytes, first) << isa_name(isa);
        }
      }
    }
  }
}

// Residual, write-back and decode_add of the half formats: r = v - d, 0
// where d is not finite; x = d.
TEST_F(Codecs, HalfResidualAndWriteBack) {
  std::mt19937_64 rng(3);
  for (Codec c : {Codec::kF16, Codec::kBF16}) {
    for (Isa isa : isas()) {
      force_isa(isa);
      std::vector<float> x = gaussian(1001, rng, 1000.0f), r = gaussian(1001, rng, 30.0f);
      x[5] = 1e6f;  // fp16 overflow: Inf is sent, residual 0
      x[6] = kNan;
      std::vector<float> v(x.size());
      for (size_t i = 0; i < x.size(); ++i) v[i] = x[i] + r[i];
      const Encoded e = run_encode(CodecParams{c}, &x, &r, nullptr, true);
      const std::vector<float> d = run_decode(e, x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(same(x[i], d[i])) << i;
        const float want = std::isfinite(d[i]) ? v[i] - d[i] : 0.0f;
        ASSERT_EQ(bits(r[i]), bits(want)) << proto::name(c) << " " << i;
      }
      if (c == Codec::kF16) {
        EXPECT_EQ(d[5], kInf);
      }
      Landing acc(x.size(), 2.0f);
      ASSERT_EQ(decode_add(e.bytes.data(), e.bytes.size(), x.size(), acc.data()), "");
      const std::vector<float> sum = acc.values();
      for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(sum[i], 2.0f + d[i])) << i;
      EXPECT_TRUE(acc.guards_intact());
    }
  }
}

// ---------------------------------------------------------------------------
// int8.

// The encoding, the residual and the decoded values against ref_int8.
void expect_int8_matches(const Encoded& e, const std::vector<float>& v, size_t block,
                         const RefInt8& ref, const std::vector<float>& residual) {
  const Int8View l = int8_view(v.size(), block);
  ASSERT_EQ(e.format(), static_cast<uint8_t>(Format::kInt8));
  ASSERT_GE(e.bytes.size(), l.q_offset + v.size());
  for (size_t b = 0; b < l.blocks; ++b) {
    ASSERT_EQ(scale_at(e, b), ref.scales[b]) << "block " << b << " isa " << isa_name(active_isa());
  }
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(static_cast<int8_t>(e.bytes[l.q_offset + i]), ref.q[i]) << i;
    ASSERT_EQ(bits(residual[i]), bits(ref.residual[i])) << i;
  }
  const std::vector<float> d = run_decode(e, v.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_TRUE(same(d[i], ref.decoded[i])) << i;
}

TEST_F(Codecs, Int8MatchesReference) {
  std::mt19937_64 rng(4);
  for (size_t block : {size_t{64}, size_t{1024}, size_t{4096}}) {
    for (size_t n : {size_t{1}, size_t{63}, size_t{1025}, size_t{100003}}) {
      const std::vector<float> x0 = gaussian(n, rng, 3.0f), r0 = gaussian(n, rng, 0.01f);
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = x0[i] + r0[i];
      const RefInt8 ref = ref_int8(v, block, nullptr);
      std::vector<uint8_t> first;
      for (Isa isa : isas()) {
        force_isa(isa);
        std::vector<float> x = x0, r = r0;
        const Encoded e = run_encode(CodecParams{Codec::kInt8, static_cast<uint32_t>(block)}, &x,
                                     &r, nullptr, true);
        expect_int8_matches(e, v, block, ref, r);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits(x[i]), bits(ref.decoded[i])) << i;
        if (first.empty()) first = e.bytes;
        EXPECT_EQ(e.bytes, first) << "block " << block << " n " << n << " isa " << isa_name(isa);
      }
    }
  }
}

TEST_F(Codecs, Int8ErrorOnGaussianIsUnderOnePercent) {
  std::mt19937_64 rng(5);
  for (Isa isa : isas()) {
    force_isa(isa);
    std::vector<float> x = gaussian(1 << 20, rng), orig = x;
    const Encoded e = run_encode(CodecParams{Codec::kInt8, 1024}, &x, nullptr);
    const std::vector<float> d = run_decode(e, x.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (static_cast<double>(d[i]) - orig[i]) * (static_cast<double>(d[i]) - orig[i]);
      norm += static_cast<double>(orig[i]) * orig[i];
    }
    EXPECT_LE(std::sqrt(err / norm), 0.01) << isa_name(isa);
    // 1 byte per value plus 4 per 1024: about a quarter of fp32.
    EXPECT_LT(e.bytes.size(), x.size() + x.size() / 200 + 256);
  }
}

TEST_F(Codecs, Int8ZeroAndNonFiniteBlocks) {
  std::mt19937_64 rng(6);
  const size_t block = 64, n = 64 * 7 + 5;
  std::vector<float> clean = gaussian(n, rng);
  for (size_t i = 64; i < 128; ++i) clean[i] = (i % 2) ? 0.0f : -0.0f;  // block 1: zeros
  std::vector<float> dirty = clean;
  dirty[2 * 64 + 9] = kNan;               // block 2
  dirty[3 * 64 + 1] = kInf;               // block 3
  dirty[4 * 64 + 63] = -kInf;             // block 4
  dirty[5 * 64] = from_bits(0x00000001);  // block 5: tiny, but its absmax is normal
  for (size_t i = 6 * 64; i < 7 * 64; ++i) dirty[i] = 1e-33f;  // block 6: absmax below 2^-100
  const RefInt8 ref_clean = ref_int8(clean, block, nullptr);
  for (Isa isa : isas()) {
    force_isa(isa);
    // r = -0: v = x bit for bit, and a residual left alone would show.
    std::vector<float> x = dirty, r(n, -0.0f);
    const Encoded e = run_encode(CodecParams{Codec::kInt8, block}, &x, &r, nullptr, true);
    const std::vector<float> d = run_decode(e, n);
    EXPECT_EQ(scale_at(e, 1), 0u);
    for (size_t i = 64; i < 128; ++i) EXPECT_EQ(bits(d[i]), 0u) << "exact +0 at " << i;
    for (size_t b : {size_t{2}, size_t{3}, size_t{4}, size_t{6}}) {
      EXPECT_EQ(scale_at(e, b), 0x7f800000u) << "block " << b << " is raw";
      for (size_t i = b * 64; i < (b + 1) * 64; ++i) {
        ASSERT_TRUE(same(d[i], dirty[i])) << i;
        ASSERT_EQ(bits(r[i]), 0u) << "raw blocks leave no residual, at " << i;
      }
    }
    EXPECT_TRUE(std::isnan(d[2 * 64 + 9]));
    EXPECT_EQ(d[3 * 64 + 1], kInf);
    EXPECT_EQ(d[4 * 64 + 63], -kInf);
    // The neighbours are what they would be without the NaN and Inf.
    const Int8View l = int8_view(n, block);
    for (size_t b : {size_t{0}, size_t{7}}) {
      EXPECT_EQ(scale_at(e, b), ref_clean.scales[b]);
      for (size_t i = b * 64; i < std::min(n, (b + 1) * 64); ++i) {
        ASSERT_EQ(static_cast<int8_t>(e.bytes[l.q_offset + i]), ref_clean.q[i]) << i;
        ASSERT_EQ(bits(d[i]), bits(ref_clean.decoded[i])) << i;
      }
    }
    EXPECT_NE(scale_at(e, 5), 0x7f800000u);
  }
}

// absmax FLT_MAX: float(127) * (absmax / 127) would round past it and
// decode the largest value as Inf, so the block goes raw and keeps its
// bits; a block just under 2^126 is still quantised, and finite.
TEST_F(Codecs, Int8LargestFiniteAbsmax) {
  std::mt19937_64 rng(9);
  std::vector<float> x0 = gaussian(128, rng, 1e37f);
  x0[10] = std::numeric_limits<float>::max();
  x0[11] = -std::numeric_limits<float>::max();
  const RefInt8 ref = ref_int8(x0, 64, nullptr);
  for (Isa isa : isas()) {
    force_isa(isa);
    std::vector<float> x = x0, r(x0.size(), 0.0f);
    const Encoded e = run_encode(CodecParams{Codec::kInt8, 64}, &x, &r, nullptr, true);
    expect_int8_matches(e, x0, 64, ref, r);
    EXPECT_EQ(scale_at(e, 0), 0x7f800000u) << "block 0 is raw";
    EXPECT_EQ(x[10], std::numeric_limits<float>::max());
    EXPECT_EQ(x[11], -std::numeric_limits<float>::max());
    for (float ri : r) ASSERT_TRUE(std::isfinite(ri));
    EXPECT_EQ(bits(r[10]), 0u);
    EXPECT_NE(scale_at(e, 1), 0x7f800000u) << "block 1 (|v| ~ 1e37) is quantised";
    for (size_t i = 64; i < 128; i++) ASSERT_TRUE(std::isfinite(x[i])) << i;
  }
}

TEST_F(Codecs, Int8SharedAbsmax) {
  std::mt19937_64 rng(7);
  const size_t block = 1024, n = 5000;
  const std::vector<float> x0 = gaussian(n, rng);
  std::vector<float> shared(5);
  block_absmax(CodecParams{Codec::kInt8, block}, x0.data(), nullptr, n, shared.data());
  for (float& s : shared) s *= 2;  // another host's gradients were larger
  shared[1] /= 3;                  // smaller than this host's: q clamps at +-127
  shared[3] = 0.0f;                // a wrong maximum: the block must go raw
  shared[4] = 1e-35f;              // too small to scale by
  const RefInt8 ref = ref_int8(x0, block, shared.data());
  for (Isa isa : isas()) {
    force_isa(isa);
    std::vector<float> x = x0, r(n, 0.0f);
    const Encoded e = run_encode(CodecParams{Codec::kInt8, block}, &x, &r, shared.data(), false);
    expect_int8_matches(e, x0, block, ref, r);
    EXPECT_EQ(scale_at(e, 3), 0x7f800000u);
    EXPECT_EQ(scale_at(e, 4), 0x7f800000u);
    EXPECT_EQ(x, x0) << "no write-back";
    const Int8View l = int8_view(n, block);
    const auto q1 = e.bytes.begin() + static_cast<ptrdiff_t>(l.q_offset + block);
    EXPECT_NE(std::find(q1, q1 + block, static_cast<uint8_t>(127)), q1 + block) << "clamped";
    EXPECT_NE(std::find(q1, q1 + block, static_cast<uint8_t>(-127)), q1 + block) << "clamped";
  }
}

TEST_F(Codecs, BlockAbsmax) {
  std::mt19937_64 rng(8);
  const size_t n = 64 * 5 + 3;
  std::vector<float> x = gaussian(n, rng), r = gaussian(n, rng);
  x[64 + 3] = kInf;
  x[128] = from_bits(0xffc01234);  // a NaN with a sign and a payload
  x[128 + 5] = -kInf;              // NaN wins over Inf
  r[200] = -1000.0f;
  for (size_t i = 256; i < n; ++i) x[i] = -0.0f, r[i] = 0.0f;
  std::vector<float> want(6, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] + r[i];
    float& w = want[i / 64];
    w = std::isnan(w) || std::isnan(v) ? kNan : std::max(w, std::fabs(v));
  }
  for (Isa isa : isas()) {
    force_isa(isa);
    std::vector<float> out(7, 99.0f);
    block_absmax(CodecParams{Codec::kInt8, 64}, x.data(), r.data(), n, out.data());
    for (size_t b = 0; b < 6; ++b) ASSERT_TRUE(same(out[b], want[b])) << b;
    EXPECT_EQ(bits(out[2]), 0x7fc00000u) << "the canonical NaN";
    EXPECT_EQ(out[1], kInf);
    EXPECT_EQ(bits(out[4]), 0u);
    EXPECT_EQ(out[6], 99.0f) << "ceil(count / block) outputs only";
    // Without a residual: the maxima of x alone.
    block_absmax(CodecParams{Codec::kInt8, 64}, x.data(), nullptr, 64, out.data());
    float m = 0;
    for (size_t i = 0; i < 64; ++i) m = std::max(m, std::fabs(x[i]));
    EXPECT_EQ(out[0], m);
  }
}

}  // namespace
}  // namespace gsync::reduce
