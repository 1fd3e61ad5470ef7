// SPDX-License-Identifier: Apache-2.0
//
// The codecs that sum or select (daemon/reduce/codec.h): int8_sum against a
// scalar reference and in any order of its inputs, top-k selection and its
// ties, encode_exact_sparse, and error feedback over many steps, on every
// ISA this CPU runs. References: tests/util/codec_testing.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/reduce.h"
#include "tests/util/codec_testing.h"

namespace gsync::reduce {
namespace {

using namespace codec_testing;  // NOLINT: the helpers, shared by the codec tests
using Int8Sum = CodecTest;
using TopK = CodecTest;
using ErrorFeedback = CodecTest;

// ---------------------------------------------------------------------------
// int8_sum.

// What the hosts agree on before encoding: the max over hosts of each
// block's absmax, NaN if any host has a NaN.
std::vector<float> shared_max(const std::vector<std::vector<float>>& hosts, size_t block) {
  const size_t n = hosts[0].size(), blocks = (n + block - 1) / block;
  std::vector<float> shared(blocks, 0.0f), mine(blocks);
  for (const std::vector<float>& x : hosts) {
    block_absmax(CodecParams{Codec::kInt8, static_cast<uint32_t>(block)}, x.data(), nullptr, n,
                 mine.data());
    for (size_t b = 0; b < blocks; ++b) {
      shared[b] =
          std::isnan(shared[b]) || std::isnan(mine[b]) ? kNan : std::max(shared[b], mine[b]);
    }
  }
  return shared;
}

// int8_sum by its definition, from the encodings' own bytes: the integer
// sum times the scale; raw blocks the fp32 sum of the hosts' values in
// input order.
std::vector<float> ref_int8_sum(const std::vector<Encoded>& e,
                                const std::vector<std::vector<float>>& hosts, size_t block) {
  const size_t n = hosts[0].size();
  const Int8View l = int8_view(n, block);
  std::vector<float> out(n);
  for (size_t b = 0; b < l.blocks; ++b) {
    const uint32_t s = scale_at(e[0], b);
    for (size_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      if (s == 0x7f800000u) {
        float sum = hosts[0][i];
        for (size_t j = 1; j < hosts.size(); ++j) sum += hosts[j][i];
        out[i] = sum;
        continue;
      }
      int32_t q = 0;
      for (const Encoded& ej : e) q += static_cast<int8_t>(ej.bytes[l.q_offset + i]);
      out[i] = product(static_cast<float>(q), from_bits(s));
    }
  }
  return out;
}

std::string run_sum(const std::vector<Encoded>& e, size_t count, Landing* dst) {
  std::vector<const uint8_t*> in;
  std::vector<size_t> len;
  for (const Encoded& ej : e) {
    in.push_back(ej.bytes.data());
    len.push_back(ej.bytes.size());
  }
  return int8_sum(in.data(), len.data(), e.size(), count, dst->data());
}

TEST_F(Int8Sum, MatchesReferenceInAnyOrder) {
  std::mt19937_64 rng(20);
  const size_t block = 256, n = 256 * 9 + 77;
  for (size_t k : {size_t{1}, size_t{2}, size_t{3}, size_t{5}}) {
    std::vector<std::vector<float>> hosts;
    for (size_t j = 0; j < k; ++j) hosts.push_back(gaussian(n, rng, 1.0f + static_cast<float>(j)));
    for (size_t i = 256; i < 512; ++i) {
      for (auto& x : hosts) x[i] = 0.0f;  // block 1: zero everywhere
    }
    hosts[k - 1][2 * 256 + 3] = kNan;                               // block 2: raw on every host
    hosts[0][3 * 256 + 100] = -kInf;                                // block 3: raw on every host
    for (size_t i = 4 * 256; i < 5 * 256; ++i) hosts[0][i] = 0.0f;  // block 4: zeros on host 0
    const std::vector<float> shared = shared_max(hosts, block);
    std::vector<float> first;
    for (Isa isa : isas()) {
      force_isa(isa);
      std::vector<Encoded> e;
      for (auto x : hosts)
        e.push_back(run_encode(CodecParams{Codec::kInt8, block}, &x, nullptr, shared.data()));
      EXPECT_EQ(scale_at(e[0], 1), 0u);
      EXPECT_EQ(scale_at(e[0], 2), 0x7f800000u);
      EXPECT_EQ(scale_at(e[0], 3), 0x7f800000u);
      const std::vector<float> want = ref_int8_sum(e, hosts, block);
      Landing dst(n, 7.0f);
      ASSERT_EQ(run_sum(e, n, &dst), "") << "k " << k;
      ASSERT_TRUE(dst.guards_intact());
      const std::vector<float> got = dst.values();
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same(got[i], want[i])) << "k " << k << " at " << i;
      EXPECT_TRUE(std::isnan(got[2 * 256 + 3]));
      if (first.empty()) first = got;
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same(got[i], first[i])) << isa_name(isa) << " " << i;
      // Reversed and rotated: the quantised blocks keep their bits.
      std::vector<Encoded> rev(e.rbegin(), e.rend()), rot(e.begin() + 1, e.end());
      rot.push_back(e[0]);
      for (const auto& order : {rev, rot}) {
        Landing other(n);
        ASSERT_EQ(run_sum(order, n, &other), "");
        const std::vector<float> o = other.values();
        for (size_t i = 0; i < n; ++i) {
          if (i / block == 2 || i / block == 3) continue;  // raw: fp32, in input order
          ASSERT_EQ(bits(o[i]), bits(got[i])) << "k " << k << " at " << i;
        }
      }
    }
  }
}

