// SPDX-License-Identifier: Apache-2.0
//
// The verbs provider over a real RDMA device (soft-RoCE rxe0 in the test VM,
// tools/rxe/): several contexts in this process, each with its own RC queue
// pairs over the device's GID, driven by poll() from the test thread.
// Outside the VM there is no device: every test skips, saying so.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/context.h"
#include "daemon/transport/verbs/device.h"
#include "tests/util/transport_harness.h"

namespace gsync::transport {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Done;
using testing::Landed;
using testing::Node;

using testing::Mem;

verbs::Pair* pair_of(Node& n, int peer) {
  return static_cast<verbs::VerbsContext*>(n.ctx.get())->pair_for_test(peer);
}

// Node `from` has heard of node `to`'s region (its REGION announcement came
// over the bootstrap link): what a test waits for before writing into it.
bool knows(testing::Node& from, int to, uint32_t region) {
  auto* v = static_cast<verbs::VerbsContext*>(from.ctx.get());
  return v->has_device() && v->pair_for_test(to) && v->pair_for_test(to)->knows_region(region);
}

bool have_device(std::string* why) {
  verbs::DeviceChoice c;
  Status st = verbs::probe({}, "127.0.0.1", &c);
  *why = st.message();
  return st.is_ok();
}

class Cluster : public testing::Nodes {
 public:
  explicit Cluster(int n, std::vector<std::string> racks = {}) : Nodes(n, 10000, 5) {
    auto ports = testing::free_ports(n);
    base_.identity = {"rxe", 1, "b"};
    base_.cluster_key = testing::test_key();
    racks.resize(size_t(n));
    for (int i = 0; i < n; i++)
      base_.hosts.push_back({fmt::format("h{}", i), "127.0.0.1", ports[size_t(i)], racks[size_t(i)]});
    base_.heartbeat_ms = 100;
    // The VM runs under TCG emulation, where one context's poll (a large
    // memory registration) can hold this single-threaded pump for over a
    // second: a 1 s timeout declared a live peer down once in CI. These
    // tests see links go down by close or QP error, never by silence.
    base_.peer_timeout_ms = 10000;
    base_.reconnect_min_ms = 20;
    base_.reconnect_max_ms = 200;
    base_.verbs.required = true;
    if (const char* g = getenv("RXE_GID_INDEX")) base_.verbs.gid_index = atoi(g);
  }
  Node& start(int i) {
    Node& n = fresh(i);
    ContextOptions o = base_;
    o.self = i;
    if (no_device == i) {  // as on a host without RDMA: the real fallback, not refused offers
      o.verbs.device = "no-such-rdma9";
      o.verbs.required = false;
    }
    Status st;
    if (bare_tcp == i)
      n.ctx = make_tcp_context(o, &st);
    else
      n.ctx = make_context(o, tcp_setting != i, &st);
    EXPECT_TRUE(n.ctx) << st.message();
    if (!n.ctx) return n;
    if (refuse_verbs == i && bare_tcp != i && tcp_setting != i)
      static_cast<verbs::VerbsContext*>(n.ctx.get())->refuse_verbs_for_test("test says no");
    n.start();
    return n;
  }
  // Starts every node and waits until all links are up.
  bool start_all() {
    for (int i = 0; i < size(); i++) start(i);
    return pump([&] { return all_up(); });
  }
  int refuse_verbs = -1;  // this node offers no verbs link
  int no_device = -1;     // this node finds no RDMA device
  int tcp_setting = -1;   // this node is a daemon with transport = "tcp"
  // This node runs the TCP provider bare, as a gsyncd from before every
  // transport setting spoke the peering context's protocol did.
  int bare_tcp = -1;

