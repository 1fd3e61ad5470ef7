// SPDX-License-Identifier: Apache-2.0
//
// An op's record from its first arrival to its end (daemon/ops/op.h), in
// process, with real sessions (memfd and eventfds): its states, its
// deadline (the shortest timeout wins), a rank withdrawn, the buffers it
// hands the pipeline, its timeout's words and the event of its end.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "daemon/ops/op.h"
#include "tests/util/sessions.h"

namespace gsync::ops {
namespace {

using std::chrono::milliseconds;

using gsync::test::make_session;

proto::OpShape floats(uint32_t count) {
  proto::OpShape sh;
  sh.opcode = proto::Opcode::kAllreduce;
  sh.dtype = proto::DType::kF32;
  sh.count = count;
  return sh;
}

TEST(Op, GathersWithTheShortestTimeoutThenRuns) {
  const auto t0 = Clock::now();
  Op op({3, 9}, floats(64), /*first=*/1, /*local_size=*/3, /*world=*/0, 1000, t0);
  EXPECT_EQ(op.state(), Op::State::kGathering);
  EXPECT_EQ(op.deadline(), t0 + milliseconds(1000));
  auto s1 = make_session(11, 21), s0 = make_session(10, 20);
  std::vector<float> b1(64), b0(64);
  op.arrive(1, Arrival{s1, 101, b1.data(), {}, 0.5, t0}, 0);  // 0: no timeout of its own
  op.arrive(0, Arrival{s0, 100, b0.data(), {}, 1.5, t0}, 200);
  EXPECT_EQ(op.arrived(), 2);
  EXPECT_TRUE(op.has(0));
  EXPECT_FALSE(op.has(2));
  EXPECT_EQ(op.timeout_ms(), 200u);
  EXPECT_EQ(op.deadline(), t0 + milliseconds(200));
  op.arrive(2, Arrival{make_session(12, 22), 102, b0.data(), {}, 1, t0}, 500);  // longer: no change
  EXPECT_EQ(op.deadline(), t0 + milliseconds(200));

  const auto c = op.contributions();
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].rank, 20);
  EXPECT_EQ(c[0].buf.ptr, reinterpret_cast<uint8_t*>(b0.data()));
  EXPECT_EQ(c[0].buf.bytes, 256u);
  EXPECT_EQ(c[0].buf.arena, 10u);
  EXPECT_EQ(c[0].weight, 1.5);
  EXPECT_EQ(c[1].buf.owner, s1);  // the arena stays mapped while the op uses it

  op.began(7);
  EXPECT_EQ(op.state(), Op::State::kRunning);
  EXPECT_EQ(op.serial(), 7u);
}

TEST(Op, AWithdrawnRankIsLeftOutAndTheFirstMoves) {
  const auto t0 = Clock::now();
  Op op({1, 1}, floats(4), 0, 3, 0, 1000, t0);
  std::vector<float> b(4);
  op.arrive(0, Arrival{make_session(1, 0), 1, b.data(), {}, 1, t0}, 0);
  op.arrive(2, Arrival{make_session(3, 2), 3, b.data(), {}, 1, t0}, 0);
  op.withdraw(1);  // never arrived: nothing changes
  EXPECT_EQ(op.arrived(), 2);
  op.withdraw(0);
  EXPECT_EQ(op.arrived(), 1);
  EXPECT_FALSE(op.has(0));
  EXPECT_EQ(op.first(), 2);
  ASSERT_EQ(op.contributions().size(), 1u);
  EXPECT_EQ(op.contributions()[0].rank, 2);
}

TEST(Op, ItsTimeoutAndItsEndSayWhatHappened) {
  const auto t0 = Clock::now();
  Op op({3, 9}, floats(8), 0, 2, /*world=*/4, 250, t0);
  std::vector<float> b(8);
  op.arrive(1, Arrival{make_session(2, 31), 1, b.data(), {}, 1, t0 + milliseconds(3)}, 0);
  Status st = op.timed_out("j", ": 1 of 2 local ranks arrived");
  EXPECT_EQ(st.code(), GSYNC_ERR_TIMEOUT);
  EXPECT_EQ(st.message(), "job j allreduce key 3 step 9 timed out after 250 ms: 1 of 2 local "
                          "ranks arrived");
  std::vector<RankArrival> buf;
  OpEnd e = op.end("j", st, nullptr, &buf);
  EXPECT_EQ(e.job, "j");
  EXPECT_EQ(e.id.step, 9u);
  EXPECT_EQ(e.status.code(), GSYNC_ERR_TIMEOUT);
  EXPECT_EQ(e.arrived, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_FALSE(e.all_arrived());
  EXPECT_EQ(e.world, 4u);
  EXPECT_EQ(e.started, t0);
  EXPECT_EQ(e.op, &op);
  ASSERT_EQ(e.arrivals.size(), 2u);
  EXPECT_EQ(e.arrivals[0].rank, -1);  // local rank 0 never arrived
  EXPECT_EQ(e.arrivals[1].rank, 31);
  EXPECT_EQ(e.arrivals[1].at, t0 + milliseconds(3));
}

}  // namespace
}  // namespace gsync::ops