TEST_F(Int8Sum, RefusesInputsThatDoNotShareAGrid) {
  std::mt19937_64 rng(21);
  const size_t n = 3000;
  std::vector<float> a = gaussian(n, rng), b = gaussian(n, rng);
  const std::vector<float> shared = shared_max({a, b}, 1024);
  std::vector<float> other = shared;
  other[2] *= 1.5f;
  const Encoded ea = run_encode(CodecParams{Codec::kInt8, 1024}, &a, nullptr, shared.data());
  const Encoded eb = run_encode(CodecParams{Codec::kInt8, 1024}, &b, nullptr, shared.data());
  const Encoded own = run_encode(CodecParams{Codec::kInt8, 1024}, &b, nullptr, other.data());
  const Encoded small = run_encode(CodecParams{Codec::kInt8, 512}, &b, nullptr);
  const Encoded half = run_encode(CodecParams{Codec::kF16}, &b, nullptr);
  Encoded broken = eb;
  broken.bytes[kHeader + 4 + 3] |= 0x80;  // block 1's scale turns negative
  const std::vector<std::pair<std::vector<Encoded>, std::string>> cases = {
      {{ea, own}, "input 1's scale of block 2 differs from input 0's"},
      {{ea, small}, "input 1 has blocks of 512 values, input 0 of 1024"},
      {{ea, half}, "input 1 is not int8"},
      {{broken, ea}, "input 0: int8 block 1 has a negative scale"},
      {{}, "int8_sum of no inputs"},
  };
  for (const auto& [inputs, why] : cases) {
    Landing dst(n, 3.0f);
    const std::vector<float> before = dst.buf;
    EXPECT_EQ(run_sum(inputs, n, &dst), why);
    EXPECT_EQ(std::memcmp(dst.buf.data(), before.data(), before.size() * sizeof(float)), 0);
  }
  // The right grid, the wrong count.
  Landing dst(n - 1);
  EXPECT_NE(run_sum({ea, eb}, n - 1, &dst).find("input 0: count 3000"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Top-k.

struct Entry {
  uint32_t index;
  float value;
};

std::vector<Entry> sparse_entries(const Encoded& e) {
  EXPECT_EQ(e.format(), static_cast<uint8_t>(Format::kSparse));
  std::vector<Entry> out((e.bytes.size() - kHeader) / 8);
  for (size_t i = 0; i < out.size(); ++i) {
    std::memcpy(&out[i].index, e.bytes.data() + kHeader + 8 * i, 4);
    std::memcpy(&out[i].value, e.bytes.data() + kHeader + 8 * i + 4, 4);
  }
  return out;
}

size_t topk_k(double f, size_t n) {
  return std::max<size_t>(1, static_cast<size_t>(std::ceil(f * static_cast<double>(n))));
}

// Encodes v with top-k, as x alone (no residual: every bit kept, a
// signalling NaN too) or as x + r, and checks the kept indices, their bits,
// the residual and the write-back.
void expect_topk(std::vector<float> v, double f, bool with_residual) {
  const size_t n = v.size(), k = std::min(n, topk_k(f, n));
  std::vector<float> x = v, r(n, 0.0f);
  if (with_residual) {
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(v[i])) {
        x[i] = from_bits(bits(v[i]) ^ 1u);  // a neighbour: v - x is exact
        r[i] = v[i] - x[i];
      }
      v[i] = x[i] + r[i];  // what the encoder adds up (a NaN made quiet, too)
    }
  }
  const Encoded e = run_encode(CodecParams{Codec::kTopk, 1024, f}, &x, with_residual ? &r : nullptr,
                               nullptr, true);
  const std::vector<Entry> got = sparse_entries(e);
  const std::vector<uint32_t> want = ref_topk(v, k);
  ASSERT_EQ(got.size(), want.size());
  std::vector<bool> kept(n, false);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].index, want[i]) << "entry " << i << " of " << k;
    ASSERT_EQ(bits(got[i].value), bits(v[want[i]])) << "a kept value keeps its bits, entry " << i;
    kept[want[i]] = true;
  }
  const std::vector<float> d = run_decode(e, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits(d[i]), kept[i] ? bits(v[i]) : 0u) << i;
    ASSERT_EQ(bits(x[i]), bits(d[i])) << "write-back at " << i;
    if (with_residual) {
      ASSERT_EQ(bits(r[i]), kept[i] ? 0u : bits(v[i])) << "residual at " << i;
    }
  }
}

