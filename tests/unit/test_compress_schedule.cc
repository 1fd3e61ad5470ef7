// SPDX-License-Identifier: Apache-2.0
//
// Compressed schedules (compress_schedule.h) of every algorithm, run
// against each other in one process through the phase pack/unpack the
// engine uses (pack.h; the cluster is tests/util/compress_sim.h). For every
// algorithm, codec, place the codec applies (hops), rack layout and odd
// tensor size: every host ends with the same bits; the result is close to
// the sum; over many steps the error buffers hold exactly what the
// encodings dropped; only the hops named are packed; and the bytes on the
// wire shrink as the codec says.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/util/compress_sim.h"

namespace gsync::collective {
namespace {

using proto::Codec;
using proto::Hops;
using sim::Cluster;
using sim::Op;

const Algo kAlgos[] = {Algo::kRing, Algo::kHier, Algo::kDirect, Algo::kTree, Algo::kDoubling};
const Codec kCodecs[] = {Codec::kF16, Codec::kBF16, Codec::kInt8, Codec::kTopk};
const Hops kHops[] = {Hops::kCrossRack, Hops::kCrossHost, Hops::kAll};
// 2, 3, 4 hosts in one rack; two racks, equal and not; three racks.
const std::vector<std::vector<int>> kShapes = {{2},    {3},    {4},    {1, 1},
                                               {2, 2}, {1, 2}, {2, 3}, {1, 2, 3}};
struct Size {
  size_t count, per_chunk;
};
// Odd counts, chunks that do not divide them, int8 blocks (256) that do
// not divide the chunks.
const Size kSizes[] = {{1, 1}, {63, 20}, {1000, 300}, {100003, 4000}};

reduce::CodecParams params_of(Codec c, uint32_t block = 256) {
  reduce::CodecParams p;
  p.codec = c;
  p.block = block;
  return p;
}

std::string describe(const Op& k) {
  std::ostringstream o;
  o << algo_name(k.algo) << " racks {";
  for (size_t i = 0; i < k.racks.size(); i++) o << (i ? "," : "") << k.racks[i];
  o << "} " << proto::name(k.params.codec) << " " << proto::name(k.hops) << ", " << k.count
    << " values in chunks of " << k.per_chunk << ", root " << k.root;
  return o.str();
}

int hosts_of(const std::vector<int>& racks) {
  int n = 0;
  for (int r : racks) n += r;
  return n;
}

// Gaussian gradients, one tensor per host; zero_fraction of them replaced
// by zeros of either sign.
std::vector<std::vector<float>> gradients(int hosts, size_t count, unsigned seed,
                                          double zero_fraction = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<float>> in(static_cast<size_t>(hosts), std::vector<float>(count));
  for (auto& x : in)
    for (auto& v : x) {
      v = g(rng);
      if (u(rng) < zero_fraction) v = v < 0 ? -0.0f : 0.0f;
    }
  return in;
}

// L2 error of out against the exact sum of in, relative to the inputs'
// L2 norm (all hosts' together): an encoding errs in proportion to what it
// encodes, not to the sum, which for a few values can cancel to nearly
// zero. For many gaussian values the two norms are the same.
double relative_error(const std::vector<float>& out, const std::vector<std::vector<float>>& in) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < out.size(); i++) {
    double sum = 0;
    for (const auto& x : in) sum += x[i], norm += double(x[i]) * x[i];
    err += (out[i] - sum) * (out[i] - sum);
  }
  return std::sqrt(err / norm);
}

// Every host's data has host 0's bits.
void expect_same_bits(const Cluster& cl, const std::string& what) {
  const auto& first = cl.data(0);
  for (int h = 1; h < cl.hosts(); h++) {
    const auto& mine = cl.data(h);
    if (std::memcmp(mine.data(), first.data(), first.size() * sizeof(float)) == 0) continue;
    size_t i = 0;
    while (std::memcmp(&mine[i], &first[i], sizeof(float)) == 0) i++;
    ADD_FAILURE() << what << ": host " << h << " differs from host 0 at element " << i << " ("
                  << mine[i] << " vs " << first[i] << ")";
    return;
  }
}

// The roots a tree is tried with: the first and the last host.
std::vector<int> roots(Algo a, int n) {
  return a == Algo::kTree ? std::vector<int>{0, n - 1} : std::vector<int>{0};
}

// The L2 error of one step from zero error buffers, measured over the
// whole matrix below: fp16 4.0e-4 (1.0e-3 for a single value), bf16 3.3e-3
// (7.1e-3), int8 1.35e-2 (0.7% for a single value). Each value is rounded
// once per lossy hop on its way into the sum (up to n - 1 partial sums in
// a ring) and once more as the final value, each rounding of relative size
// up to 2^-11 (fp16), 2^-8 (bf16) or a block's absmax / 254 (int8, a
// gaussian block: 0.6-0.8% rms alone, more with the larger maxima that
// hosts share; docs/compression.md): a few times the one-rounding error.
// The bounds leave 1.4x (bf16, one value) to 5x.
double error_bound(Codec c) {
  switch (c) {
    case Codec::kF16:
      return 2e-3;
    case Codec::kBF16:
      return 1e-2;
    case Codec::kInt8:
      return 3e-2;
    default:
      return INFINITY;  // top-k: error feedback carries what it drops (below)
  }
}

