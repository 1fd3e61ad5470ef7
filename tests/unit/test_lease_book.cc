// SPDX-License-Identifier: Apache-2.0
//
// The lease ledger (daemon/leases/lease_book.h): ids go out in order, come
// back from a rank that left before its pushes were taken, go out again
// first, and settle exactly once; WAIT while some are out, END once all
// are settled.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "daemon/leases/lease_book.h"
#include "protocol/lease.h"

namespace gsync::leases {
namespace {

uint32_t take(LeaseBook& b, int rank, uint64_t clock, uint64_t epoch = 0, uint64_t n = 4) {
  uint32_t v = 0;
  Status st = b.lease(rank, epoch, n, clock, &v);
  EXPECT_TRUE(st) << st.message();
  return v;
}

TEST(LeaseBook, HandsOutInOrderWaitsHoldsThenEnds) {
  LeaseBook b;
  EXPECT_EQ(take(b, 0, 0), 0u);
  EXPECT_EQ(take(b, 1, 0), 1u);
  EXPECT_EQ(take(b, 0, 1), 2u);
  EXPECT_EQ(take(b, 1, 1), 3u);
  // None free, and batches are out for clock 1: their ranks train it, so
  // this one takes the clock without data.
  EXPECT_EQ(take(b, 2, 1), proto::kLeaseWait);
  // At clock 2 every batch out is for an earlier clock: applied, its
  // settlement on the way; the answer waits for it.
  EXPECT_EQ(take(b, 0, 2), kLeaseHold);
  EXPECT_EQ(b.settle(0, 0), 1u);
  EXPECT_EQ(b.settle(1, 0), 1u);
  EXPECT_EQ(b.settle(0, 1), 1u);
  EXPECT_EQ(take(b, 0, 2), kLeaseHold);  // batch 3 still out
  EXPECT_EQ(b.settle(1, 1), 1u);
  EXPECT_EQ(take(b, 0, 2), proto::kLeaseEnd);
  auto r = b.report();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].settled, 4u);
  EXPECT_EQ(r[0].outstanding, 0u);
  EXPECT_EQ(r[0].reassigned, 0u);
}

TEST(LeaseBook, DroppedLeasesGoOutAgainFirst) {
  LeaseBook b;
  EXPECT_EQ(take(b, 0, 5), 0u);
  EXPECT_EQ(take(b, 1, 5), 1u);
  EXPECT_EQ(take(b, 1, 6), 2u);
  // Rank 1's pushes of clock 5 were taken (they settle later); clock 6's
  // were not: batch 2 goes back, batch 1 stays out.
  EXPECT_EQ(b.drop(1, 6), 1u);
  EXPECT_EQ(take(b, 0, 6), 2u);
  EXPECT_EQ(take(b, 0, 7), 3u);
  EXPECT_EQ(b.settle(1, 5), 1u);  // the in-flight push of the rank that left
  EXPECT_EQ(b.settle(0, 5), 1u);
  EXPECT_EQ(b.settle(0, 6), 1u);
  EXPECT_EQ(b.settle(0, 7), 1u);
  EXPECT_EQ(take(b, 0, 8), proto::kLeaseEnd);
  EXPECT_EQ(b.report()[0].reassigned, 1u);
  EXPECT_EQ(b.report()[0].leased, 5u);
}

TEST(LeaseBook, SettlesOnlyTheClocksLeases) {
  LeaseBook b;
  take(b, 0, 3);
  EXPECT_EQ(b.settle(0, 2), 0u);  // another clock
  EXPECT_EQ(b.settle(1, 3), 0u);  // another rank
  EXPECT_EQ(b.settle(0, 3), 1u);
  EXPECT_EQ(b.settle(0, 3), 0u);  // settled once
}

TEST(LeaseBook, EpochsAreSeparateAndFixTheirSize) {
  LeaseBook b;
  EXPECT_EQ(take(b, 0, 0, /*epoch=*/7, 2), 0u);
  uint32_t v = 0;
  Status st = b.lease(1, 7, 3, 0, &v);
  EXPECT_EQ(st.code(), GSYNC_ERR_MISMATCH);
  EXPECT_NE(st.message().find("begun with 2"), std::string::npos) << st.message();
  EXPECT_EQ(take(b, 1, 0, /*epoch=*/8, 2), 0u);
  EXPECT_EQ(b.lease(0, 9, 0, 0, &v).code(), GSYNC_ERR_INVALID);
  EXPECT_EQ(b.lease(0, 9, proto::kMaxLeaseBatches + 1, 0, &v).code(), GSYNC_ERR_INVALID);
}

TEST(LeaseBook, OpenEpochsAreBounded) {
  LeaseBook b;
  uint32_t v = 0;
  for (uint64_t e = 0; e < proto::kMaxOpenEpochs; e++) ASSERT_TRUE(b.lease(0, e, 2, 0, &v));
  Status st = b.lease(0, proto::kMaxOpenEpochs, 2, 0, &v);
  EXPECT_EQ(st.code(), GSYNC_ERR_INVALID);
  EXPECT_NE(st.message().find("epochs are open"), std::string::npos) << st.message();
}

// Ranks lease, train, die and settle at random; every batch is settled
// exactly once, and the end comes only after all are.
TEST(LeaseBook, RandomDeathsSettleEveryBatchOnce) {
  std::mt19937 rng(7);
  uint64_t reassigned = 0;
  for (int round = 0; round < 200; round++) {
    LeaseBook b;
    const uint64_t n = 1 + rng() % 40;
    const size_t ranks = 1 + rng() % 6;
    std::vector<bool> alive(ranks, true);
    std::vector<uint64_t> clock(ranks, 0);
    std::vector<std::vector<uint32_t>> held(ranks);  // leased for its clock, not pushed
    std::multiset<uint32_t> trained;
    bool ended = false;
    for (int turn = 0; turn < 100000 && !ended; turn++) {
      const size_t r = rng() % ranks;
      if (!alive[r]) continue;
      if (std::count(alive.begin(), alive.end(), true) > 1 && rng() % 30 == 0) {
        alive[r] = false;  // before its clock's pushes begin: they never do
        b.drop(static_cast<int>(r), clock[r]);
        continue;
      }
      if (held[r].empty() || rng() % 3 == 0) {  // leases (maybe a second batch for the clock)
        uint32_t v = 0;
        ASSERT_TRUE(b.lease(static_cast<int>(r), 0, n, clock[r], &v));
        if (v == proto::kLeaseEnd)
          ended = true;
        else if (v == kLeaseHold)
          EXPECT_TRUE(held[r].empty());  // asks again later
        else if (v != proto::kLeaseWait)
          held[r].push_back(v);
        else if (held[r].empty())
          clock[r]++;  // a step without data
        continue;
      }
      // Its pushes of the clock are applied: what it held is trained.
      trained.insert(held[r].begin(), held[r].end());
      EXPECT_EQ(b.settle(static_cast<int>(r), clock[r]), held[r].size());
      held[r].clear();
      clock[r]++;
    }
    ASSERT_TRUE(ended) << "round " << round;
    ASSERT_EQ(trained.size(), n) << "round " << round;
    for (uint32_t id = 0; id < n; id++) EXPECT_EQ(trained.count(id), 1u) << "batch " << id;
    reassigned += b.report()[0].reassigned;
  }
  EXPECT_GT(reassigned, 0u);  // deaths did hand leases back
}

}  // namespace
}  // namespace gsync::leases