 private:
  ContextOptions base_;
};

#define NEED_DEVICE()                                       \
  do {                                                      \
    std::string why;                                        \
    if (!have_device(&why)) GTEST_SKIP() << "no RDMA device: " << why; \
  } while (0)

TEST(VerbsRxe, BringUpAndStatsNameTheDeviceAndQp) {
  NEED_DEVICE();
  Cluster c(3);
  ASSERT_TRUE(c.start_all());
  PeerStats s = c[0].ctx->stats(1);
  EXPECT_EQ(s.transport, "verbs");
  EXPECT_EQ(s.state, PeerState::kUp);
  EXPECT_FALSE(s.verbs_device.empty());
  EXPECT_EQ(s.verbs_port, 1);
  EXPECT_GE(s.verbs_gid_index, 0);
  EXPECT_NE(s.verbs_qpn, 0u);
  EXPECT_EQ(s.verbs_remote_qpn, c[1].ctx->stats(0).verbs_qpn);
  EXPECT_EQ(s.connects, 1u);
  std::printf("h0->h1 on %s port %d GID[%d] QPN %u <-> %u\n", s.verbs_device.c_str(), s.verbs_port,
              s.verbs_gid_index, s.verbs_qpn, s.verbs_remote_qpn);
}

TEST(VerbsRxe, ControlMessagesInOrderUpToTheLimit) {
  NEED_DEVICE();
  Cluster c(2);
  ASSERT_TRUE(c.start_all());
  std::string big(kMaxControl, 'z');
  for (int i = 0; i < 50; i++) c[0].ctx->send_control(1, fmt::format("m{}", i));
  c[0].ctx->send_control(1, big);
  ASSERT_TRUE(c.pump([&] { return c[1].controls.size() == 51; }));
  for (int i = 0; i < 50; i++) EXPECT_EQ(c[1].controls[size_t(i)].second, fmt::format("m{}", i));
  EXPECT_EQ(c[1].controls[50].second, big);
}

TEST(VerbsRxe, WritesFromOneByteTo64MiBLandWithRangeAndImmediate) {
  NEED_DEVICE();
  Cluster c(2);
  ASSERT_TRUE(c.start_all());
  const uint64_t kMax = 64ull << 20;
  Mem src(kMax), dst(kMax + 4096);
  std::mt19937 rng(1);
  for (uint64_t i = 0; i < kMax; i++) src.p[i] = uint8_t(rng());
  Region r = c[1].ctx->register_region(dst.p, dst.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, r.id); }))  // announced
      << "h0 never heard of h1's region";
  uint64_t cookie = 0;
  for (uint64_t n : std::vector<uint64_t>{1, 7, 4096, 65537, 1 << 20, 16 << 20, kMax}) {
    std::memset(dst.p, 0, dst.bytes);
    uint64_t off = n == kMax ? 4096 : 123;
    size_t before = c[1].landed.size();
    c[0].ctx->write(1, src.p, n, r.id, off, 0xfeedface00000000ull | n, ++cookie);
    ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == cookie && c[1].landed.size() == before + 1; }, 60000))
        << "size " << n;
    ASSERT_TRUE(c[0].dones.back().st) << c[0].dones.back().st.message();
    const Landed& l = c[1].landed.back();
    EXPECT_EQ(l.region, r.id);
    EXPECT_EQ(l.offset, off);
    EXPECT_EQ(l.len, n);
    EXPECT_EQ(l.imm, 0xfeedface00000000ull | n);
    EXPECT_EQ(std::memcmp(dst.p + off, src.p, n), 0) << "size " << n;
    EXPECT_EQ(dst.p[off - 1], 0);
    if (off + n < dst.bytes) {
      EXPECT_EQ(dst.p[off + n], 0);
    }
  }
  // Registered once per mapping: every write reused it.
  auto* v = static_cast<verbs::VerbsContext*>(c[0].ctx.get());
  EXPECT_EQ(v->mr_cache().misses(), 1u);
}

