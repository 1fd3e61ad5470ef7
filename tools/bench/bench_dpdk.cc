// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider's write throughput next to the PMD's own frame rate on
// the same ports, in the same run: one process, the two ends of a
// net_memif link (no hugepages, no NIC), one thread driving both.
//   1. the PMD alone: full-size frames (the provider's frame size) sent on
//      one port and taken off the other, buffers only allocated and freed;
//   2. the provider: 64 MiB writes from one context to the other over the
//      same ports, every frame built, copied, acknowledged and placed.
// The figure is (2) in frames per second over (1): what the reliability,
// the copies and the event-loop shape cost. docs/performance.md, "DPDK".
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/dpdk/context.h"
#include "tests/util/transport_harness.h"

namespace {

using namespace gsync;
using namespace gsync::transport;
using Clock = std::chrono::steady_clock;

// Bytes of payload a frame (--payload; 0: the MTU's, 1436).
uint32_t g_payload = 0;

std::string eal_args() {
  // memif's buffers hold a whole frame (docs/transport.md, "Frame size").
  std::string bsize = g_payload > 1440
                          ? fmt::format(",bsize={}", (g_payload + dpdk::kFrameOverhead + 1023) /
                                                         1024 * 1024)
                          : "";
  return fmt::format("--no-huge --no-pci -m 512 --log-level=lib.eal:error "
                     "--vdev=net_memif0,role=server,socket=/tmp/gsync-bench-dpdk-{0}.sock{1} "
                     "--vdev=net_memif1,role=client,socket=/tmp/gsync-bench-dpdk-{0}.sock{1}",
                     getpid(), bsize);
}

ContextOptions::Dpdk port_options(const char* port) {
  ContextOptions::Dpdk o;
  o.wanted = o.required = true;
  o.eal_args = eal_args();
  o.port = port;
  o.payload = g_payload;
  return o;
}

// The PMD alone: frames of `bytes` from port a to port b for `secs`. With
// `copy`, each frame's payload is copied in from a 64 MiB buffer and out
// into another, as anything that moves a tensor must (the provider does
// exactly these two copies); without, buffers are only allocated and freed.
double pmd_frames_per_s(dpdk::Device& a, dpdk::Device& b, size_t bytes, double secs, bool copy) {
  for (auto until = Clock::now() + std::chrono::seconds(5); !(a.link_up() && b.link_up());)
    if (Clock::now() > until) return 0;
  const size_t kLen = 64 << 20, payload = bytes - dpdk::kFrameOverhead;
  std::vector<uint8_t> src(copy ? kLen : 0, 1), dst(copy ? kLen : 0);
  size_t in = 0, out = 0;
  rte_mbuf* tx[32];
  rte_mbuf* rx[64];
  uint64_t got = 0;
  auto t0 = Clock::now();
  auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
  while (Clock::now() < end) {
    if (rte_pktmbuf_alloc_bulk(a.pool(), tx, 32) == 0) {
      for (auto* m : tx) {
        char* p = rte_pktmbuf_append(m, uint16_t(bytes));
        if (!copy) continue;
        std::memcpy(p + dpdk::kFrameOverhead, src.data() + in, payload);
        in = in + 2 * payload > kLen ? 0 : in + payload;
      }
      uint16_t sent = rte_eth_tx_burst(a.port(), 0, tx, 32);
      rte_pktmbuf_free_bulk(tx + sent, 32u - sent);
    }
    uint16_t n = b.rx(rx, 64);
    for (uint16_t i = 0; copy && i < n; i++) {
      std::memcpy(dst.data() + out, rte_pktmbuf_mtod_offset(rx[i], uint8_t*, dpdk::kFrameOverhead),
                  payload);
      out = out + 2 * payload > kLen ? 0 : out + payload;
    }
    got += n;
    rte_pktmbuf_free_bulk(rx, n);
  }
  return double(got) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// The provider: 64 MiB writes from node 0 to node 1 for `secs`.
double provider_bytes_per_s(double secs) {
  transport::testing::Nodes nodes(2, 20000, 0);
  auto ports = transport::testing::free_ports(2);
  ContextOptions base;
  base.identity = {"bench", 1, "b"};
  base.cluster_key = transport::testing::test_key();
  for (int i = 0; i < 2; i++)
    base.hosts.push_back({fmt::format("h{}", i), "127.0.0.1", ports[size_t(i)], "r1"});
  for (int i = 0; i < 2; i++) {
    ContextOptions o = base;
    o.self = i;
    o.dpdk = port_options(i == 0 ? "net_memif0" : "net_memif1");
    Status st;
    nodes.fresh(i).ctx = make_context(o, false, &st);
    if (!nodes[i].ctx || !nodes[i].start()) {
      std::fprintf(stderr, "bench_dpdk: %s\n", st.message().c_str());
      return 0;
    }
  }
  if (!nodes.pump([&] { return nodes.all_up(); })) return 0;
  const size_t kLen = 64 << 20;
  std::vector<uint8_t> src(kLen, 1), dst(kLen);
  Region r = nodes[1].ctx->register_region(dst.data(), kLen);
  uint64_t cookie = 0, bytes = 0;
  auto t0 = Clock::now();
  auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
  while (Clock::now() < end) {
    size_t before = nodes[0].ok_dones();
    nodes[0].ctx->write(1, src.data(), kLen, r.id, 0, cookie, cookie);
    cookie++;
    if (!nodes.pump([&] { return nodes[0].ok_dones() > before; })) return 0;
    bytes += kLen;
  }
  return double(bytes) / std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  // --provider-only: the provider alone, for a profile of it; --payload N:
  // frames of N bytes of payload (jumbo frames past 1436).
  bool provider_only = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--provider-only") provider_only = true;
    else if (a == "--payload" && i + 1 < argc) g_payload = uint32_t(std::stoul(argv[++i]));
    else {
      std::fprintf(stderr, "usage: bench_dpdk [--provider-only] [--payload 64..9000]\n");
      return 2;
    }
  }
  if (g_payload != 0 && (g_payload < 64 || g_payload > 9000)) {
    std::fprintf(stderr, "bench_dpdk: --payload must be 64 to 9000\n");
    return 2;
  }
  // The frame the provider sends on memif: the MTU of 1500 plus the
  // Ethernet header, or the payload asked for and its headers.
  size_t frame = g_payload != 0 ? g_payload + dpdk::kFrameOverhead : 1500 + dpdk::kEtherHeaderBytes;
  size_t payload = frame - dpdk::kFrameOverhead;
  std::printf("# one process, one thread: net_memif0 (server) -> net_memif1 (client), "
              "%zu-byte frames (%zu bytes of payload)\n", frame, payload);
  std::printf("# %-28s %12s %12s %10s\n", "what", "Mframes/s", "GB/s", "x PMD");
  double p = 0, pc = 0;
  if (!provider_only) {
    std::unique_ptr<dpdk::Device> a, b;
    Status st = dpdk::Device::open(port_options("net_memif0"), "gsync-bench", &a);
    if (st) st = dpdk::Device::open(port_options("net_memif1"), "gsync-bench", &b);
    if (!st) {
      std::fprintf(stderr, "bench_dpdk: %s\n", st.message().c_str());
      return 1;
    }
    p = pmd_frames_per_s(*a, *b, frame, 3.0, false);
    pc = pmd_frames_per_s(*a, *b, frame, 3.0, true);
    // The provider's contexts open the same ports again when these go.
    std::printf("  %-28s %12.3f %12.3f %10s\n", "pmd (tx + rx, no copies)", p / 1e6,
                p * double(frame) / 1e9, "1.00");
    std::printf("  %-28s %12.3f %12.3f %10.2f\n", "pmd + payload copied in/out", pc / 1e6,
                pc * double(frame) / 1e9, pc / p);
  }
  double bytes = provider_bytes_per_s(3.0);
  double frames = bytes / double(payload);
  std::printf("  %-28s %12.3f %12.3f %10.2f\n", "provider 64 MiB writes", frames / 1e6, bytes / 1e9,
              p > 0 ? frames / p : 0.0);
  if (pc > 0) std::printf("# provider / (pmd + copies): %.2f\n", frames / pc);
  return (p > 0 || provider_only) && bytes > 0 ? 0 : 1;
}
