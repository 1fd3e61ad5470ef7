// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider for real: two contexts in this process, each on its own
// DPDK port, the two ports the ends of one net_memif link (server and
// client in the same EAL; no hugepages, no NIC), driven by poll() from the
// test thread. Writes of 1 byte to 64 MiB, their order, loss injected on
// the receive path, a receiver that stops polling for a while, a peer that
// goes away and comes back.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "daemon/transport/dpdk/context.h"
#include "tests/util/transport_harness.h"

namespace gsync::transport {
namespace {

using testing::Node;

using testing::Mem;

// One EAL for the whole process (it starts once): both ends of the link.
std::string eal_args() {
  static std::string args = [] {
    std::string sock = fmt::format("/tmp/gsync-dpdk-test-{}.sock", getpid());
    // A second link (memif2, memif3) for the receive lcore's test.
    return fmt::format("--no-huge --no-pci -m 256 --log-level=lib.eal:error "
                       "--vdev=net_memif0,role=server,socket={0} "
                       "--vdev=net_memif1,role=client,socket={0} "
                       "--vdev=net_memif2,role=server,socket={0}.2 "
                       "--vdev=net_memif3,role=client,socket={0}.2",
                       sock);
  }();
  return args;
}

class Link : public testing::Nodes {
 public:
  // Ports net_memif<first_port> and the next; rx_lcore for the second end.
  explicit Link(int first_port = 0, int rx_lcore = ContextOptions::Dpdk::kRxOff)
      : Nodes(2, 20000, 1), first_port_(first_port), rx_lcore_(rx_lcore) {
    auto ports = testing::free_ports(2);
    base_.identity = {"dpdk-test", 1, "b"};
    base_.cluster_key = testing::test_key();
    for (int i = 0; i < 2; i++)
      base_.hosts.push_back({fmt::format("h{}", i), "127.0.0.1", ports[size_t(i)], "r1"});
    base_.heartbeat_ms = 100;
    base_.peer_timeout_ms = 3000;
    base_.reconnect_min_ms = 20;
    base_.reconnect_max_ms = 200;
    base_.dpdk.wanted = base_.dpdk.required = true;
    base_.dpdk.eal_args = eal_args();
  }
  Node& start(int i) {
    Node& n = fresh(i);
    ContextOptions o = base_;
    o.self = i;
    o.dpdk.port = fmt::format("net_memif{}", first_port_ + i);
    if (i == 1) o.dpdk.rx_lcore = rx_lcore_;
    Status st;
    n.ctx = make_context(o, false, &st);
    EXPECT_TRUE(n.ctx) << st.message();
    if (n.ctx) n.start();
    return n;
  }
  bool start_all() {
    start(0);
    start(1);
    return pump([&] { return all_up(); });
  }
  dpdk::DpdkLinks& links(int i) {
    return *static_cast<dpdk::DpdkContext*>((*this)[i].ctx.get())->links();
  }
  // What each test starts from: no records of earlier tests.
  void clear() {
    for (int i = 0; i < size(); i++) {
      Node& n = (*this)[i];
      n.ups.clear(), n.downs.clear(), n.landed.clear(), n.dones.clear(), n.controls.clear();
    }
  }

 private:
  ContextOptions base_;
  int first_port_;
  int rx_lcore_;
};

// A port of a virtual device is opened once per process (DPDK keeps a
// stopped one's buffers until it is configured again, and a closed one is
// gone): the tests share one link, made by the first. Only the last test
// makes one end again, as a restarted daemon would.
class DpdkProvider : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    link_ = new Link();
    up_ = link_->start_all();
  }
  static void TearDownTestSuite() {
    delete link_;
    link_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(up_) << "the memif link did not come up";
    link_->clear();
    link_->links(1).set_drop_ppm_for_test(0);
  }
  static Link* link_;
  static bool up_;
};
Link* DpdkProvider::link_ = nullptr;
bool DpdkProvider::up_ = false;

void fill(uint8_t* p, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i++) p[i] = uint8_t(rng());
}

