// SPDX-License-Identifier: Apache-2.0
//
// Daemons of the test bed with their links inside a rack over DPDK
// (docs/transport.md, "The DPDK provider"): over net_memif (a shared-memory
// link per rack, two hosts each) and over net_af_packet on each host's
// veth in its network namespace, TCP across racks. Real ranks, every
// element of every result checked; loss injected on the receive path; junk
// frames from another host on the wire; a daemon killed mid-transfer and
// started again.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "daemon/transport/dpdk/frame.h"
#include "tests/integration/allreduce_cases.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tools/testbed/testbed.h"

namespace gsync::test {
namespace {

using nlohmann::json;

std::unique_ptr<testbed::Testbed> dpdk_bed(const std::vector<int>& racks, const std::string& vdev,
                                           const std::string& algo,
                                           std::vector<std::string> extra = {},
                                           uint32_t payload = 0, bool zero_copy = false) {
  testbed::Options o;
  o.rack_sizes = racks;
  o.dpdk = vdev;
  o.dpdk_payload = payload;
  o.memif_zero_copy = zero_copy;
  o.loopback = vdev == "memif";  // memif needs no namespaces: the quicker bed
  o.daemon_args = {"--op-timeout-ms", "30000", "--algo", algo};
  o.daemon_args.insert(o.daemon_args.end(), extra.begin(), extra.end());
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  EXPECT_TRUE(st) << st.message();
  return bed;
}

// Host h's view of host `of` (gsyncctl peers).
json peer(const testbed::Testbed& bed, int h, int of) {
  json j = admin_json(bed.admin_socket(h), "peers");
  if (!j.is_object() || !j.contains("peers")) return json::object();  // not answering (yet)
  for (const auto& p : j["peers"])
    if (p["host"] == bed.host_id(of)) return p;
  return json::object();
}

// Every peer in host h's rack is linked over dpdk, every other over tcp.
void expect_links(const testbed::Testbed& bed) {
  for (int h = 0; h < bed.hosts(); h++)
    for (int o = 0; o < bed.hosts(); o++) {
      if (o == h) continue;
      json p = peer(bed, h, o);
      std::string want = bed.rack(h) == bed.rack(o) ? "dpdk" : "tcp";
      EXPECT_EQ(p.value("transport", ""), want)
          << bed.host_id(h) << " -> " << bed.host_id(o) << ": " << p.dump();
    }
}

std::vector<OpCase> sizes_and_dtypes() {
  std::vector<OpCase> cases = every_dtype_and_op(30011);
  for (size_t count : {size_t{1}, size_t{359}, size_t{4097}, size_t{1000003}, size_t{16} << 20})
    cases.push_back({GSYNC_FLOAT32, GSYNC_SUM, count});
  return cases;
}

// gsyncd carries no DPDK: its provider is a plugin (factory.cc). Where the
// plugin is not (GSYNC_PLUGIN_DIR names the only place looked), a daemon
// that must run DPDK does not start, and says what to install.
TEST(DpdkCluster, WithoutItsPluginADaemonRefusesAndNamesThePackage) {
  ASSERT_EQ(setenv("GSYNC_PLUGIN_DIR", "/nonexistent/gsync-plugins", 1), 0);
  testbed::Options o;
  o.rack_sizes = {2};
  o.dpdk = "memif";
  o.loopback = true;
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  unsetenv("GSYNC_PLUGIN_DIR");
  ASSERT_FALSE(st) << "daemons started with no DPDK provider to load";
  EXPECT_NE(st.message().find("the DPDK provider is not installed (package gsyncd-dpdk"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("/nonexistent/gsync-plugins/gsync-transport-dpdk.so: absent"),
            std::string::npos)
      << st.message();
}

TEST(DpdkCluster, MemifPairEveryDtypeAndSize) {
  auto bed = dpdk_bed({2}, "memif", "ring");
  ASSERT_TRUE(bed);
  run_job(*bed, "memif", {1, 2}, sizes_and_dtypes());
  expect_links(*bed);
  json p = peer(*bed, 0, 1);
  EXPECT_GT(p["dpdk"].value("frames_received", 0), 40000) << "the 64 MiB op did not go over dpdk";
  EXPECT_EQ(p["dpdk"].value("port", ""), "net_memif0");
  for (int h = 0; h < bed->hosts(); h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
}

// The receive poll on a dedicated lcore ([dpdk] rx_lcore): the same
// results, every link on dpdk, the lcore named in gsyncctl peers. (Its
// wake-up of an idle event loop is tested where the test controls who
// polls: test_dpdk_provider.cc, DpdkRxLcore.)
TEST(DpdkCluster, MemifPairWithTheReceivePollOnItsOwnLcore) {
  auto bed = dpdk_bed({2}, "memif", "ring", {"--dpdk-rx-lcore", "any"});
  ASSERT_TRUE(bed);
  std::vector<OpCase> cases = every_dtype_and_op(4097);
  cases.push_back({GSYNC_FLOAT32, GSYNC_SUM, 1});
  cases.push_back({GSYNC_FLOAT32, GSYNC_SUM, size_t{16} << 20});
  run_job(*bed, "rx-lcore", {1, 2}, cases);
  expect_links(*bed);
  for (int h = 0; h < 2; h++) {
    json d = peer(*bed, h, 1 - h)["dpdk"];
    EXPECT_EQ(d.value("rx_lcore", "").rfind("lcore ", 0), 0u) << d.dump();
    EXPECT_NE(d.value("rx_lcore", "").find("on any CPU"), std::string::npos) << d.dump();
    EXPECT_GT(d.value("frames_received", 0), 10000) << d.dump();
    EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
  }
}

// Jumbo frames over memif: the test bed sizes memif's buffers (bsize) for
// 8936 bytes of payload, the daemons take it (memif has no MTU to set), and
// a 64 MiB op goes in about a sixth of the frames.
TEST(DpdkCluster, MemifPairWithJumboFrames) {
  auto bed = dpdk_bed({2}, "memif", "ring", {}, 8936);
  ASSERT_TRUE(bed);
  std::vector<OpCase> cases = every_dtype_and_op(30011);
  cases.push_back({GSYNC_FLOAT32, GSYNC_SUM, 8935});
  cases.push_back({GSYNC_FLOAT32, GSYNC_SUM, size_t{16} << 20});
  run_job(*bed, "jumbo", {1, 1}, cases);
  expect_links(*bed);
  json status = admin_json(bed->admin_socket(0), "status");
  EXPECT_NE(status.dump().find("8936 bytes per frame"), std::string::npos) << status.dump();
  json d = peer(*bed, 0, 1)["dpdk"];
  // The 64 MiB op over a 2-host ring brings each host 64 MiB (half in the
  // reduce-scatter, half in the all-gather): 7510 frames of 8936 bytes
  // (46 733 of 1436); the smaller ops and resends add a few hundred.
  EXPECT_GT(d.value("frames_received", 0), 7510) << d.dump();
  EXPECT_LT(d.value("frames_received", 0), 14000) << d.dump();
  EXPECT_EQ(d.value("port_dropped", -1), 0) << d.dump();
  for (int h = 0; h < 2; h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
}

// memif's zero-copy client sends its packet buffers' own memory, which its
// peer maps: a payload sent by reference from a tensor would arrive as
// whatever lies at that offset in the peer's mapping (found so: every
// element of a 64 MiB op wrong). The provider copies payloads there.
TEST(DpdkCluster, MemifZeroCopyClientGetsEveryResultRight) {
  auto bed = dpdk_bed({2}, "memif", "ring", {}, 0, true);
  ASSERT_TRUE(bed);
  run_job(*bed, "zero-copy", {1, 1},
          {{GSYNC_FLOAT32, GSYNC_SUM, 4097}, {GSYNC_BFLOAT16, GSYNC_AVG, 100003},
           {GSYNC_FLOAT32, GSYNC_SUM, size_t{4} << 20}});
  expect_links(*bed);
  // The client copies its payloads; the server (no zero-copy there) still
  // sends them by reference.
  json client = admin_json(bed->admin_socket(1), "status");
  EXPECT_EQ(client.dump().find("payload sent by reference"), std::string::npos) << client.dump();
  json server = admin_json(bed->admin_socket(0), "status");
  EXPECT_NE(server.dump().find("payload sent by reference"), std::string::npos) << server.dump();
  for (int h = 0; h < 2; h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
}

class AfPacket : public ::testing::TestWithParam<std::string> {};

// Two racks of two: dpdk inside each rack, tcp between them.
TEST_P(AfPacket, TwoRacksDpdkInsideTcpAcross) {
  auto bed = dpdk_bed({2, 2}, "af_packet", GetParam());
  ASSERT_TRUE(bed);
  std::vector<OpCase> cases = every_dtype_and_op(30011);
  cases.push_back({GSYNC_FLOAT32, GSYNC_SUM, size_t{4} << 20});
  run_job(*bed, "afp", {1, 2, 1, 1}, cases);
  expect_links(*bed);
  for (int h = 0; h < bed->hosts(); h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
}

INSTANTIATE_TEST_SUITE_P(DpdkCluster, AfPacket, ::testing::Values("ring", "hier", "direct"));

TEST(DpdkCluster, OnePercentLossIsRecoveredAndEveryResultIsRight) {
  auto bed = dpdk_bed({2}, "memif", "ring", {"--dpdk-drop-ppm", "10000"});
  ASSERT_TRUE(bed);
  run_job(*bed, "lossy", {1, 1},
          {{GSYNC_FLOAT32, GSYNC_SUM, size_t{16} << 20}, {GSYNC_FLOAT32, GSYNC_SUM, 4097},
           {GSYNC_BFLOAT16, GSYNC_AVG, size_t{3} << 20}});
  for (int h = 0; h < 2; h++) {
    json d = peer(*bed, h, 1 - h)["dpdk"];
    EXPECT_GT(d.value("frames_resent", 0), 0) << d.dump();
    EXPECT_GT(d.value("port_dropped", 0), 0) << "the drop hook dropped nothing: " << d.dump();
  }
}

// Raw frames from host 2's namespace to host 1's port: other traffic,
// truncated, oversized, malformed, another cluster's, an unknown link, a
// sequence number far outside the window. Each is dropped and counted; the
// link and the daemon go on.
std::vector<std::string> junk_frames(const testbed::Testbed& bed, const uint8_t dst[6],
                                     const uint8_t src[6], uint32_t link) {
  using namespace transport::dpdk;
  auto frame = [&](FrameHeader h, size_t payload) {
    std::string f(kFrameOverhead + payload, '\x5a');
    put_headers(reinterpret_cast<uint8_t*>(f.data()), dst, src, h);
    return f;
  };
  FrameHeader data;
  data.type = uint8_t(FrameType::kData);
  data.cluster = cluster_tag(bed.name());
  data.link = link;
  data.length = 100;
  data.region = 1;
  std::vector<std::string> out;
  std::string other = frame(data, 100);
  other[12] = 0x08, other[13] = 0x00;  // IPv4 junk
  out.push_back(other);
  out.push_back(frame(data, 100).substr(0, 40));  // truncated
  out.push_back(frame(data, 100) + "trailing");   // oversized
  FrameHeader bad = data;
  bad.magic = 0xdeadbeef;
  out.push_back(frame(bad, 100));
  FrameHeader other_cluster = data;
  other_cluster.cluster ^= 1;
  out.push_back(frame(other_cluster, 100));
  FrameHeader no_link = data;
  no_link.link = link ^ 0x55550000;
  out.push_back(frame(no_link, 100));
  FrameHeader far = data;
  far.seq = 0x80000000u;
  out.push_back(frame(far, 100));
  std::mt19937 rng(1);
  for (int i = 0; i < 20; i++) {
    std::string r(60 + rng() % 1400, '\0');
    for (auto& c : r) c = char(rng());
    std::memcpy(r.data(), dst, 6);
    r[12] = char(0x88), r[13] = char(0xb5);  // ours by ethertype, junk after
    out.push_back(r);
  }
  return out;
}

bool parse_mac(const std::string& text, uint8_t out[6]) {
  unsigned v[6];
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
    return false;
  for (int i = 0; i < 6; i++) out[i] = uint8_t(v[i]);
  return true;
}

TEST(DpdkCluster, JunkOnTheWireIsDroppedAndCounted) {
  auto bed = dpdk_bed({2}, "af_packet", "ring");
  ASSERT_TRUE(bed);
  run_job(*bed, "before", {1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 100000}});
  json to = peer(*bed, 1, 0)["dpdk"];  // host 2's view of host 1
  uint8_t dst[6], src[6];
  ASSERT_TRUE(parse_mac(to.value("remote_mac", ""), dst)) << to.dump();
  ASSERT_TRUE(parse_mac(to.value("mac", ""), src)) << to.dump();
  uint32_t link = to.value("remote_link", 0u);
  uint64_t dropped_before = peer(*bed, 0, 1)["dpdk"].value("port_dropped", uint64_t{0});
  std::vector<std::string> frames = junk_frames(*bed, dst, src, link);
  pid_t pid = bed->spawn_in_host(1, [&] {
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) return 2;
    sockaddr_ll a{};
    a.sll_family = AF_PACKET;
    a.sll_ifindex = int(if_nametoindex("eth0"));
    a.sll_halen = 6;
    std::memcpy(a.sll_addr, dst, 6);
    for (const auto& f : frames)
      if (sendto(fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) return 3;
    return 0;
  });
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the junk sender failed: " << status;
  // Other traffic counts as well (the kernel's own frames on eth0): at
  // least the junk sent.
  ASSERT_TRUE(wait_until([&] {
    return peer(*bed, 0, 1)["dpdk"].value("port_dropped", uint64_t{0}) >=
           dropped_before + frames.size();
  })) << peer(*bed, 0, 1).dump();
  json by = peer(*bed, 0, 1)["dpdk"]["port_dropped_by_reason"];
  for (const char* why : {"foreign", "truncated", "oversized", "malformed", "cluster", "link", "window"})
    EXPECT_GT(by.value(why, 0), 0) << why << " frames were not counted: " << by.dump();
  run_job(*bed, "after", {1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 1000003}});
  EXPECT_TRUE(bed->daemon_alive(0)) << bed->daemon_log(0);
  EXPECT_EQ(peer(*bed, 0, 1).value("connects", 0), 1) << "the junk took the link down";
}

// A daemon killed in the middle of a 64 MiB op: the other's ranks fail
// naming it; started again, the pair links up over dpdk and a new job
// completes. Host 2 is its rack's memif client: a new one connects to the
// server that stayed (a server started again would leave the client
// without a link: DPDK 22.11's memif client does not reconnect).
class Killed : public ::testing::TestWithParam<std::string> {};

TEST_P(Killed, ADaemonKilledMidTransferIsReplaced) {
  auto bed = dpdk_bed({2}, GetParam(), "ring");
  ASSERT_TRUE(bed);
  auto p = places({1, 1});
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_place(*bed, "killed", p, r, &comm, 80 << 20) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 64 << 20, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (uint64_t step = 0; step < 200; step++) {
      gsync_request_t* req;
      if (gsync_allreduce(comm, 1, step, buf, 16 << 20, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) != 0)
        return 0;  // the daemon is gone
      if (r == 0 && step == 2) bed->kill_daemon(1, SIGKILL);
      int rc = gsync_wait(req, 30000);
      std::string why = gsync_request_error(req);
      gsync_request_free(req);
      if (rc != 0) {
        report(why + "\n");
        return 0;
      }
    }
    return 1;  // never failed: the kill did not land mid-transfer
  }, 120);
  EXPECT_EQ(res[0].code, 0) << res[0].output;
  EXPECT_NE(res[0].output.find(bed->host_id(1)), std::string::npos)
      << "host 1's rank was not told which host it lost: " << res[0].output;
  // The rank's kill could not reap its sibling: the bed does, here.
  bed->kill_daemon(1, SIGKILL);
  Status st = bed->start_daemon(1);
  ASSERT_TRUE(st) << st.message();
  ASSERT_TRUE(wait_until([&] { return peer(*bed, 0, 1).value("state", "") == "up"; }, 20000))
      << peer(*bed, 0, 1).dump() << "\n" << bed->daemon_log(1);
  run_job(*bed, "replaced", {1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, size_t{16} << 20}});
  expect_links(*bed);
}

INSTANTIATE_TEST_SUITE_P(DpdkCluster, Killed, ::testing::Values("memif", "af_packet"));

}  // namespace
}  // namespace gsync::test
