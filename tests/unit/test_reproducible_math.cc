// SPDX-License-Identifier: Apache-2.0
//
// The arithmetic of the reproducible allreduce (libclient/
// reproducible_math.h), with no session: the two-phase path (codes, a max
// over ranks; q; an int32 sum in any order and grouping) against the slot
// path, order independence, accuracy against an exact reference, IEEE's
// special values, the averages, and fp16/bf16 in and out.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "libclient/reproducible_math.h"
#include "protocol/ops.h"

namespace gsync::client::repro {
namespace {

using proto::DType;
using proto::RedOp;
using Ranks = std::vector<std::vector<float>>;  // [rank][value]

struct Reduced {
  std::vector<uint8_t> codes;
  std::vector<int32_t> sums;
  bool operator==(const Reduced&) const = default;
};

// The two-phase path as the daemons run it: the codes' max over ranks, q
// per rank, then an int32 sum that wraps, group by group (each group's
// ranks in the order given, then the groups' partial sums in order).
Reduced two_phase(const Ranks& x, const std::vector<std::vector<int>>& groups) {
  const int world = static_cast<int>(x.size());
  const size_t n = x[0].size();
  Reduced r{std::vector<uint8_t>(n, 0), std::vector<int32_t>(n, 0)};
  std::vector<uint8_t> c(n);
  for (const auto& xs : x) {
    exponent_codes(xs.data(), n, c.data());
    for (size_t i = 0; i < n; ++i) r.codes[i] = std::max(r.codes[i], c[i]);
  }
  std::vector<std::vector<int32_t>> q(world, std::vector<int32_t>(n));
  for (int k = 0; k < world; ++k) quantise(x[k].data(), r.codes.data(), n, world, q[k].data());
  for (size_t i = 0; i < n; ++i) {
    uint32_t total = 0;
    for (const auto& g : groups) {
      uint32_t part = 0;
      for (int k : g) part += static_cast<uint32_t>(q[k][i]);
      total += part;
    }
    r.sums[i] = static_cast<int32_t>(total);
  }
  return r;
}

std::vector<std::vector<int>> rank_order(int world) {
  std::vector<int> g(world);
  for (int k = 0; k < world; ++k) g[k] = k;
  return {g};
}

Reduced slots(const Ranks& x) {
  const int world = static_cast<int>(x.size());
  const size_t n = x[0].size();
  std::vector<float> s;
  for (const auto& xs : x) s.insert(s.end(), xs.begin(), xs.end());
  Reduced r{std::vector<uint8_t>(n), std::vector<int32_t>(n)};
  fold_slots(s.data(), n, world, r.codes.data(), r.sums.data());
  return r;
}

std::vector<uint32_t> finish_bits(const Reduced& r, int world, RedOp op = RedOp::kSum) {
  std::vector<float> out(r.sums.size());
  finish(r.sums.data(), r.codes.data(), out.size(), world, DType::kF32, op, out.data());
  std::vector<uint32_t> bits;
  for (float f : out) bits.push_back(std::bit_cast<uint32_t>(f));
  return bits;
}

// End to end for one dtype: each rank's contributions(), then the two-phase
// path in rank order, then finish() into a buffer of T.
template <typename T>
std::vector<T> allreduce(const std::vector<std::vector<T>>& bufs, DType t, RedOp op,
                         const std::vector<double>& weights = {}) {
  const size_t count = bufs[0].size();
  Ranks x;
  for (size_t k = 0; k < bufs.size(); ++k) {
    x.emplace_back(n_values(count, op));
    contributions(bufs[k].data(), count, t, op, weights.empty() ? 1.0 : weights[k], x[k].data());
  }
  const Reduced r = two_phase(x, rank_order(static_cast<int>(x.size())));
  std::vector<T> out(count);
  finish(r.sums.data(), r.codes.data(), count, static_cast<int>(x.size()), t, op, out.data());
  return out;
}

float sum_of(const Ranks& x) { return allreduce(x, DType::kF32, RedOp::kSum)[0]; }

// 10^U(lo, hi) with a random sign, as fp32.
float random_value(std::mt19937_64& rng, double lo = -8, double hi = 8) {
  const double u = std::uniform_real_distribution<double>(lo, hi)(rng);
  return static_cast<float>((rng() & 1 ? -1 : 1) * std::pow(10.0, u));
}

Ranks random_ranks(int world, size_t n, std::mt19937_64& rng) {
  Ranks x(world, std::vector<float>(n));
  for (auto& xs : x)
    for (float& v : xs) v = random_value(rng);
  return x;
}

TEST(ReproducibleMath, PrecisionBits) {
  EXPECT_EQ(precision_bits(1), 30);
  EXPECT_EQ(precision_bits(2), 29);
  EXPECT_EQ(precision_bits(3), 28);
  EXPECT_EQ(precision_bits(4), 28);
  EXPECT_EQ(precision_bits(64), 24);
  EXPECT_EQ(precision_bits(kMaxWorld), 20);
}

// The slot path must give the bits the daemons' two-phase path gives,
// whatever order or grouping the int32 sum takes: that is what lets a
// small tensor skip the daemons.
TEST(ReproducibleMath, TwoPhaseAndSlotsAgreeInAnyOrder) {
  std::mt19937_64 rng(1);
  const float inf = std::numeric_limits<float>::infinity();
  for (int world : {1, 2, 3, 4, 7}) {
    SCOPED_TRACE("world " + std::to_string(world));
    Ranks x = random_ranks(world, 4096, rng);
    // Some non-finite elements too, where q counts kinds.
    x[0][7] = std::numeric_limits<float>::quiet_NaN();
    x[world - 1][8] = inf;
    x[world / 2][9] = -inf;
    const auto forward = rank_order(world);
    std::vector<int> back = forward[0], even, odd;
    std::reverse(back.begin(), back.end());
    for (int k = 0; k < world; ++k) (k % 2 ? odd : even).push_back(k);
    const Reduced want = slots(x);
    for (const auto& groups : {forward, {back}, {even, odd}}) {
      const Reduced got = two_phase(x, groups);
      ASSERT_EQ(got, want);
      EXPECT_EQ(finish_bits(got, world), finish_bits(want, world));
    }
  }
}

// The result depends on the multiset of contributions alone: shuffling each
// element's values among the ranks changes no bit.
TEST(ReproducibleMath, RanksPermutedGiveTheSameBits) {
  std::mt19937_64 rng(2);
  for (int world : {2, 3, 4, 7}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const Ranks x = random_ranks(world, 4096, rng);
    const auto want = finish_bits(two_phase(x, rank_order(world)), world);
    for (int trial = 0; trial < 3; ++trial) {
      Ranks y = x;
      std::vector<float> col(world);
      for (size_t i = 0; i < x[0].size(); ++i) {
        for (int k = 0; k < world; ++k) col[k] = x[k][i];
        std::shuffle(col.begin(), col.end(), rng);
        for (int k = 0; k < world; ++k) y[k][i] = col[k];
      }
      EXPECT_EQ(finish_bits(two_phase(y, rank_order(world)), world), want);
      EXPECT_EQ(finish_bits(slots(y), world), want);
    }
  }
}

// Exact arithmetic in units of 2^-80: every value here is in [1e-8, 1e8]
// (multiples of 2^-50, below 2^27), every result a multiple of the grid
// (2^-53 or coarser) or of its own fp32 ulp, and every bound a multiple of
// 2^-78, so nothing below rounds.
__extension__ typedef __int128 Fixed;
constexpr int kUnitBits = 80;
Fixed fixed(float v) { return static_cast<Fixed>(std::ldexp(static_cast<long double>(v), kUnitBits)); }
Fixed pow2_units(int e) { return Fixed{1} << (e + kUnitBits); }
Fixed abs_fixed(Fixed v) { return v < 0 ? -v : v; }
long double real(Fixed v) { return std::ldexp(static_cast<long double>(v), -kUnitBits); }

// Each q is off by at most half the grid, 2^(E - P - 1), and the result is
// rounded once to fp32; and that one rounding beats the naive sum's W - 1.
TEST(ReproducibleMath, AccurateAgainstExactSum) {
  std::mt19937_64 rng(3);
  for (int world : {1, 2, 3, 4, 7}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const size_t n = 8192;
    Ranks x = random_ranks(world, n, rng);
    // A quarter cancel: x and -x on two ranks, a small third value, zeros.
    for (size_t i = 0; world >= 2 && i < n; i += 4) {
      x[1][i] = -x[0][i];
      for (int k = 2; k < world; ++k) x[k][i] = 0;
      if (world >= 3) x[2][i] = random_value(rng, -8, -4);
    }
    const Reduced r = two_phase(x, rank_order(world));
    const auto bits = finish_bits(r, world);
    const int p = precision_bits(world);
    Fixed err_repro = 0, err_naive = 0;
    for (size_t i = 0; i < n; ++i) {
      Fixed exact = 0;
      float naive = 0;
      for (int k = 0; k < world; ++k) {
        exact += fixed(x[k][i]);
        naive = k == 0 ? x[k][i] : naive + x[k][i];
      }
      const float got = std::bit_cast<float>(bits[i]);
      const Fixed err = abs_fixed(fixed(got) - exact);
      const int e = r.codes[i] - 126;
      const Fixed half_ulp = got == 0 ? 0 : pow2_units(std::ilogb(got) - 24);
      ASSERT_LE(err, world * pow2_units(e - p - 1) + half_ulp)
          << "element " << i << ": " << got << " against " << static_cast<double>(real(exact));
      err_repro += err;
      err_naive += abs_fixed(fixed(naive) - exact);
    }
    const double repro = static_cast<double>(real(err_repro));
    const double naive = static_cast<double>(real(err_naive));
    RecordProperty("abs_error_repro_w" + std::to_string(world), std::to_string(repro));
    RecordProperty("abs_error_naive_w" + std::to_string(world), std::to_string(naive));
    std::printf("world %d: summed |error| %.6g reproducible, %.6g naive fp32\n", world, repro,
                naive);
    // At two ranks the naive sum is one correctly rounded addition, which
    // nothing rounded to fp32 beats: the grid can tip a near-tie (here +0.13%).
    if (world <= 2)
      EXPECT_LE(repro, naive * 1.01);
    else
      EXPECT_LE(err_repro, err_naive);
  }
}

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

TEST(ReproducibleMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();  // 2^-149
  // Zeros of either sign give +0 (q is an integer; it has no -0).
  EXPECT_EQ(bits_of(sum_of({{0.0f}, {-0.0f}})), 0u);
  EXPECT_EQ(bits_of(sum_of({{-0.0f}, {-0.0f}, {-0.0f}})), 0u);
  // Subnormals sit on the grid exactly.
  EXPECT_EQ(sum_of({{tiny}, {tiny}}), std::ldexp(1.0f, -148));
  EXPECT_EQ(sum_of({{std::ldexp(1.0f, -126) - tiny}, {tiny}, {tiny}}),
            std::ldexp(1.0f, -126) + tiny);
  // IEEE addition's non-finite results.
  EXPECT_TRUE(std::isnan(sum_of({{nan}, {1.0f}})));
  EXPECT_TRUE(std::isnan(sum_of({{1.0f}, {2.0f}, {nan}})));
  EXPECT_TRUE(std::isnan(sum_of({{inf}, {nan}})));
  EXPECT_EQ(sum_of({{inf}, {1.0f}}), inf);
  EXPECT_EQ(sum_of({{inf}, {inf}, {-3e38f}}), inf);
  EXPECT_EQ(sum_of({{5.0f}, {-inf}}), -inf);
  EXPECT_TRUE(std::isnan(sum_of({{inf}, {-inf}})));
  EXPECT_TRUE(std::isnan(sum_of({{inf}, {1.0f}, {-inf}, {2.0f}})));
  // A finite sum past fp32's range rounds to the infinity.
  EXPECT_EQ(sum_of({{3e38f}, {3e38f}}), inf);
  EXPECT_EQ(sum_of({{-3e38f}, {-3e38f}}), -inf);
}

// An average divides the decoded sum by the world in double, then rounds
// to fp32; these sums are exact on the grid, so that is the expected value.
TEST(ReproducibleMath, AverageDividesInDouble) {
  const Ranks x = {{1.0f, 0.1f, 1e8f, -7.0f}, {2.0f, 0.2f, -1.0f, 0.0f}, {4.0f, 0.3f, 3.0f, 0.0f}};
  const auto got = allreduce(x, DType::kF32, RedOp::kAvg);
  for (size_t i = 0; i < got.size(); ++i) {
    const double sum = double(x[0][i]) + double(x[1][i]) + double(x[2][i]);  // exact here
    EXPECT_EQ(bits_of(got[i]), bits_of(static_cast<float>(sum / 3))) << "element " << i;
  }
}

TEST(ReproducibleMath, WeightedAverage) {
  ASSERT_EQ(n_values(2, RedOp::kWeightedAvg), 3u);
  ASSERT_EQ(n_values(2, RedOp::kSum), 2u);
  // Each rank adds x * weight, then the weight itself, last.
  const std::vector<float> a = {2.0f, 1.0f}, b = {6.0f, 3.0f};
  std::vector<float> out(3);
  contributions(b.data(), 2, DType::kF32, RedOp::kWeightedAvg, 3.0, out.data());
  EXPECT_EQ(out, (std::vector<float>{18.0f, 9.0f, 3.0f}));
  // (2 * 1 + 6 * 3) / (1 + 3) = 5; (1 * 1 + 3 * 3) / 4 = 2.5.
  const auto got = allreduce<float>({a, b}, DType::kF32, RedOp::kWeightedAvg, {1.0, 3.0});
  EXPECT_EQ(got, (std::vector<float>{5.0f, 2.5f}));
}

TEST(ReproducibleMath, HalfPrecisionInExactly) {
  // fp16: 1, -2, the least subnormal, the largest finite, +Inf.
  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00};
  std::vector<float> out(h.size());
  contributions(h.data(), h.size(), DType::kF16, RedOp::kSum, 1.0, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f,
                                     std::numeric_limits<float>::infinity()}));
  // bf16 is the top half of an fp32.
  const std::vector<uint16_t> b = {0x3f80, 0x3bc0, 0xc2f7, 0x0001};
  out.resize(b.size());
  contributions(b.data(), b.size(), DType::kBF16, RedOp::kSum, 1.0, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, 3.0f / 512, -123.5f, std::ldexp(1.0f, -133)}));
}