// The receive poll on a dedicated lcore (rx_lcore.h), on a link of its own:
// a receiver whose poll() found nothing to do (armed, as before the event
// loop sleeps) is woken through the provider's own fd by the lcore when a
// frame comes - not by a poll of its own, which this test does not make
// until the fd says so - and the write lands whole.
TEST(DpdkRxLcore, AnIdleReceiverIsWokenByItsLcore) {
  Link l(2, ContextOptions::Dpdk::kRxAnyCpu);
  ASSERT_TRUE(l.start_all()) << "the memif link did not come up";
  auto& rx = *static_cast<dpdk::DpdkContext*>(l[1].ctx.get())->links();
  ASSERT_GE(rx.event_fd(), 0);
  EXPECT_EQ(l[1].ctx->stats(0).dpdk.rx_lcore.rfind("lcore ", 0), 0u)
      << l[1].ctx->stats(0).dpdk.rx_lcore;
  const size_t kLen = 64 << 10;
  Mem src(kLen), dst(kLen);
  fill(src.p, kLen, 5);
  Region r = l[1].ctx->register_region(dst.p, kLen);
  for (int round = 0; round < 3; round++) {
    ASSERT_TRUE(l.pump([&] { return l[1].ctx->stats(0).dpdk.rx_armed; }, 5000))
        << "the receiver never went idle";
    const uint64_t wakeups = l[1].ctx->stats(0).dpdk.rx_wakeups;
    std::memset(dst.p, 0, kLen);
    l[0].ctx->write(1, src.p, kLen, r.id, 0, 40 + round, 100 + round);
    bool woken = false;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         !woken && std::chrono::steady_clock::now() < end;) {
      l[0].ctx->poll();  // the sender only
      pollfd p{rx.event_fd(), POLLIN, 0};
      woken = ::poll(&p, 1, 1) == 1;
    }
    ASSERT_TRUE(woken) << "round " << round << ": the lcore did not wake the idle receiver";
    EXPECT_GT(l[1].ctx->stats(0).dpdk.rx_wakeups, wakeups);
    ASSERT_TRUE(l.pump([&] { return l[1].landed.size() == size_t(round) + 1 &&
                                    l[0].ok_dones() == size_t(round) + 1; }))
        << "round " << round << ": the write did not complete";
    EXPECT_EQ(l[1].landed.back().imm, uint64_t(40 + round));
    EXPECT_EQ(std::memcmp(dst.p, src.p, kLen), 0) << "round " << round;
  }
}

// memif has no MTU: its buffer size (the vdev's bsize=) bounds a frame; a
// zero-copy client takes no payload by reference.
TEST(MemifVdev, ReadFromTheVdevThatMadeThePort) {
  const std::string args =
      "--no-huge -m 256 --vdev=net_memif0,role=server,socket=/a.sock "
      "--vdev net_memif1,role=client,bsize=9216,zero-copy=yes,socket=/a.sock "
      "--vdev=net_af_packet0,iface=eth0";
  auto m0 = dpdk::memif_vdev(args, "net_memif0");
  ASSERT_TRUE(m0);
  EXPECT_EQ(m0->bsize, 2048u);  // the PMD's default
  EXPECT_FALSE(m0->zero_copy);
  auto m1 = dpdk::memif_vdev(args, "net_memif1");
  ASSERT_TRUE(m1);
  EXPECT_EQ(m1->bsize, 9216u);
  EXPECT_TRUE(m1->zero_copy);
  EXPECT_FALSE(dpdk::memif_vdev(args, "net_memif2"));
  EXPECT_FALSE(dpdk::memif_vdev(args, "net_af_packet0"));
  // As the PMD reads it (strtoul): 9 bytes, which no frame fits.
  EXPECT_EQ(dpdk::memif_vdev("--vdev=net_memif0,bsize=9k", "net_memif0")->bsize, 9u);
  // zero-copy only counts on a client: the PMD ignores it on a server.
  EXPECT_FALSE(dpdk::memif_vdev("--vdev=net_memif0,zero-copy=yes", "net_memif0")->zero_copy);
  EXPECT_FALSE(dpdk::memif_vdev("", "net_memif0"));
}