TEST(VerbsRxe, CreditExhaustionQueuesAndRecovers) {
  NEED_DEVICE();
  Cluster c(2);
  ASSERT_TRUE(c.start_all());
  Mem src(1 << 20), dst(1 << 20);
  Region r = c[1].ctx->register_region(dst.p, dst.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, r.id); }))  // announced
      << "h0 never heard of h1's region";
  // Far more writes than receive slots (64) and send queue entries (256),
  // posted at once and without the receiver polling in between: the sender
  // must hold them back (an RNR would fail the link: rnr_retry is 0).
  const int kWrites = 2000;
  for (int i = 0; i < kWrites; i++) {
    src.p[i * 64 % (1 << 20)] = uint8_t(i);
    c[0].ctx->write(1, src.p + (i * 64) % (1 << 20), 64, r.id, (i * 64) % (1 << 20), uint64_t(i), uint64_t(i));
  }
  for (int k = 0; k < 20; k++) c[0].ctx->poll();  // sender only
  EXPECT_LE(c[1].landed.size(), 0u);
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == size_t(kWrites) && c[1].landed.size() == size_t(kWrites); }, 60000))
      << c[0].dones.size() << " done, " << c[1].landed.size() << " landed";
  EXPECT_EQ(c[0].ok_dones(), size_t(kWrites));
  EXPECT_TRUE(c[0].downs.empty());
  for (int i = 0; i < kWrites; i++) EXPECT_EQ(c[1].landed[size_t(i)].imm, uint64_t(i));  // one QP: in order
  // And both ways at once.
  Region r0 = c[0].ctx->register_region(src.p, src.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[1], 0, r0.id); }))  // announced
      << "h1 never heard of h0's region";
  for (int i = 0; i < 500; i++) {
    c[0].ctx->write(1, src.p, 4096, r.id, 0, 1, 10000 + i);
    c[1].ctx->write(0, dst.p, 4096, r0.id, 0, 2, 20000 + i);
  }
  ASSERT_TRUE(c.pump([&] { return c[0].ok_dones() == size_t(kWrites + 500) && c[1].ok_dones() == 500; }, 60000));
}

TEST(VerbsRxe, WrongRkeyFailsTheWriteNamingHostsQpnAndStatusThenRecovers) {
  NEED_DEVICE();
  Cluster c(2);
  ASSERT_TRUE(c.start_all());
  Mem src(1 << 16), dst(1 << 16);
  Region r = c[1].ctx->register_region(dst.p, dst.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, r.id); }))  // announced
      << "h0 never heard of h1's region";
  uint32_t old_qpn = c[0].ctx->stats(1).verbs_qpn;
  pair_of(c[0], 1)->corrupt_next_rkey();
  c[0].ctx->write(1, src.p, 4096, r.id, 0, 5, 1);
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == 1; }));
  const Status& st = c[0].dones[0].st;
  EXPECT_FALSE(st);
  std::printf("error: %s\n", st.message().c_str());
  EXPECT_NE(st.message().find("h0 (127.0.0.1:"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("h1 (127.0.0.1:"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(fmt::format("QPN {}", old_qpn)), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR)), std::string::npos) << st.message();
  ASSERT_EQ(c[0].downs.size(), 1u);
  EXPECT_EQ(c[0].ctx->stats(1).verbs_completion_errors, 1u);
  // Re-established on a fresh QP, and writes work again.
  ASSERT_TRUE(c.pump([&] { return c.all_up() && c[0].ups.size() == 2 && c[1].ups.size() == 2; }));
  EXPECT_NE(c[0].ctx->stats(1).verbs_qpn, old_qpn);
  std::memset(src.p, 0x5c, 4096);
  c[0].ctx->write(1, src.p, 4096, r.id, 0, 6, 2);
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == 2; }));
  EXPECT_TRUE(c[0].dones[1].st) << c[0].dones[1].st.message();
  EXPECT_EQ(dst.p[4095], 0x5c);
  EXPECT_EQ(c[0].ctx->stats(1).connects, 2u);
}

TEST(VerbsRxe, LengthPastTheRegionFailsWithoutSending) {
  NEED_DEVICE();
  Cluster c(2);
  ASSERT_TRUE(c.start_all());
  Mem src(1 << 16), dst(1 << 16);
  Region r = c[1].ctx->register_region(dst.p, 4096);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, r.id); }))  // announced
      << "h0 never heard of h1's region";
  c[0].ctx->write(1, src.p, 4097, r.id, 0, 5, 1);
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == 1; }));
  EXPECT_FALSE(c[0].dones[0].st);
  EXPECT_NE(c[0].dones[0].st.message().find("do not fit region"), std::string::npos);
  EXPECT_TRUE(c[0].downs.empty());
}

