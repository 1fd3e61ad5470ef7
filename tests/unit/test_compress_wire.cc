// SPDX-License-Identifier: Apache-2.0
//
// Bytes on the wire of the compressed schedules (tests/util/compress_sim.h)
// against the same schedules uncompressed, on the hops the codec applies
// to: every write in one rack of 4 with cross_host, the writes between two
// racks of 2 with cross_rack. A tensor of 2^20 + 3 values in chunks of
// 256 KiB, int8 blocks of 1024, top-k 1%, as the daemon would run them.
// Prints the table docs/compression.md ("Where the codecs apply") quotes.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tests/util/compress_sim.h"

namespace gsync::collective {
namespace {

using proto::Codec;
using proto::Hops;

struct Layout {
  std::vector<int> racks;
  Hops hops;
  bool between_racks;  // count only the writes from one rack to another
  const char* name;
};

// The least ratio each codec must reach: about 1/2 for the halves, 1/4
// for int8 (1 byte a value, 4 bytes of scale a block of 1024, the block
// maxima before each symmetric exchange), 1/50 for top-k 1% (8 bytes a
// kept value) where a write carries one host's selection. But top-k
// merges sums exactly (kExact, SparCML): a sum of j hosts' selections has
// up to j% nonzero values, and the final one, up to n%, is what the
// allgather forwards. So only direct and the hier exchange under
// cross_rack carry single selections; for the others the floor is what the
// merging leaves (per value: raw bytes / wire bytes, 4 hosts):
//  - ring (and hier in one rack, a ring): reduce-scatter writes of 1, 2, 3
//    selections per segment, 3 copies of the final sum of 4:
//    4 x 6 / (8 x (1 + 2 + 3 + 3 x 4)%) = 16.7x;
//  - tree (a star of 4): 3 selections up, 3 copies of 4 down: 4 x 6 /
//    (8 x 15%) = 20x;
//  - doubling: round 0 single selections, round 1 sums of 2: 4 x 8 /
//    (8 x 12%) = 33x; between two racks only round 1 crosses: 25x.
// Selections overlap a little, so the measured ratios are slightly higher.
double floor_of(Codec c, Algo a, const Layout& l) {
  switch (c) {
    case Codec::kF16:
    case Codec::kBF16:
      return 1.99;
    case Codec::kInt8:
      return 3.9;
    default:
      break;
  }
  switch (a) {
    case Algo::kDirect:
      return 45;
    case Algo::kHier:
      return l.between_racks ? 45 : 16;
    case Algo::kRing:
      return 16;
    case Algo::kTree:
      return 19;
    case Algo::kDoubling:
      return l.between_racks ? 24 : 32;
  }
  return 45;
}

TEST(CompressSchedule, WireBytesShrinkAsTheCodecSays) {
  const size_t count = (size_t{1} << 20) + 3, per_chunk = 65536;
  const Layout layouts[] = {{{4}, Hops::kCrossHost, false, "4 hosts, cross_host"},
                            {{2, 2}, Hops::kCrossRack, true, "2 racks of 2, cross_rack"}};
  std::printf("%-26s %-6s %-9s %12s %12s %8s\n", "layout", "codec", "algo", "raw bytes",
              "wire bytes", "ratio");
  for (const Layout& l : layouts)
    for (Codec c : {Codec::kF16, Codec::kBF16, Codec::kInt8, Codec::kTopk})
      for (Algo a : {Algo::kRing, Algo::kHier, Algo::kDirect, Algo::kTree, Algo::kDoubling}) {
        reduce::CodecParams p;
        p.codec = c;
        sim::Op k{a, l.racks, p, l.hops, count, per_chunk};
        sim::Cluster cl(k);
        std::vector<std::vector<float>> in(static_cast<size_t>(cl.hosts()),
                                           std::vector<float>(count));
        std::mt19937 rng(3);
        std::normal_distribution<float> g(0, 1);
        for (auto& x : in)
          for (auto& v : x) v = g(rng);
        ASSERT_TRUE(cl.step(in, 3));
        auto counted = [&](int from, int to) {
          return !l.between_racks || cl.parts()[size_t(from)].rack != cl.parts()[size_t(to)].rack;
        };
        uint64_t wire = 0, raw = 0;
        for (const auto& w : cl.wire())
          if (counted(w.from, w.to)) wire += w.bytes;
        for (int h = 0; h < cl.hosts(); h++) {
          Schedule s = build_schedule(a, cl.parts(), h, cl.chunks());
          for (size_t ch = 0; ch < s.chunks.size(); ch++)
            for (const auto& ph : s.chunks[ch])
              for (const auto& t : ph.sends)
                if (counted(h, t.peer)) raw += cl.elems(ch) * sizeof(float);
        }
        ASSERT_GT(wire, 0u);
        double ratio = double(raw) / double(wire);
        std::printf("%-26s %-6s %-9s %12llu %12llu %8.2f\n", l.name, proto::name(c), algo_name(a),
                    static_cast<unsigned long long>(raw), static_cast<unsigned long long>(wire),
                    ratio);
        EXPECT_GE(ratio, floor_of(c, a, l))
            << l.name << " " << proto::name(c) << " " << algo_name(a);
      }
}

}  // namespace
}  // namespace gsync::collective