class CompressedSchedule : public ::testing::TestWithParam<std::tuple<Algo, Codec, Hops>> {};

TEST_P(CompressedSchedule, EveryHostEndsWithTheSameBitsCloseToTheSum) {
  auto [algo, codec, hops] = GetParam();
  unsigned seed = 1;
  for (const auto& shape : kShapes)
    for (const Size& size : kSizes)
      for (int root : roots(algo, hosts_of(shape))) {
        Op k{algo, shape, params_of(codec), hops, size.count, size.per_chunk, root};
        Cluster cl(k);
        auto in = gradients(cl.hosts(), k.count, ++seed);
        ASSERT_TRUE(cl.step(in, seed)) << describe(k);
        expect_same_bits(cl, describe(k));
        EXPECT_LE(relative_error(cl.data(0), in), error_bound(codec)) << describe(k);
      }
}

// Sparse gradients (embeddings, ReLU): most values are zeros of either
// sign, so top-k keeps zeros. A kept -0.0 would stay -0.0 on the host that
// forwards a sum exactly and decode as +0.0 at its receivers; none is
// kept, because every selection adds an error buffer (from +0.0) first.
TEST_P(CompressedSchedule, SignedZerosEndTheSameEverywhere) {
  auto [algo, codec, hops] = GetParam();
  unsigned seed = 100;
  for (const auto& shape : kShapes)
    for (int root : roots(algo, hosts_of(shape))) {
      Op k{algo, shape, params_of(codec), hops, 1000, 300, root};
      Cluster cl(k);
      ++seed;
      ASSERT_TRUE(cl.step(gradients(cl.hosts(), k.count, seed, 0.998), seed)) << describe(k);
      expect_same_bits(cl, describe(k));
    }
}

// Error feedback: every value an encoding drops is kept in an error buffer
// and added to what that buffer's owner sends next, and a value several
// hosts hold is re-encoded with its error kept by one of them only. So
// over T steps, sum of the outputs + every host's error buffers = sum of
// the inputs, up to the fp32 rounding of the folds and of v = x + residual
// (measured: at most 4e-8 of the sum of |x| per element; the bound is
// 1e-6; with the error of the shared encodings dropped it is 5e-5 to 3e-3).
TEST_P(CompressedSchedule, ErrorFeedbackConservesTheSum) {
  auto [algo, codec, hops] = GetParam();
  const int steps = 50;
  for (const auto& shape :
       std::vector<std::vector<int>>{{3}, {4}, {2, 2}, {1, 2}, {2, 3}, {1, 2, 3}})
    for (int root : roots(algo, hosts_of(shape))) {
      Op k{algo, shape, params_of(codec), hops, 1000, 300, root};
      Cluster cl(k);
      std::vector<double> out(k.count), in(k.count), scale(k.count);
      for (int t = 0; t < steps; t++) {
        auto x = gradients(cl.hosts(), k.count, 7000 + unsigned(t));
        ASSERT_TRUE(cl.step(x, unsigned(t))) << describe(k);
        expect_same_bits(cl, describe(k) + ", step " + std::to_string(t));
        for (size_t i = 0; i < k.count; i++) {
          out[i] += cl.data(0)[i];
          for (const auto& v : x) in[i] += v[i], scale[i] += std::fabs(v[i]);
        }
      }
      double worst = 0;
      for (size_t i = 0; i < k.count; i++) {
        double held = out[i];
        for (int h = 0; h < cl.hosts(); h++)
          for (int e = 0; e < cl.schedule(h).residuals; e++) held += cl.residual(h, e, i);
        worst = std::max(worst, std::fabs(held - in[i]) / scale[i]);
      }
      EXPECT_LE(worst, 1e-6) << describe(k);
    }
}

// The bits every host ends with depend on this step's inputs and on error
// buffers that each host folds into its own contribution only; never on
// two hosts' buffers holding the same values. A host that starts over (its
// error buffers zero, the others' not) still agrees with the others.
TEST_P(CompressedSchedule, HostsAgreeWhenOneStartsOver) {
  auto [algo, codec, hops] = GetParam();
  for (const auto& shape : std::vector<std::vector<int>>{{3}, {4}, {2, 2}, {1, 2}, {2, 3}})
    for (int root : roots(algo, hosts_of(shape)))
      for (int h = 0; h < hosts_of(shape); h++) {
        Op k{algo, shape, params_of(codec), hops, 63, 20, root};
        Cluster cl(k);
        for (unsigned t = 0; t < 4; t++) {
          if (t == 2) cl.forget(h);
          ASSERT_TRUE(cl.step(gradients(cl.hosts(), k.count, 300 + t), t)) << describe(k);
          expect_same_bits(cl, describe(k) + ", host " + std::to_string(h) + " forgot, step " +
                                   std::to_string(t));
        }
      }
}