TEST(VerbsRxe, PeerDestroyedMidTransferThenReplaced) {
  NEED_DEVICE();
  Cluster c(2);
  ASSERT_TRUE(c.start_all());
  Mem src(8 << 20), dst(8 << 20);
  Region r = c[1].ctx->register_region(dst.p, dst.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, r.id); }))  // announced
      << "h0 never heard of h1's region";
  // More writes than the peer grants credits for (verbs/pair.h): those past
  // the credits wait in h0's queue until h1, when it is polled, returns
  // credits. Once the first has completed the transfer is under way:
  // destroy the peer then. Up to a whole window of credited writes may
  // complete in the one poll that finds the first (the emulated NIC moves
  // them while the test sleeps; seen: all 64), but the 40 past the window
  // wait for h1's credits: some writes are certainly not done yet.
  constexpr int kWrites = int(verbs::kCreditSlots) + 40;
  for (int i = 0; i < kWrites; i++) c[0].ctx->write(1, src.p, 8 << 20, r.id, 0, 1, uint64_t(i));
  ASSERT_TRUE(c.pump([&] { return !c[0].dones.empty(); }, 30000));
  ASSERT_LT(c[0].dones.size(), size_t(kWrites))
      << "every write completed before the test could cut the link";
  c.stop(1);  // mid-transfer: its QP, CQ and registrations are gone
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == size_t(kWrites) && !c[0].downs.empty(); },
                     30000))
      << c[0].dones.size() << " done, " << c[0].downs.size() << " downs";
  EXPECT_LT(c[0].ok_dones(), size_t(kWrites));
  for (const auto& d : c[0].dones)
    if (!d.st) {  // the failed ones name the peer
      EXPECT_NE(d.st.message().find("h1"), std::string::npos) << d.st.message();
      break;
    }
  ASSERT_EQ(c[0].downs.size(), 1u);
  std::printf("down: %s\n", c[0].downs[0].second.message().c_str());
  EXPECT_NE(c[0].downs[0].second.message().find("h1"), std::string::npos);
  // A new h1 comes up; its regions are new.
  c.start(1);
  ASSERT_TRUE(c.pump([&] { return c.all_up(); }, 15000));
  Region r2 = c[1].ctx->register_region(dst.p, dst.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, r2.id); }))  // announced
      << "h0 never heard of h1's region";
  std::memset(src.p, 0x42, 1 << 20);
  c[0].ctx->write(1, src.p, 1 << 20, r2.id, 0, 9, 99);
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == size_t(kWrites) + 1; }));
  EXPECT_TRUE(c[0].dones.back().st) << c[0].dones.back().st.message();
  EXPECT_EQ(dst.p[(1 << 20) - 1], 0x42);
}

// Root ignores RLIMIT_MEMLOCK (CAP_IPC_LOCK); a daemon under systemd is not
// root's shell. Drops the capability from this process for good.
bool drop_ipc_lock() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (syscall(SYS_capget, &h, d) != 0) return false;
  uint32_t bit = 1u << (CAP_IPC_LOCK % 32);
  auto& w = d[CAP_IPC_LOCK / 32];
  w.effective &= ~bit;
  w.permitted &= ~bit;
  w.inheritable &= ~bit;
  return syscall(SYS_capset, &h, d) == 0;
}

// RLIMIT_MEMLOCK too low for a registration, for real (not a fake
// registrar): a child with a 1 MiB limit and without CAP_IPC_LOCK runs two
// contexts; h1 cannot register a 64 MiB region, and h0's write into it
// fails naming the limit and the unit's setting, while the link stays up.
TEST(VerbsRxe, MemlockLimitTooLowFailsTheWriteNamingIt) {
  NEED_DEVICE();
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    rlimit lim{1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0 || !drop_ipc_lock()) _exit(10);
    Cluster c(2);
    if (!c.start_all()) _exit(11);
    Mem src(64 << 20), dst(64 << 20);
    Region r = c[1].ctx->register_region(dst.p, dst.bytes);
    if (!c.pump([&] { return knows(c[0], 1, r.id); })) _exit(12);
    c[0].ctx->write(1, src.p, 4096, r.id, 0, 1, 7);
    if (!c.pump([&] { return c[0].dones.size() == 1; })) _exit(13);
    std::string m = c[0].dones[0].st.message();
    std::printf("memlock: %s\n", m.c_str());
    std::fflush(stdout);
    if (c[0].dones[0].st) _exit(14);  // the write went through: no limit?
    if (m.find("RLIMIT_MEMLOCK") == std::string::npos || m.find("LimitMEMLOCK") == std::string::npos)
      _exit(15);
    _exit(c[0].downs.empty() ? 0 : 16);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10: no limit or capability could be set, 11: no links, 12: no announcement, 13: no "
         "completion, 14: the write succeeded, 15: the error names neither the limit nor the "
         "unit's setting, 16: the link went down";
}