TEST_F(TopK, SelectsTheLargestMagnitudes) {
  std::mt19937_64 rng(30);
  for (Isa isa : isas()) {
    force_isa(isa);
    for (double f : {0.01, 0.001, 0.1, 0.3}) {
      expect_topk(gaussian(10007, rng), f, false);
      expect_topk(gaussian(10007, rng, 1e-3f), f, true);
    }
  }
}

TEST_F(TopK, BreaksTiesByLowestIndexAndRanksNanFirst) {
  // Equal magnitudes of both signs; k falls inside the run of 1s.
  std::vector<float> v(200, 0.5f);
  for (size_t i = 0; i < v.size(); i += 3) v[i] = (i % 2) ? -1.0f : 1.0f;
  v[150] = 2.0f;
  v[7] = -2.0f;
  expect_topk(v, 0.05, false);  // k = 10: both 2s, then the first eight 1s
  // NaN above Inf above everything; all NaNs alike, whatever their bits.
  std::vector<float> w(300, 1.0f);
  w[299] = kInf;
  w[5] = from_bits(0x7f800001);  // the smallest payload, the lowest index
  w[200] = from_bits(0xffc00001);
  w[250] = kNan;
  w[100] = -kInf;
  expect_topk(w, 0.005, false);  // k = 2: the first two NaNs, not the largest payloads
  expect_topk(w, 0.01, false);   // k = 3: the three NaNs
  expect_topk(w, 0.015, false);  // k = 5: NaNs, then the Infs
  expect_topk(w, 0.02, true);    // k = 6: and the lowest-index 1
}

TEST_F(TopK, NarrowsThroughEveryRadixDigit) {
  std::mt19937_64 rng(31);
  // Keys that differ only in their lowest 12 bits, many repeated: the
  // threshold is found at the last digit, among ties.
  std::vector<float> v(5000);
  for (float& f : v) f = from_bits(0x3f800000u + static_cast<uint32_t>(rng() % 4096));
  for (double f : {0.0074, 0.01, 0.2}) expect_topk(v, f, false);
  // A first digit kept whole: ten values in a binade of their own.
  std::vector<float> w(1000, 1.0f);
  for (size_t i = 0; i < 10; ++i) w[i * 97] = -1000.0f - static_cast<float>(i);
  expect_topk(w, 0.01, false);
  // Subnormals, zeros of both signs and one normal.
  std::vector<float> s(400, -0.0f);
  for (size_t i = 0; i < s.size(); i += 2) s[i] = from_bits(static_cast<uint32_t>(i + 1));
  s[333] = 1e-30f;
  expect_topk(s, 0.01, false);
}

