// SPDX-License-Identifier: Apache-2.0
//
// The rule by which an elastic job's worlds are formed (daemon/cluster/
// elastic.h): who leads, what the leader proposes as hosts join, leave and
// exceed max_hosts, when a job waits or ends below min_hosts, and that
// epochs only grow, two leaders never giving one epoch to two worlds.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "daemon/cluster/elastic.h"
#include "protocol/world.h"

namespace gsync::cluster {
namespace {

std::string name(int h) { return fmt::format("h{}", h + 1); }

struct Cluster {
  std::set<int> down;
  bool up(int h) const { return !down.count(h); }
};

std::vector<int> hosts_of(const ElasticWorldView& w) {
  std::vector<int> out;
  for (const auto& h : w.hosts) out.push_back(h.host);
  return out;
}

// Host `self`'s book with its own ranks and the others that joined.
ElasticBook book_of(int self, const std::vector<std::pair<int, int>>& joined, int min, int max,
                    int local = 1) {
  ElasticBook b(self);
  ElasticJobState& j = b.job("j");
  j.min_hosts = min;
  j.max_hosts = max;
  j.local_size = local;
  for (auto [h, n] : joined) j.joined[h] = n;
  return b;
}

TEST(ElasticBook, TheLowestHostFormsTheFirstWorldOnceMinHostsJoined) {
  Cluster c;
  auto up = [&](int h) { return c.up(h); };
  // Host 1 of three, min 3: only two there; it is not the lowest anyway.
  ElasticBook b1 = book_of(1, {{0, 2}}, 3, 0);
  EXPECT_EQ(b1.leader(*b1.find("j"), up), 0);
  EXPECT_FALSE(b1.propose("j", up, name));
  ElasticBook b0 = book_of(0, {{1, 1}}, 3, 0, 2);
  EXPECT_FALSE(b0.propose("j", up, name)) << "two of min_hosts 3: the first world waits";
  b0.job("j").joined[2] = 1;
  auto w = b0.propose("j", up, name);
  ASSERT_TRUE(w);
  EXPECT_EQ(hosts_of(*w), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(w->world_size(), 4);
  EXPECT_EQ(w->offset_of(0), 0);
  EXPECT_EQ(w->offset_of(1), 2);
  EXPECT_EQ(w->offset_of(2), 3);
  EXPECT_EQ(w->epoch, epoch_of(1, 0));
  EXPECT_EQ(w->reason, "formed on h1, h2, h3");
  EXPECT_TRUE(b0.adopt("j", *w));
  EXPECT_FALSE(b0.propose("j", up, name)) << "nothing changed";
}

TEST(ElasticBook, AHostLostShrinksTheWorldAndItsReturnGrowsIt) {
  Cluster c;
  auto up = [&](int h) { return c.up(h); };
  ElasticBook b = book_of(0, {{1, 1}, {2, 1}, {3, 1}}, 2, 4);
  auto w1 = b.propose("j", up, name);
  ASSERT_TRUE(w1);
  ASSERT_TRUE(b.adopt("j", *w1));
  c.down.insert(3);
  EXPECT_EQ(b.host_gone(3), std::vector<std::string>{"j"});
  auto w2 = b.propose("j", up, name);
  ASSERT_TRUE(w2);
  EXPECT_EQ(hosts_of(*w2), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(w2->reason, "h4 left");
  EXPECT_GT(w2->epoch, w1->epoch);
  ASSERT_TRUE(b.adopt("j", *w2));
  c.down.clear();
  b.job("j").joined[3] = 1;
  auto w3 = b.propose("j", up, name);
  ASSERT_TRUE(w3);
  EXPECT_EQ(hosts_of(*w3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(w3->reason, "h4 joined");
  EXPECT_GT(w3->epoch, w2->epoch);
  EXPECT_FALSE(b.adopt("j", *w2)) << "an older world is stale";
}

TEST(ElasticBook, WhenTheLeaderGoesTheNextLowestLeadsAndItsEpochIsLarger) {
  Cluster c;
  auto up = [&](int h) { return c.up(h); };
  ElasticBook b0 = book_of(0, {{1, 1}, {2, 1}}, 1, 0);
  ElasticBook b1 = book_of(1, {{0, 1}, {2, 1}}, 1, 0);
  auto w = b0.propose("j", up, name);
  ASSERT_TRUE(w);
  ASSERT_TRUE(b1.adopt("j", *w));
  EXPECT_FALSE(b1.propose("j", up, name)) << "host 0 leads while it is there";
  c.down.insert(0);
  b1.host_gone(0);
  EXPECT_EQ(b1.leader(*b1.find("j"), up), 1);
  auto next = b1.propose("j", up, name);
  ASSERT_TRUE(next);
  EXPECT_EQ(hosts_of(*next), (std::vector<int>{1, 2}));
  EXPECT_EQ(next->epoch, epoch_of(2, 1));
  // Had host 0 sent a second world to some hosts only before it died, that
  // epoch (2, leader 0) is below host 1's (2, leader 1): the hosts that saw
  // it still take host 1's.
  EXPECT_LT(epoch_of(2, 0), next->epoch);
}

TEST(ElasticBook, MaxHostsKeepsTheRunningHostsAndAdmitsOthersAsRoomFrees) {
  Cluster c;
  auto up = [&](int h) { return c.up(h); };
  ElasticBook b = book_of(1, {{2, 1}, {3, 1}}, 1, 2);
  auto w = b.propose("j", up, name);
  ASSERT_TRUE(w);
  EXPECT_EQ(hosts_of(*w), (std::vector<int>{1, 2}));
  ASSERT_TRUE(b.adopt("j", *w));
  // Host 0 joins late: the world is full, and the lowest running host
  // still leads; nobody is pushed out.
  b.job("j").joined[0] = 1;
  EXPECT_EQ(b.leader(*b.find("j"), up), 1);
  EXPECT_FALSE(b.propose("j", up, name));
  // Host 2 goes: host 0 takes the free place (its index puts it first).
  c.down.insert(2);
  b.host_gone(2);
  auto w2 = b.propose("j", up, name);
  ASSERT_TRUE(w2);
  EXPECT_EQ(hosts_of(*w2), (std::vector<int>{0, 1}));
  EXPECT_EQ(w2->reason, "h3 left and h1 joined");
}

TEST(ElasticBook, FewerHostsThanMinHostsEndTheJobForGood) {
  Cluster c;
  auto up = [&](int h) { return c.up(h); };
  ElasticBook b = book_of(0, {{1, 1}, {2, 1}}, 3, 0);
  auto w = b.propose("j", up, name);
  ASSERT_TRUE(w);
  ASSERT_TRUE(b.adopt("j", *w));
  c.down.insert(2);
  b.host_gone(2);
  auto end = b.propose("j", up, name);
  ASSERT_TRUE(end);
  EXPECT_TRUE(end->failed);
  EXPECT_TRUE(end->hosts.empty());
  EXPECT_EQ(end->reason, "h3 left: only 2 hosts are left (h1, h2), below the job's min_hosts 3");
  ASSERT_TRUE(b.adopt("j", *end));
  c.down.clear();
  b.job("j").joined[2] = 1;
  EXPECT_FALSE(b.propose("j", up, name)) << "an ended job stays ended";
  ElasticWorldView later = *w;
  later.epoch = epoch_of(9, 0);
  EXPECT_FALSE(b.adopt("j", later));
}

TEST(ElasticBook, AHostWithoutItsRanksNeitherLeadsNorCounts) {
  Cluster c;
  auto up = [&](int h) { return c.up(h); };
  ElasticBook b = book_of(0, {{1, 1}, {2, 1}}, 1, 0, 0);
  EXPECT_EQ(b.leader(*b.find("j"), up), 1);
  EXPECT_FALSE(b.propose("j", up, name));
}

TEST(ElasticBook, WorldNamesAndTheWorldText) {
  EXPECT_EQ(ElasticBook::world_name("train", epoch_of(3, 2)), "train#3002");
  std::string job;
  uint64_t epoch = 0;
  ASSERT_TRUE(ElasticBook::parse_world_name("a#b#3002", &job, &epoch));
  EXPECT_EQ(job, "a#b");
  EXPECT_EQ(epoch, epoch_of(3, 2));
  for (const char* bad :
       {"train", "train#", "#3002", "train#0", "train#30g2", "train#3002a0000000000000"})
    EXPECT_FALSE(ElasticBook::parse_world_name(bad, &job, &epoch)) << bad;
  proto::WorldView w{epoch_of(3, 2), 6, 3, 1, 2, 3}, back;
  const std::string text = proto::to_text(w);
  EXPECT_EQ(text, "epoch 12290 world 6 rank 3 local 1 of 2 hosts 3");
  ASSERT_TRUE(proto::world_from_text(text, &back));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.epoch, w.epoch);
  EXPECT_FALSE(proto::world_from_text(text + " and more", &back));
  EXPECT_FALSE(proto::world_from_text("epoch 1 world 2 rank 2 local 0 of 1 hosts 1", &back));
}

TEST(ElasticMessages, DecodeRefusesWhatNoLeaderSends) {
  ElasticWorld m;
  m.epoch = epoch_of(1, 0);
  set_field(m.job, sizeof m.job, "j");
  std::vector<ElasticMember> ok = {{0, 1}, {2, 3}};
  ElasticWorld out;
  std::vector<ElasticMember> hosts;
  EXPECT_TRUE(decode_elastic_world(encode_elastic_world(m, ok), &out, &hosts));
  EXPECT_EQ(hosts.size(), 2u);
  EXPECT_FALSE(decode_elastic_world(encode_elastic_world(m, {{2, 1}, {0, 1}}), &out, &hosts))
      << "out of order";
  EXPECT_FALSE(decode_elastic_world(encode_elastic_world(m, {{0, 0}}), &out, &hosts))
      << "a host without ranks";
  EXPECT_FALSE(decode_elastic_world(encode_elastic_world(m, {}), &out, &hosts))
      << "no hosts, not failed";
  std::string cut = encode_elastic_world(m, ok);
  cut.pop_back();
  EXPECT_FALSE(decode_elastic_world(cut, &out, &hosts));
  m.epoch = 0;
  EXPECT_FALSE(decode_elastic_world(encode_elastic_world(m, ok), &out, &hosts));
  ElasticJoin j;
  EXPECT_TRUE(decode_elastic_join(encode_elastic_join("j", 2, 2, 4), &j));
  EXPECT_FALSE(decode_elastic_join(encode_elastic_join("j", 2, 0, 4), &j)) << "min_hosts 0";
  EXPECT_FALSE(decode_elastic_join(encode_elastic_join("j", 2, 3, 2), &j)) << "max below min";
}

}  // namespace
}  // namespace gsync::cluster