TEST(VerbsRxe, DeregisterWaitsForInFlightWritesAndLateWritesAreDropped) {
  NEED_DEVICE();
  Cluster c(2);
  ASSERT_TRUE(c.start_all());
  Mem src(16 << 20), dst(16 << 20);
  Region r = c[1].ctx->register_region(dst.p, dst.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, r.id); }))  // announced
      << "h0 never heard of h1's region";
  for (int i = 0; i < 8; i++) c[0].ctx->write(1, src.p, 16 << 20, r.id, 0, 1, uint64_t(i));
  bool released = false;
  c[1].ctx->deregister_region(r.id, [&] { released = true; });
  EXPECT_FALSE(released);  // h0 may still be writing into it
  ASSERT_TRUE(c.pump([&] { return released; }, 30000));
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == 8; }, 30000));
  EXPECT_EQ(c[0].ok_dones(), 8u);
  // After the retirement, a write aimed at it completes and is dropped.
  size_t landed = c[1].landed.size();
  c[0].ctx->write(1, src.p, 4096, r.id, 0, /*imm=*/100, 100);
  ASSERT_TRUE(c.pump([&] { return c[0].dones.size() == 9; }));
  EXPECT_TRUE(c[0].dones.back().st);
  // A fence: a later write on the same queue pair lands after anything
  // sent before it (RC order), so once it has, the dropped one never will.
  Mem other(4096);
  Region fence = c[1].ctx->register_region(other.p, other.bytes);
  ASSERT_TRUE(c.pump([&] { return knows(c[0], 1, fence.id); }));
  c[0].ctx->write(1, src.p, 4096, fence.id, 0, /*imm=*/101, 101);
  ASSERT_TRUE(c.pump([&] { return c[1].landed.size() > landed; }));
  ASSERT_EQ(c[1].landed.size(), landed + 1);
  EXPECT_EQ(c[1].landed.back().imm, 101u) << "the write into the retired region landed";
  EXPECT_TRUE(c[0].downs.empty());
}

