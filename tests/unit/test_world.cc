// SPDX-License-Identifier: Apache-2.0
//
// An elastic job's world as one host sees it (daemon/worlds/world.h), in
// process, without a cluster: adopting a world with this host in it, one
// without it, and the job's end below min_hosts; the refusal each state
// gives a rank's submission, with its code; one gsync_world ask per rank;
// the ops of an earlier world kept by serial until they end. Real sessions
// (memfd), so a waiter is what the jobs layer keeps.
#include <gtest/gtest.h>

#include <memory>

#include "daemon/worlds/world.h"
#include "tests/util/sessions.h"

namespace gsync::worlds {
namespace {

using gsync::test::make_session;

cluster::ElasticWorldView view(uint64_t counter, std::vector<cluster::ElasticMember> hosts) {
  cluster::ElasticWorldView w;
  w.epoch = cluster::epoch_of(counter, 0);
  w.hosts = std::move(hosts);
  w.reason = "host 2 joined";
  return w;
}

TEST(World, BeforeAnyWorldARankIsToldToAskForOne) {
  World w("j", 2, 4);
  EXPECT_EQ(w.epoch(), 0u);
  EXPECT_TRUE(w.name().empty());
  EXPECT_FALSE(w.usable());
  Status st = w.refusal(3, 7, 0, 2);
  EXPECT_EQ(st.code(), GSYNC_ERR_WORLD_CHANGED);
  EXPECT_NE(st.message().find("job j key 3 step 7: the elastic job has no world yet"),
            std::string::npos)
      << st.message();
}

TEST(World, AdoptingAWorldWithThisHostNumbersItsRanks) {
  World w("j", 2, 0);
  // Host 0 has 2 ranks, this host (1) has 3: its ranks are 2..4 of 5.
  World::Adopted a = w.adopt(view(1, {{0, 2}, {1, 3}}), /*self=*/1);
  EXPECT_TRUE(a.closed.empty());  // no world before it
  EXPECT_EQ(a.offset, 2);
  EXPECT_EQ(a.world_size, 5);
  EXPECT_EQ(a.ops_end.code(), GSYNC_ERR_WORLD_CHANGED);
  EXPECT_TRUE(w.usable());
  EXPECT_EQ(w.hosts(), 2);
  EXPECT_EQ(w.name(), cluster::ElasticBook::world_name("j", w.epoch()));
  // A rank that saw this world submits; one that saw none is refused,
  // with the world's size in the words.
  EXPECT_TRUE(w.refusal(1, 1, w.epoch(), 5).is_ok());
  Status st = w.refusal(1, 1, 0, 5);
  EXPECT_EQ(st.code(), GSYNC_ERR_WORLD_CHANGED);
  EXPECT_NE(st.message().find("2 hosts, 5 ranks"), std::string::npos) << st.message();

  // The next world, without this host: the one before is closed.
  const std::string first = w.name();
  a = w.adopt(view(2, {{0, 2}, {3, 1}}), 1);
  EXPECT_EQ(a.closed, first);
  EXPECT_EQ(a.offset, -1);
  EXPECT_FALSE(w.in_world());
  EXPECT_FALSE(w.usable());
  st = w.refusal(1, 2, w.epoch(), 3);
  EXPECT_NE(st.message().find("this host is not in the job's world"), std::string::npos)
      << st.message();
  const std::vector<std::string> names = w.take_names();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], first);
  EXPECT_EQ(names[1], w.name());
}

TEST(World, AJobBelowMinHostsEndsAndEverySubmissionFailsWithIt) {
  World w("j", 2, 0);
  w.adopt(view(1, {{0, 1}, {1, 1}}), 1);
  cluster::ElasticWorldView end = view(2, {{1, 1}});
  end.failed = true;
  end.reason = "host 0 lost; 1 host left, min_hosts 2";
  World::Adopted a = w.adopt(end, 1);
  EXPECT_TRUE(w.ended());
  EXPECT_EQ(a.ops_end.code(), GSYNC_ERR_HOST_LOST);
  EXPECT_NE(a.ops_end.message().find("the elastic job ended: host 0 lost"), std::string::npos);
  Status st = w.refusal(5, 5, w.epoch(), 1);  // even a rank that saw the last world
  EXPECT_EQ(st.code(), GSYNC_ERR_HOST_LOST);
  EXPECT_NE(st.message().find("job j key 5 step 5: job j: the elastic job ended"),
            std::string::npos)
      << st.message();
}

TEST(World, OneAskPerRankAndALeavingRankDropsItsAsk) {
  World w("j", 1, 0);
  auto a = make_session(1, 0), b = make_session(2, 1);
  EXPECT_FALSE(w.wait(a, 10).has_value());
  EXPECT_FALSE(w.wait(b, 20).has_value());
  EXPECT_EQ(w.wait(a, 11), std::optional<uint64_t>(10));  // asked again: the first ends
  EXPECT_EQ(w.waiting(), 2u);
  w.rank_left(nullptr, *b, 0, false);
  auto left = w.take_waiters();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].session, a);
  EXPECT_EQ(left[0].tag, 11u);
  EXPECT_EQ(w.waiting(), 0u);
}

TEST(World, AHostAloneFormsTheNextEpochAtOnce) {
  World w("j", 1, 0);
  cluster::ElasticWorldView first = w.alone(3);
  w.adopt(first, 0);
  cluster::ElasticWorldView next = w.alone(3);
  EXPECT_EQ(cluster::epoch_counter(next.epoch), cluster::epoch_counter(first.epoch) + 1);
  ASSERT_EQ(next.hosts.size(), 1u);
  EXPECT_EQ(next.world_size(), 3);
}

TEST(World, OpsOfAnEarlierWorldAreKeptBySerialUntilTheyEnd) {
  World w("j", 1, 0);
  proto::OpShape sh;
  sh.opcode = proto::Opcode::kAllreduce;
  sh.dtype = proto::DType::kF32;
  sh.count = 4;
  auto op = std::make_unique<ops::Op>(proto::OpId{1, 2}, sh, 0, 1, 5, 1000, Clock::now());
  op->began(77);
  w.keep_crossing(std::move(op));
  EXPECT_TRUE(w.crossing());
  EXPECT_EQ(w.take_crossing(78), nullptr);
  auto back = w.take_crossing(77);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->id().step, 2u);
  EXPECT_FALSE(w.crossing());
}

}  // namespace
}  // namespace gsync::worlds