TEST_F(DpdkProvider, BringUpNamesThePortAndTheMacs) {
  Link& l = *link_;
  PeerStats s = l[0].ctx->stats(1);
  EXPECT_EQ(s.transport, "dpdk");
  EXPECT_EQ(s.state, PeerState::kUp);
  EXPECT_EQ(s.dpdk.port, "net_memif0");
  EXPECT_EQ(s.dpdk.remote_mac, l[1].ctx->stats(0).dpdk.mac);
  EXPECT_EQ(s.dpdk.remote_link, l[1].ctx->stats(0).dpdk.link);
  EXPECT_NE(l[0].ctx->summary().find("dpdk within a rack on net_memif0"), std::string::npos)
      << l[0].ctx->summary();
}

TEST_F(DpdkProvider, WritesOfEverySizeLandWhole) {
  Link& l = *link_;
  const size_t kMax = 64 << 20;
  Mem src(kMax), dst(kMax);
  fill(src.p, kMax, 7);
  Region r = l[1].ctx->register_region(dst.p, kMax);
  uint64_t cookie = 0;
  for (size_t len : {size_t(1), size_t(1435), size_t(1436), size_t(1437), size_t(64 << 10),
                     size_t(1 << 20), kMax}) {
    std::memset(dst.p, 0, len + (len < kMax));
    size_t landed = l[1].landed.size(), done = l[0].ok_dones();
    l[0].ctx->write(1, src.p, len, r.id, 0, 1000 + len, ++cookie);
    ASSERT_TRUE(l.pump([&] { return l[1].landed.size() > landed && l[0].ok_dones() > done; }))
        << "a write of " << len << " bytes did not complete";
    const auto& w = l[1].landed.back();
    EXPECT_EQ(w.offset, 0u);
    EXPECT_EQ(w.len, len);
    EXPECT_EQ(w.imm, 1000 + len);
    EXPECT_EQ(std::memcmp(dst.p, src.p, len), 0) << len << " bytes";
    if (len < kMax) {
      EXPECT_EQ(dst.p[len], 0) << "a byte past the write was written";
    }
  }
  EXPECT_EQ(l[0].ctx->stats(1).dpdk.timeouts, 0u) << "no loss on memif, no timeout";
}

TEST_F(DpdkProvider, WritesLandInOrderAtTheirOffsets) {
  Link& l = *link_;
  const size_t kWrites = 2000, kLen = 3000;  // three frames each, the last one short
  Mem src(kWrites * kLen), dst(kWrites * kLen);
  fill(src.p, src.bytes, 11);
  Region r = l[1].ctx->register_region(dst.p, dst.bytes);
  for (size_t i = 0; i < kWrites; i++)
    l[0].ctx->write(1, src.p + i * kLen, kLen, r.id, i * kLen, i, i);
  ASSERT_TRUE(l.pump([&] { return l[1].landed.size() == kWrites && l[0].ok_dones() == kWrites; }));
  for (size_t i = 0; i < kWrites; i++) {
    EXPECT_EQ(l[1].landed[i].imm, i) << "write " << i << " out of order";
    EXPECT_EQ(l[1].landed[i].offset, i * kLen);
    EXPECT_EQ(l[0].dones[i].cookie, i) << "completion " << i << " out of order";
  }
  EXPECT_EQ(std::memcmp(src.p, dst.p, src.bytes), 0);
}