// Every ordered pair of nodes writes a few sizes into a region of the other
// made for it; each write must land whole, with its imm, in the region id
// the receiver's register_region returned, on verbs and TCP links alike.
void write_all_ways(Cluster& c, int n) {
  const std::vector<uint64_t> sizes{1, 4097, 1 << 20, 3 << 20};
  const uint64_t kBytes = (4 << 20) + 4096, kOff = 123;
  std::vector<std::unique_ptr<Mem>> src, dst;
  std::vector<std::vector<Region>> reg(static_cast<size_t>(n), std::vector<Region>(static_cast<size_t>(n)));  // [to][from]
  std::mt19937 rng(7);
  for (int i = 0; i < n; i++) {
    src.push_back(std::make_unique<Mem>(kBytes));
    for (uint64_t k = 0; k < kBytes; k++) src.back()->p[k] = uint8_t(rng());
  }
  for (int to = 0; to < n; to++)
    for (int from = 0; from < n; from++) {
      dst.push_back(std::make_unique<Mem>(kBytes));
      if (from != to) reg[size_t(to)][size_t(from)] = c[to].ctx->register_region(dst.back()->p, kBytes);
    }
  auto dst_of = [&](int to, int from) { return dst[size_t(to * n + from)]->p; };
  // Writes on a verbs link need the peer's announcement of the region; a
  // TCP link takes them at once.
  ASSERT_TRUE(c.pump([&] {
    for (int to = 0; to < n; to++)
      for (int from = 0; from < n; from++)
        if (from != to && c[from].ctx->stats(to).transport == "verbs" &&
            !knows(c[from], to, reg[size_t(to)][size_t(from)].id))
          return false;
    return true;
  })) << "region announcements did not arrive";
  for (uint64_t len : sizes) {
    std::vector<size_t> dones(static_cast<size_t>(n)), landed(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) {
      dones[size_t(i)] = c[i].dones.size();
      landed[size_t(i)] = c[i].landed.size();
    }
    for (int from = 0; from < n; from++)
      for (int to = 0; to < n; to++) {
        if (from == to) continue;
        std::memset(dst_of(to, from), 0, kBytes);
        uint64_t imm = (uint64_t(from) << 56) | (uint64_t(to) << 48) | len;
        c[from].ctx->write(to, src[size_t(from)]->p, len, reg[size_t(to)][size_t(from)].id, kOff, imm,
                           imm);
      }
    ASSERT_TRUE(c.pump([&] {
      for (int i = 0; i < n; i++)
        if (c[i].dones.size() != dones[size_t(i)] + size_t(n - 1) ||
            c[i].landed.size() != landed[size_t(i)] + size_t(n - 1))
          return false;
      return true;
    }, 60000)) << "size " << len;
    for (int to = 0; to < n; to++) {
      for (size_t k = dones[size_t(to)]; k < c[to].dones.size(); k++)
        EXPECT_TRUE(c[to].dones[k].st) << c[to].dones[k].st.message();
      for (size_t k = landed[size_t(to)]; k < c[to].landed.size(); k++) {
        const Landed& l = c[to].landed[k];
        int from = l.peer;
        ASSERT_TRUE(from >= 0 && from < n && from != to);
        std::string link = fmt::format("h{} -> h{} ({}), {} bytes", from, to,
                                       c[from].ctx->stats(to).transport, len);
        EXPECT_EQ(l.region, reg[size_t(to)][size_t(from)].id) << link;
        EXPECT_EQ(l.offset, kOff) << link;
        EXPECT_EQ(l.len, len) << link;
        EXPECT_EQ(l.imm, (uint64_t(from) << 56) | (uint64_t(to) << 48) | len) << link;
        EXPECT_EQ(std::memcmp(dst_of(to, from) + kOff, src[size_t(from)]->p, len), 0) << link;
        EXPECT_EQ(dst_of(to, from)[kOff - 1], 0) << link;
        EXPECT_EQ(dst_of(to, from)[kOff + len], 0) << link;
      }
    }
  }
  // Released once both paths let go of each region.
  int released = 0, want = 0;
  for (int to = 0; to < n; to++)
    for (int from = 0; from < n; from++)
      if (from != to) {
        want++;
        c[to].ctx->deregister_region(reg[size_t(to)][size_t(from)].id, [&] { released++; });
      }
  ASSERT_TRUE(c.pump([&] { return released == want; }, 30000)) << released << " of " << want;
  // Each exactly once: a second release could only show up later, so this
  // looks on for a while (the one wait here that is not for a condition).
  c.pump([] { return false; }, 50);
  EXPECT_EQ(released, want);
}

TEST(VerbsRxe, VerbsWithinARackTcpAcrossRacks) {
  NEED_DEVICE();
  Cluster c(3, {"r1", "r1", "r2"});
  ASSERT_TRUE(c.start_all());
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      if (i == j) continue;
      PeerStats s = c[i].ctx->stats(j);
      bool verbs = i < 2 && j < 2;
      EXPECT_EQ(s.transport, verbs ? "verbs" : "tcp") << "h" << i << " -> h" << j;
      EXPECT_EQ(s.state, PeerState::kUp) << "h" << i << " -> h" << j;
      EXPECT_EQ(s.verbs_device.empty(), !verbs) << "h" << i << " -> h" << j;
      EXPECT_EQ(s.verbs_qpn != 0, verbs) << "h" << i << " -> h" << j;
    }
  for (int i = 0; i < 3; i++) EXPECT_EQ(c[i].ups.size(), 2u) << "h" << i;
  // Control messages still arrive on both kinds of link.
  c[0].ctx->send_control(2, "to h2");
  c[2].ctx->send_control(1, "to h1");
  ASSERT_TRUE(c.pump([&] { return c[2].controls.size() == 1 && c[1].controls.size() == 1; }));
  EXPECT_EQ(c[2].controls[0].second, "to h2");
  EXPECT_EQ(c[1].controls[0].second, "to h1");
  write_all_ways(c, 3);
  for (int i = 0; i < 3; i++) EXPECT_TRUE(c[i].downs.empty()) << "h" << i;
  EXPECT_GT(c[0].ctx->stats(1).writes_sent, 0u);
  EXPECT_GT(c[0].ctx->stats(2).writes_sent, 0u);
}