TEST_F(TopK, CountsAndDenseFallback) {
  std::mt19937_64 rng(32);
  auto format_of = [](size_t n, double f) {
    std::mt19937_64 g(n);
    std::vector<float> x = gaussian(n, g);
    return run_encode(CodecParams{Codec::kTopk, 1024, f}, &x, nullptr);
  };
  EXPECT_EQ(sparse_entries(format_of(1000, 1e-9)).size(), 1u) << "k is at least 1";
  EXPECT_EQ(sparse_entries(format_of(1000, 0.0101)).size(), 11u) << "k rounds up";
  EXPECT_EQ(format_of(100, 0.49).format(), static_cast<uint8_t>(Format::kSparse));
  // 8 k bytes not below 4 n: dense, exact.
  for (auto [n, f] : {std::pair<size_t, double>{100, 0.5}, {2, 0.01}, {1, 1.0}, {1000, 1.0}}) {
    std::vector<float> x = gaussian(n, rng), r(n, 0.0f), before = x;
    const Encoded e = run_encode(CodecParams{Codec::kTopk, 1024, f}, &x, &r);
    EXPECT_EQ(e.format(), static_cast<uint8_t>(Format::kDense32)) << n << " " << f;
    const std::vector<float> d = run_decode(e, n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(bits(d[i]), bits(before[i]));
    for (float ri : r) EXPECT_EQ(bits(ri), 0u);
  }
  std::vector<float> none;
  EXPECT_EQ(run_encode(CodecParams{Codec::kTopk}, &none, nullptr).bytes.size(), kHeader);
}

TEST_F(TopK, ExactSparseKeepsEveryNonzeroBit) {
  std::vector<float> x(1000, 0.0f);
  x[3] = -0.0f;
  x[10] = kNan;
  x[11] = from_bits(1);
  x[999] = -7.5f;
  x[500] = kInf;
  std::vector<uint8_t> out(max_encoded_bytes({}, x.size()) + kGuard, kFill);
  const size_t len = encode_exact_sparse(x.data(), x.size(), out.data());
  EXPECT_EQ(out[0], static_cast<uint8_t>(Format::kSparse));
  EXPECT_EQ(len, kHeader + 8 * 4);
  EXPECT_EQ(out[len], kFill);
  out.resize(len);
  const std::vector<float> d = run_decode(Encoded{out}, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(bits(d[i]), i == 3 ? 0u : bits(x[i])) << i;
  }
  // Mostly nonzero: dense, every bit kept too.
  std::mt19937_64 rng(33);
  std::vector<float> y = gaussian(100, rng);
  y[4] = -0.0f;
  std::vector<uint8_t> dense(max_encoded_bytes({}, y.size()));
  EXPECT_EQ(encode_exact_sparse(y.data(), y.size(), dense.data()), dense.size());
  EXPECT_EQ(dense[0], static_cast<uint8_t>(Format::kDense32));
  const std::vector<float> dy = run_decode(Encoded{dense}, y.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(bits(dy[i]), bits(y[i])) << i;
}

// ---------------------------------------------------------------------------
// Error feedback: what the codec drops this step it sends in a later one, so
// over many steps the decoded sum plus the last residual is the input sum.

TEST_F(ErrorFeedback, ConservesTheSumOverAThousandSteps) {
  std::mt19937_64 rng(40);
  const std::vector<float> pool = gaussian(1 << 16, rng);
  const size_t n = 4096 + 13, steps = 1000;
  const CodecParams codecs[] = {{Codec::kF16},
                                {Codec::kBF16},
                                {Codec::kInt8, 256},
                                {Codec::kTopk, 1024, 0.01},
                                {Codec::kNone}};
  for (Isa isa : isas()) {
    force_isa(isa);
    for (const CodecParams& p : codecs) {
      std::vector<float> r(n, 0.0f), d(n), x(n);
      std::vector<double> sum_x(n, 0.0), sum_d(n, 0.0), sum_abs(n, 0.0);
      std::vector<uint8_t> out(max_encoded_bytes(p, n));
      for (size_t t = 0; t < steps; ++t) {
        // Gradients that drift: a mean that changes sign, plus noise.
        const float drift = (t / 100) % 2 ? 0.3f : -0.2f;
        for (size_t i = 0; i < n; ++i) x[i] = pool[(t * 7919 + i * 13) % pool.size()] + drift;
        for (size_t i = 0; i < n; ++i) {
          sum_x[i] += x[i];
          sum_abs[i] += std::fabs(x[i]);
        }
        const size_t len = encode(p, x.data(), r.data(), n, nullptr, t % 2 == 1, out.data());
        ASSERT_EQ(decode(out.data(), len, n, d.data()), "");
        for (size_t i = 0; i < n; ++i) {
          sum_d[i] += d[i];
          if (t % 2 == 1) {
            ASSERT_EQ(bits(x[i]), bits(d[i])) << "write-back";
          }
        }
      }
      double err = 0, norm = 0;
      for (size_t i = 0; i < n; ++i) {
        const double e = sum_d[i] + r[i] - sum_x[i];
        ASSERT_LE(std::fabs(e), 1e-5 * sum_abs[i]) << proto::name(p.codec) << " " << i;
        err += e * e;
        norm += sum_x[i] * sum_x[i];
      }
      EXPECT_LE(std::sqrt(err / norm), 1e-5) << proto::name(p.codec) << " " << isa_name(isa);
    }
  }
}

}  // namespace
}  // namespace gsync::reduce