// The fp32 result is rounded once more, to nearest, ties to even.
TEST(ReproducibleMath, HalfPrecisionOutNearestEven) {
  using H = std::vector<uint16_t>;
  // bf16 (ulp 2^-7 at 1): 1 + 2^-8 is a tie, to 1; 1 + 3 * 2^-9 rounds up;
  // (1 + 2^-7) + 2^-8 is a tie, to the even 1 + 2^-6.
  const auto b = allreduce<uint16_t>({H{0x3f80, 0x3f80, 0x3f81}, H{0x3b80, 0x3bc0, 0x3b80}, H{0, 0, 0}},
                                     DType::kBF16, RedOp::kSum);
  EXPECT_EQ(b, (H{0x3f80, 0x3f81, 0x3f82}));
  // fp16 (ulp 2^-10 at 1): 1 + 1 = 2 exactly; 1 + 2^-11 is a tie, to 1;
  // 1 + 3 * 2^-12 rounds up; 65504 + 65504 overflows to +Inf.
  const auto h = allreduce<uint16_t>({H{0x3c00, 0x3c00, 0x3c00, 0x7bff}, H{0x3c00, 0x1000, 0x1200, 0x7bff}},
                                     DType::kF16, RedOp::kSum);
  EXPECT_EQ(h, (H{0x4000, 0x3c00, 0x3c01, 0x7c00}));
}

}  // namespace
}  // namespace gsync::client::repro
