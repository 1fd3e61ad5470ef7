// SPDX-License-Identifier: Apache-2.0
//
// A parameter-server transfer's pieces (daemon/ps/pieces.h): writes to a
// peer may land in any order, so a push or a reply is complete when every
// piece is in, whatever the order, and a bsp server may use only the bytes
// in from the start without a gap.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "daemon/ps/pieces.h"

namespace gsync::ps {
namespace {

constexpr uint64_t C = kPsChunkBytes;

TEST(PsPieces, AnyOrderCompletesAndThePrefixHasNoGap) {
  const uint64_t bytes = 5 * C + 123;  // 6 pieces, the last short
  std::vector<uint64_t> order(6);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(7);
  for (int round = 0; round < 50; round++) {
    std::shuffle(order.begin(), order.end(), rng);
    Pieces p;
    p.reset(bytes);
    std::vector<bool> in(6, false);
    for (size_t i = 0; i < order.size(); i++) {
      EXPECT_FALSE(p.complete());
      const uint64_t at = order[i] * C, len = std::min(C, bytes - at);
      ASSERT_TRUE(p.land(at, len)) << "piece " << order[i];
      in[order[i]] = true;
      uint64_t want = 0;
      while (want < 6 && in[want]) want++;
      EXPECT_EQ(p.prefix(), std::min(bytes, want * C));
    }
    EXPECT_TRUE(p.complete());
    EXPECT_EQ(p.prefix(), bytes);
  }
}

TEST(PsPieces, RefusesWhatIsNotWholePiecesStillToCome) {
  Pieces p;
  p.reset(3 * C);
  EXPECT_FALSE(p.land(1, C));           // not at a piece's start
  EXPECT_FALSE(p.land(0, C - 1));       // not a whole piece
  EXPECT_FALSE(p.land(2 * C, C + 1));   // past the end
  EXPECT_FALSE(p.land(3 * C, 0));       // empty
  EXPECT_FALSE(p.land(~0ull - C + 1, C));  // offsets that wrap
  EXPECT_TRUE(p.land(C, C));
  EXPECT_FALSE(p.land(C, C));           // twice
  EXPECT_FALSE(p.land(0, 2 * C));       // overlaps what is in
  EXPECT_EQ(p.prefix(), 0u);
  EXPECT_TRUE(p.land(0, C));
  EXPECT_EQ(p.prefix(), 2 * C);
  EXPECT_FALSE(p.complete());
  EXPECT_TRUE(p.land(2 * C, C));
  EXPECT_TRUE(p.complete());
}

TEST(PsPieces, OneWriteMayCarrySeveralPiecesAndAnEmptyTransferIsComplete) {
  Pieces p;
  p.reset(2 * C + 10);
  EXPECT_TRUE(p.land(0, 2 * C + 10));  // a host's own shard, copied at once
  EXPECT_TRUE(p.complete());
  p.reset(0);
  EXPECT_TRUE(p.complete());
  EXPECT_EQ(p.prefix(), 0u);
}

}  // namespace
}  // namespace gsync::ps
