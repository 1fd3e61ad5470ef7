// SPDX-License-Identifier: Apache-2.0
//
// The end of an op as an event (daemon/records/op_end.h) and the
// subscribers below the jobs layer, in process: the daemon's counters and
// latency histogram (op_stats.h), the history ring (op_history.h), the
// straggler books (stragglers.h). The integration tests see the same
// through gsyncctl and the metrics; these pin each subscriber's rule.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "daemon/records/op_end.h"
#include "daemon/records/op_history.h"
#include "daemon/records/op_stats.h"
#include "daemon/records/stragglers.h"

namespace gsync {
namespace {

using std::chrono::milliseconds;

struct Ended {
  std::vector<RankArrival> arrivals;
  pipeline::OpTimes times;
  OpEnd e;
};

// An allreduce of `count` floats by `ranks` local ranks, each `lag_ms`
// behind the one before, that ended 2 ms after the first arrived.
Ended ended(int ranks, uint32_t count, Status st = Status::ok(), double lag_ms = 0) {
  Ended x;
  const auto t0 = Clock::now();
  for (int l = 0; l < ranks; l++)
    x.arrivals.push_back({10 + l, t0 + std::chrono::microseconds(long(1000 * lag_ms * l))});
  x.e.job = "j";
  x.e.id = {7, 3};
  x.e.shape.opcode = proto::Opcode::kAllreduce;
  x.e.shape.dtype = proto::DType::kF32;
  x.e.shape.count = count;
  x.e.status = std::move(st);
  x.e.started = t0;
  x.e.ended = t0 + milliseconds(2);
  x.e.arrivals = x.arrivals;
  x.e.arrived = ranks;
  x.e.local_size = ranks;
  return x;
}

TEST(OpEnds, SubscribersRunInOrderOncePerOp) {
  OpEnds ends;
  std::vector<std::string> calls;
  ends.subscribe("a", [&](const OpEnd& e) { calls.push_back(fmt::format("a{}", e.id.step)); });
  ends.subscribe("b", [&](const OpEnd& e) { calls.push_back(fmt::format("b{}", e.id.step)); });
  Ended x = ended(2, 4);
  ends.publish(x.e);
  x.e.id.step = 4;
  ends.publish(x.e);
  EXPECT_EQ(calls, (std::vector<std::string>{"a3", "b3", "a4", "b4"}));
  EXPECT_EQ(ends.names(), (std::vector<std::string_view>{"a", "b"}));
}

TEST(OpStats, CountsBytesOfEveryLocalRankAndFailuresByCode) {
  GlobalStats g;
  g.count(ended(4, 256).e);  // 1 KiB a rank, 4 ranks
  g.count(ended(4, 256, Status(GSYNC_ERR_TIMEOUT, "late")).e);
  g.count(ended(4, 256, Status(GSYNC_ERR_TIMEOUT, "late")).e);
  EXPECT_EQ(g.ops_completed, 1u);
  EXPECT_EQ(g.ops_failed, 2u);
  EXPECT_EQ(g.bytes_reduced, 4096u);
  EXPECT_EQ(g.failures_by_code[GSYNC_ERR_TIMEOUT], 2u);
  // One job on this host alone: labelled "local", uncompressed.
  ASSERT_EQ(g.by_labels.size(), 1u);
  const auto& [labels, c] = *g.by_labels.begin();
  EXPECT_EQ(labels.algorithm, "local");
  EXPECT_EQ(c.completed, 1u);
  EXPECT_EQ(c.failed, 2u);
  EXPECT_EQ(c.bytes_reduced, 4096u);
  // 2 ms each: the bucket above 1 ms, up to 3 ms.
  const OpLatency& l = g.latency[proto::Opcode::kAllreduce];
  EXPECT_EQ(l.counts[3], 3u);
  EXPECT_NEAR(l.sum_s, 0.006, 1e-9);
}

TEST(OpStats, LabelsOfCrossHostOps) {
  Ended x = ended(1, 16);
  x.e.multi_host = true;
  EXPECT_EQ(op_labels(x.e).algorithm, "none");  // ended before it had a plan
  x.e.times = &x.times;
  x.times.route.algorithm = "ring";
  x.times.route.codec = proto::Codec::kInt8;
  EXPECT_EQ(op_labels(x.e).algorithm, "ring");
  EXPECT_EQ(op_labels(x.e).codec, proto::Codec::kInt8);
  x.e.times = nullptr;
  x.e.shape.opcode = proto::Opcode::kPush;
  EXPECT_EQ(op_labels(x.e).algorithm, "ps");
}

TEST(OpHistory, RecordsArrivedRanksAndReusesItsSlots) {
  OpHistory h(2, true);
  Ended x = ended(3, 8, Status(GSYNC_ERR_RANK_DEAD, "rank 11 died"));
  x.arrivals[1].rank = -1;  // local rank 1 never handed its part in
  x.e.arrived = 2;
  h.record(x.e);
  EXPECT_EQ(h.size(), 1u);
  OpHistory ring(1, true);
  ring.record(x.e);
  OpHistoryEntry& slot = ring.next();  // full: the one slot, as recorded
  EXPECT_EQ(slot.job, "j");
  EXPECT_EQ(slot.code, GSYNC_ERR_RANK_DEAD);
  EXPECT_EQ(slot.error, "rank 11 died");
  ASSERT_EQ(slot.arrivals.size(), 2u);
  EXPECT_EQ(slot.arrivals[0].first, 10);
  EXPECT_EQ(slot.arrivals[1].first, 12);
  EXPECT_TRUE(slot.pipeline.stages.empty());  // it never ran
  // A later op over the same slot: every field replaced.
  Ended y = ended(1, 8);
  y.e.id.step = 9;
  ring.record(y.e);
  const OpHistoryEntry& again = ring.next();
  EXPECT_EQ(again.id.step, 9u);
  EXPECT_EQ(again.code, 0);
  EXPECT_TRUE(again.error.empty());
  EXPECT_EQ(again.arrivals.size(), 1u);

  OpHistory off(4, false);
  off.record(x.e);
  EXPECT_EQ(off.size(), 0u);
}

TEST(StragglerBook, NamesTheRankLastInMostOps) {
  StragglerBook b;
  for (size_t i = 0; i < StragglerBook::kMinOps - 1; i++) b.add(ended(3, 1, {}, 10).arrivals);
  EXPECT_EQ(b.straggler(b.lags()), -1);  // not enough ops yet
  b.add(ended(3, 1, {}, 10).arrivals);
  auto lags = b.lags();
  ASSERT_EQ(lags.size(), 3u);
  EXPECT_EQ(b.straggler(lags), 2);
  EXPECT_NEAR(lags[2].median_s, 0.020, 1e-6);
  EXPECT_NEAR(lags[2].last_share, 1.0, 1e-9);
  EXPECT_NEAR(lags[0].median_s, 0.0, 1e-9);
  // The window keeps the newest ops: once they all arrive together, nobody
  // is behind by more than the warning's lag.
  for (size_t i = 0; i < StragglerBook::kWindow; i++) b.add(ended(3, 1, {}, 0).arrivals);
  EXPECT_EQ(b.ops(), StragglerBook::kWindow);
  EXPECT_EQ(b.seen(), StragglerBook::kMinOps + StragglerBook::kWindow);
  EXPECT_EQ(b.straggler(b.lags()), -1);
}

TEST(StragglerBook, MedianAndP99OverTheWindow) {
  StragglerBook b;
  // Rank 1 behind by 1..100 ms, one op each.
  for (int i = 1; i <= 100; i++) {
    Ended x = ended(2, 1);
    x.arrivals[1].at = x.arrivals[0].at + milliseconds(i);
    b.add(x.arrivals);
  }
  const auto lags = b.lags();
  EXPECT_NEAR(lags[1].median_s, 0.051, 1e-6);  // the 51st of 100, as sorted
  EXPECT_NEAR(lags[1].p99_s, 0.100, 1e-6);
  EXPECT_EQ(b.straggler(lags), 1);
}

}  // namespace
}  // namespace gsync