TEST(VerbsRxe, PeerWithoutVerbsGetsATcpLinkInItsRack) {
  NEED_DEVICE();
  Cluster c(2, {"r1", "r1"});
  c.refuse_verbs = 1;
  ASSERT_TRUE(c.start_all());
  EXPECT_EQ(c[0].ctx->stats(1).transport, "tcp");
  EXPECT_EQ(c[1].ctx->stats(0).transport, "tcp");
  EXPECT_EQ(c[0].ctx->stats(1).verbs_qpn, 0u);
  write_all_ways(c, 2);
  // The TCP link going away is the peer going down, as on the TCP provider.
  c.stop(1);
  ASSERT_TRUE(c.pump([&] { return c[0].downs.size() == 1; }, 15000));
  EXPECT_FALSE(c[0].ctx->peer_up(1));
}

TEST(VerbsRxe, PeerWithNoDeviceRunsTheSameProtocolOverTcp) {
  NEED_DEVICE();
  Cluster c(2, {"r1", "r1"});
  c.no_device = 1;
  c.start(0);
  c.start(1);
  ASSERT_TRUE(c[1].ctx);
  auto* v = static_cast<verbs::VerbsContext*>(c[1].ctx.get());
  EXPECT_FALSE(v->has_device());
  EXPECT_NE(v->no_device_reason().find("no-such-rdma9"), std::string::npos)
      << v->no_device_reason();
  ASSERT_TRUE(c.pump([&] { return c.all_up(); }));
  EXPECT_EQ(c[0].ctx->stats(1).transport, "tcp");
  EXPECT_EQ(c[1].ctx->stats(0).transport, "tcp");
  c[0].ctx->send_control(1, "to h1");
  c[1].ctx->send_control(0, "to h0");
  ASSERT_TRUE(c.pump([&] { return !c[0].controls.empty() && !c[1].controls.empty(); }));
  EXPECT_EQ(c[1].controls[0].second, "to h1");
  EXPECT_EQ(c[0].controls[0].second, "to h0");
  write_all_ways(c, 2);
  c.stop(1);
  ASSERT_TRUE(c.pump([&] { return c[0].downs.size() == 1; }, 15000));
}

// transport = "tcp" on one host, a device on the other: one protocol, the
// link comes up over TCP (the tcp host offers no fast link), and carries
// control messages and writes.
TEST(VerbsRxe, TcpSettingPeerLinksOverTcpBesideVerbs) {
  NEED_DEVICE();
  Cluster c(2, {"r1", "r1"});
  c.tcp_setting = 1;
  ASSERT_TRUE(c.start_all()) << c[0].ctx->stats(1).last_error;
  EXPECT_EQ(c[0].ctx->stats(1).transport, "tcp");
  EXPECT_EQ(c[1].ctx->stats(0).transport, "tcp");
  c[1].ctx->send_control(0, "hello from a tcp host");
  ASSERT_TRUE(c.pump([&] { return !c[0].controls.empty(); }));
  EXPECT_EQ(c[0].controls[0].second, "hello from a tcp host");
  write_all_ways(c, 2);
}

// The bare TCP provider (a gsyncd from before one protocol) on one host:
// the verbs context names it, it does not hang silently.
TEST(VerbsRxe, BareTcpPeerIsNamedAsAnOlderProtocol) {
  Cluster c(2, {"r1", "r1"});
  c.no_device = 0;  // runs with or without a device
  c.bare_tcp = 1;
  c.start(0);
  c.start(1);
  // The bare context reports the link up (the HELLO is the same) and talks.
  ASSERT_TRUE(c.pump([&] { return c[1].ctx->peer_up(0); }));
  c[1].ctx->send_control(0, "hello from plain tcp");
  auto named = [&] {
    return c[0].ctx->stats(1).last_error.find("speaks the bare tcp protocol") !=
           std::string::npos;
  };
  ASSERT_TRUE(c.pump(named, 5000)) << c[0].ctx->stats(1).last_error;
  EXPECT_FALSE(c[0].ctx->peer_up(1));
  EXPECT_TRUE(c[0].controls.empty());
  EXPECT_TRUE(c[0].ups.empty());
}

}  // namespace
}  // namespace gsync::transport