INSTANTIATE_TEST_SUITE_P(Everything, CompressedSchedule,
                         ::testing::Combine(::testing::ValuesIn(kAlgos),
                                            ::testing::ValuesIn(kCodecs),
                                            ::testing::ValuesIn(kHops)),
                         [](const auto& info) {
                           return std::string(algo_name(std::get<0>(info.param))) + "_" +
                                  proto::name(std::get<1>(info.param)) + "_" +
                                  proto::name(std::get<2>(info.param));
                         });

bool same(const Phase& a, const Phase& b) {
  auto key = [](const std::vector<Transfer>& ts) {
    std::vector<std::tuple<int, Xfer, uint8_t>> out;
    for (const auto& t : ts) out.emplace_back(t.peer, t.kind, t.slot);
    return out;
  };
  return key(a.sends) == key(b.sends) && key(a.recvs) == key(b.recvs) && a.fold == b.fold &&
         a.step == b.step && a.packed == b.packed && a.send == b.send && a.residual == b.residual &&
         a.write_back == b.write_back && a.symmetric == b.symmetric && a.select == b.select &&
         a.shared_scale == b.shared_scale && a.shared == b.shared && a.feedback == b.feedback;
}

bool same(const Schedule& a, const Schedule& b) {
  if (a.algo != b.algo || a.self != b.self || a.slots != b.slots || a.residuals != b.residuals ||
      a.copy_slot != b.copy_slot || a.chunks.size() != b.chunks.size())
    return false;
  for (size_t c = 0; c < a.chunks.size(); c++) {
    if (a.chunks[c].size() != b.chunks[c].size()) return false;
    for (size_t i = 0; i < a.chunks[c].size(); i++)
      if (!same(a.chunks[c][i], b.chunks[c][i])) return false;
  }
  return true;
}

// No codec: the schedule as build_schedule made it. A codec for the hops
// between racks, in one rack and not hier: nothing packed either.
TEST(CompressSchedule, NoCodecOrNoHopsToPackChangesNothing) {
  for (Algo a : kAlgos)
    for (const auto& shape : kShapes) {
      auto parts = sim::racks(shape);
      for (int h = 0; h < int(parts.size()); h++) {
        const Schedule plain = build_schedule(a, parts, h, 7);
        for (Hops hops : kHops) {
          Schedule s = plain;
          compress_schedule(parts, Codec::kNone, hops, &s);
          EXPECT_TRUE(same(s, plain)) << algo_name(a) << " host " << h << " " << proto::name(hops);
        }
        if (shape.size() > 1) continue;
        for (Codec c : kCodecs) {
          Schedule s = plain;
          compress_schedule(parts, c, Hops::kCrossRack, &s);
          EXPECT_TRUE(same(s, plain)) << algo_name(a) << " host " << h << " " << proto::name(c);
        }
      }
    }
}

// Which writes carry encodings: with cross_rack, in hier only the exchange
// between the racks (and int8's maxima before it), every write inside a
// rack raw; with cross_host, every write, each smaller than raw; any other
// algorithm across racks packs every write whatever hops says.
TEST(CompressSchedule, CrossRackPacksOnlyTheHopsBetweenRacks) {
  for (const auto& shape : std::vector<std::vector<int>>{{2, 2}, {1, 2}, {2, 3}, {1, 2, 3}, {3, 3}})
    for (Codec c : kCodecs)
      for (Algo a : kAlgos)
        for (Hops hops : {Hops::kCrossRack, Hops::kCrossHost}) {
          Op k{a, shape, params_of(c), hops, 1000, 300};
          Cluster cl(k);
          ASSERT_TRUE(cl.step(gradients(cl.hosts(), k.count, 5), 5)) << describe(k);
          size_t packed = 0, raw = 0;
          for (const auto& w : cl.wire()) {
            bool cross = cl.parts()[size_t(w.from)].rack != cl.parts()[size_t(w.to)].rack;
            bool expect_packed = cross || hops != Hops::kCrossRack || a != Algo::kHier;
            uint64_t raw_bytes = cl.elems(w.chunk) * sizeof(float);
            ASSERT_EQ(w.packed, expect_packed) << describe(k) << ": " << w.from << " -> " << w.to;
            (w.packed ? packed : raw)++;
            if (w.packed)
              EXPECT_LT(w.bytes, raw_bytes) << describe(k) << ": " << w.from << " -> " << w.to;
            else
              EXPECT_EQ(w.bytes, raw_bytes) << describe(k) << ": " << w.from << " -> " << w.to;
          }
          EXPECT_GT(packed, 0u) << describe(k);
          if (a == Algo::kHier && hops == Hops::kCrossRack) {
            EXPECT_GT(raw, 0u) << describe(k) << ": the writes inside the racks stay raw";
          }
        }
}

}  // namespace
}  // namespace gsync::collective