TEST_F(DpdkProvider, LostFramesAreResentAndEveryByteLands) {
  Link& l = *link_;
  l.links(1).set_drop_ppm_for_test(20000);  // 2% of what node 1 receives, dropped on purpose
  uint64_t resent_before = l[0].ctx->stats(1).dpdk.frames_resent;
  uint64_t injected_before = l.links(1).dropped(dpdk::Drop::kInjected);
  const size_t kLen = 16 << 20;
  Mem src(kLen), back(kLen), dst(kLen);
  fill(src.p, kLen, 3);
  Region r1 = l[1].ctx->register_region(dst.p, kLen);
  Region r0 = l[0].ctx->register_region(back.p, kLen);
  l[0].ctx->write(1, src.p, kLen, r1.id, 0, 42, 1);
  ASSERT_TRUE(l.pump([&] { return l[1].landed.size() == 1 && l[0].ok_dones() == 1; }));
  EXPECT_EQ(std::memcmp(src.p, dst.p, kLen), 0);
  // And back: the acks of node 1 cross a lossless direction, its data too.
  l[1].ctx->write(0, dst.p, kLen, r0.id, 0, 43, 2);
  ASSERT_TRUE(l.pump([&] { return l[0].landed.size() == 1 && l[1].ok_dones() == 1; }));
  EXPECT_EQ(std::memcmp(src.p, back.p, kLen), 0);
  uint64_t injected = l.links(1).dropped(dpdk::Drop::kInjected) - injected_before;
  uint64_t resent = l[0].ctx->stats(1).dpdk.frames_resent - resent_before;
  EXPECT_GT(injected, 100u) << "the test hook dropped nothing";
  EXPECT_GE(resent, injected / 2) << "frames dropped at node 1 but not resent by node 0";
  std::printf("2%% loss: %lu frames dropped at the receiver, %lu resent, %lu timeouts, srtt %.0f us\n",
              (unsigned long)injected, (unsigned long)resent,
              (unsigned long)l[0].ctx->stats(1).dpdk.timeouts, l[0].ctx->stats(1).dpdk.srtt_us);
}

TEST_F(DpdkProvider, ASlowReceiverHoldsTheSenderToItsWindow) {
  Link& l = *link_;
  const size_t kLen = 32 << 20;
  Mem src(kLen), dst(kLen);
  fill(src.p, kLen, 5);
  Region r = l[1].ctx->register_region(dst.p, kLen);
  uint64_t before = l[0].ctx->stats(1).dpdk.frames_sent;
  l[0].ctx->write(1, src.p, kLen, r.id, 0, 9, 1);
  // Only node 0 polls for a while: node 1 takes nothing off its port.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < until) l[0].ctx->poll();
  uint64_t sent = l[0].ctx->stats(1).dpdk.frames_sent - before;
  EXPECT_LE(sent, 512u) << "the sender ran past its window of 512 frames with no ack";
  EXPECT_GT(sent, 0u);
  ASSERT_TRUE(l.pump([&] { return l[1].landed.size() == 1 && l[0].ok_dones() == 1; }));
  EXPECT_EQ(std::memcmp(src.p, dst.p, kLen), 0);
}

TEST_F(DpdkProvider, APeerThatGoesAwayFailsItsWritesAndComesBack) {
  Link& l = *link_;
  const size_t kLen = 64 << 20;
  Mem src(kLen), dst(kLen);
  fill(src.p, kLen, 9);
  Region r = l[1].ctx->register_region(dst.p, kLen);
  l[0].ctx->write(1, src.p, kLen, r.id, 0, 1, 1);
  uint64_t before = l[0].ctx->stats(1).dpdk.frames_sent;
  l.pump([&] { return l[0].ctx->stats(1).dpdk.frames_sent > before + 1000; }, 5000);
  l.stop(1);  // its context and its TCP links go: node 0 hears of it
  ASSERT_TRUE(l.pump([&] { return !l[0].dones.empty() && !l[0].downs.empty(); }));
  EXPECT_FALSE(l[0].dones[0].st.is_ok()) << "a write to a peer that went away completed";
  l.start(1);
  ASSERT_TRUE(l.pump([&] { return l.all_up(); })) << "the link did not come back";
  Region r2 = l[1].ctx->register_region(dst.p, kLen);
  l[0].ctx->write(1, src.p, kLen, r2.id, 0, 2, 2);
  ASSERT_TRUE(l.pump([&] { return l[1].landed.size() == 1 && l[0].ok_dones() == 1; }));
  EXPECT_EQ(std::memcmp(src.p, dst.p, kLen), 0);
  EXPECT_EQ(l[0].ctx->stats(1).connects, 2u);
}

}  // namespace
}  // namespace gsync::transport
