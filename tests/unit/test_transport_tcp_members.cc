// SPDX-License-Identifier: Apache-2.0
//
// The TCP provider's hosts table changing while it runs (set_peer,
// drop_peer: membership on etcd, docs/membership.md), with real contexts on
// loopback: a host that joins is linked, one that leaves is dropped and not
// reconnected to, one that comes back (perhaps at a new port) is linked again,
// and a connection from an index this context has no host for is refused,
// then let in once the host is known.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tests/util/transport_harness.h"

namespace gsync::transport {
namespace {

using testing::Node;

class Members : public testing::Nodes {
 public:
  explicit Members(int n) : Nodes(n, 5000, 2), ports_(testing::free_ports(n + 1)) {
    base_.identity = {"test", 7, "build-1"};
    base_.cluster_key = testing::test_key();
    base_.streams = 2;
    base_.heartbeat_ms = 100;
    base_.peer_timeout_ms = 10000;
    base_.reconnect_min_ms = 20;
    base_.reconnect_max_ms = 200;
  }
  PeerInfo host(int i, int port_slot = -1) const {
    return {fmt::format("h{}", i), "127.0.0.1", ports_[size_t(port_slot < 0 ? i : port_slot)],
            ""};
  }
  // Starts host i knowing only the hosts in `known` (others: empty entries).
  Node& start(int i, const std::vector<int>& known, int table, int port_slot = -1) {
    ContextOptions o = base_;
    o.self = i;
    o.hosts.assign(size_t(table), PeerInfo{});
    for (int k : known) o.hosts[size_t(k)] = host(k);
    o.hosts[size_t(i)] = host(i, port_slot);
    return start_tcp(i, o);
  }

 private:
  ContextOptions base_;
  std::vector<uint16_t> ports_;
};

TEST(TcpMembers, AHostThatJoinsIsLinkedAndTheTableGrows) {
  Members m(3);
  m.start(0, {1}, 2);
  m.start(1, {0}, 2);
  m.start(2, {0, 1}, 3);
  ASSERT_TRUE(m.pump([&] { return m[0].ctx->peer_up(1); }));
  m.idle(100);
  EXPECT_FALSE(m[2].ctx->peer_up(0));  // 0 and 1 do not know 2 yet
  EXPECT_EQ(m[0].ctx->size(), 2);
  ASSERT_TRUE(m[0].ctx->set_peer(2, m.host(2)));
  ASSERT_TRUE(m[1].ctx->set_peer(2, m.host(2)));
  EXPECT_EQ(m[0].ctx->size(), 3);
  ASSERT_TRUE(m.pump([&] { return m.all_up(); }));
  // The same host again changes nothing: no second link.
  ASSERT_TRUE(m[0].ctx->set_peer(2, m.host(2)));
  m.idle(100);
  EXPECT_EQ(m[0].ctx->stats(2).connects, 1u);
}

TEST(TcpMembers, AHostThatLeftIsNotReconnectedUntilItIsBack) {
  Members m(2);
  m.start(0, {1}, 2);
  m.start(1, {0}, 2);
  ASSERT_TRUE(m.pump([&] { return m.all_up(); }));
  m[0].ctx->drop_peer(1, Status(GSYNC_ERR_HOST_LOST, "host h1 left cluster test: lease expired"));
  ASSERT_TRUE(m.pump([&] { return !m[0].downs.empty(); }));
  EXPECT_EQ(m[0].downs[0].first, 1);
  EXPECT_EQ(m[0].downs[0].second.code(), GSYNC_ERR_HOST_LOST);
  EXPECT_NE(m[0].downs[0].second.message().find("lease expired"), std::string::npos);
  // h0 is the connector: it must not try again, and h1's attempts (none:
  // it accepts) cannot bring the link back.
  m.idle(400);
  EXPECT_FALSE(m[0].ctx->peer_up(1));
  EXPECT_EQ(m[0].ups.size(), 1u);
  EXPECT_NE(m[0].ctx->stats(1).last_error.find("lease expired"), std::string::npos);
  // A write to it fails at once, naming it.
  m[0].ctx->write(1, "x", 1, 1, 0, 0, 77);
  ASSERT_TRUE(m.pump([&] { return !m[0].dones.empty(); }));
  EXPECT_FALSE(m[0].dones[0].st);
  // Back: linked again.
  ASSERT_TRUE(m[0].ctx->set_peer(1, m.host(1)));
  ASSERT_TRUE(m.pump([&] { return m.all_up(); }));
  EXPECT_EQ(m[0].ups.size(), 2u);
}

TEST(TcpMembers, AHostBackAtANewPortIsLinkedThere) {
  Members m(2);
  m.start(0, {1}, 2);
  m.start(1, {0}, 2);
  ASSERT_TRUE(m.pump([&] { return m.all_up(); }));
  m.stop(1);
  ASSERT_TRUE(m.pump([&] { return !m[0].downs.empty(); }));
  m.start(1, {0}, 2, /*port_slot=*/2);
  ASSERT_TRUE(m[0].ctx->set_peer(1, m.host(1, 2)));
  ASSERT_TRUE(m.pump([&] { return m.all_up(); }));
}

TEST(TcpMembers, AnIndexWithNoHostIsRefusedThenLetInOnceKnown) {
  Members m(3);
  m.start(0, {1, 2}, 3);
  m.start(1, {0, 2}, 3);
  m.start(2, {0}, 3);  // does not know h1 yet
  ASSERT_TRUE(m.pump([&] { return m[1].ctx->stats(2).last_error.find("holds") != std::string::npos; }))
      << m[1].ctx->stats(2).last_error;
  EXPECT_NE(m[1].ctx->stats(2).last_error.find("no host"), std::string::npos)
      << m[1].ctx->stats(2).last_error;
  EXPECT_FALSE(m[1].ctx->peer_up(2));
  ASSERT_TRUE(m[2].ctx->set_peer(1, m.host(1)));
  ASSERT_TRUE(m.pump([&] { return m.all_up(); }));
}

TEST(TcpMembers, BadIndicesAndIdsAreRefused) {
  Members m(2);
  m.start(0, {1}, 2);
  EXPECT_EQ(m[0].ctx->set_peer(0, m.host(0)).code(), GSYNC_ERR_INVALID);  // itself
  EXPECT_EQ(m[0].ctx->set_peer(-1, m.host(1)).code(), GSYNC_ERR_INVALID);
  EXPECT_EQ(m[0].ctx->set_peer(100000, m.host(1)).code(), GSYNC_ERR_INVALID);
  EXPECT_EQ(m[0].ctx->set_peer(5, m.host(1)).code(), GSYNC_ERR_INVALID);  // h1 is at 1
  EXPECT_EQ(m[0].ctx->set_peer(5, PeerInfo{}).code(), GSYNC_ERR_INVALID);  // no id
  EXPECT_EQ(m[0].ctx->size(), 2);
}

}  // namespace
}  // namespace gsync::transport
