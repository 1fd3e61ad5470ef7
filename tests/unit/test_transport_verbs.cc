// SPDX-License-Identifier: Apache-2.0
//
// The verbs provider's parts that need no RDMA device: make_context's choice
// and its fallback to TCP (this machine's kernel has no RDMA at all), the
// registration cache against a fake registrar, and the message formats. The
// provider itself runs for real under soft-RoCE: tests/rxe/.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "daemon/transport/peering/context.h"
#include "daemon/transport/peering/frame.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/buffer.h"
#include "daemon/transport/verbs/device.h"
#include "daemon/transport/verbs/frame.h"
#include "tests/util/transport_harness.h"

namespace gsync::transport {
namespace {

using verbs::MrCache;
using verbs::Registration;

ContextOptions two_hosts() {
  ContextOptions o;
  o.identity = {"test", 1, "b"};
  o.cluster_key = std::string(kClusterKeyBytes, 'k');
  o.hosts = {{"h0", "127.0.0.1", 0, ""}, {"h1", "127.0.0.1", 1, ""}};
  o.self = 0;
  return o;
}

class LogCapture {
 public:
  LogCapture() : saved_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto l = std::make_shared<spdlog::logger>("capture", sink);
    l->set_pattern("[%l] %v");
    spdlog::set_default_logger(l);
  }
  ~LogCapture() { spdlog::set_default_logger(saved_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> saved_;
};

TEST(VerbsSelect, FallsBackToTcpWhenNoDeviceIsUsableAndSaysWhy) {
  verbs::DeviceChoice c;
  Status usable = verbs::probe({}, "127.0.0.1", &c);
  LogCapture log;
  Status err;
  auto ctx = make_context(two_hosts(), true, &err);
  ASSERT_TRUE(ctx) << err.message();
  if (usable) {
    EXPECT_EQ(ctx->stats(1).transport, "verbs");
    EXPECT_NE(log.text().find("transport: verbs on " + c.device), std::string::npos) << log.text();
  } else {
    // Here: ibv_get_device_list fails with ENOSYS (no RDMA in the kernel).
    EXPECT_EQ(ctx->stats(1).transport, "tcp");
    EXPECT_NE(log.text().find("[info] transport: tcp (" + usable.message() + ")"), std::string::npos)
        << log.text();
    EXPECT_FALSE(usable.message().empty());
  }
}

// transport = "tcp": still the peering context's protocol, with no fast link.
TEST(VerbsSelect, TcpWhenVerbsIsNotAskedFor) {
  LogCapture log;
  Status err;
  auto ctx = make_context(two_hosts(), false, &err);
  ASSERT_TRUE(ctx) << err.message();
  EXPECT_EQ(ctx->stats(1).transport, "tcp");
  EXPECT_NE(dynamic_cast<peering::PeeringContext*>(ctx.get()), nullptr);
  EXPECT_NE(log.text().find("transport: tcp (verbs not asked for) on every link"),
            std::string::npos)
      << log.text();
}

// One dialect: a daemon with transport = "tcp" and one with "auto" (the
// verbs context; here without a device) bring their link up, exchange
// control messages and one-sided writes both ways.
TEST(VerbsSelect, TcpAndAutoSpeakOneProtocol) {
  testing::Nodes c(2, 10000, 20);
  const auto ports = testing::free_ports(2);
  for (int i = 0; i < 2; i++) {
    ContextOptions o = two_hosts();
    o.hosts = {{"h0", "127.0.0.1", ports[0], ""}, {"h1", "127.0.0.1", ports[1], ""}};
    o.self = i;
    testing::Node& n = c.fresh(i);
    Status err;
    n.ctx = make_context(o, /*prefer_verbs=*/i == 0, &err);
    ASSERT_TRUE(n.ctx) << err.message();
    ASSERT_TRUE(n.start());
  }
  ASSERT_TRUE(c.pump([&] { return c.all_up(); })) << c[0].ctx->stats(1).last_error;
  // (A first connect may have been refused before the peer listened.)
  for (int i = 0; i < 2; i++)
    EXPECT_EQ(c[i].ctx->stats(1 - i).last_error.find("speaks"), std::string::npos)
        << c[i].ctx->stats(1 - i).last_error;
  c[0].ctx->send_control(1, "from auto");
  c[1].ctx->send_control(0, "from tcp");
  ASSERT_TRUE(c.pump([&] { return !c[0].controls.empty() && !c[1].controls.empty(); }));
  EXPECT_EQ(c[1].controls[0].second, "from auto");
  EXPECT_EQ(c[0].controls[0].second, "from tcp");
  testing::Mem dst0(4096), dst1(4096), src(4096);
  for (size_t b = 0; b < 4096; b++) src.p[b] = uint8_t(b * 7);
  Region r0 = c[0].ctx->register_region(dst0.p, 4096);
  Region r1 = c[1].ctx->register_region(dst1.p, 4096);
  c[0].ctx->write(1, src.p, 4096, r1.id, 0, 11, 1);
  c[1].ctx->write(0, src.p, 4096, r0.id, 0, 12, 2);
  ASSERT_TRUE(c.pump([&] {
    return c[0].landed.size() == 1 && c[1].landed.size() == 1 && c[0].ok_dones() == 1 &&
           c[1].ok_dones() == 1;
  }));
  EXPECT_EQ(c[1].landed[0].imm, 11u);
  EXPECT_EQ(c[0].landed[0].imm, 12u);
  EXPECT_EQ(std::memcmp(dst0.p, src.p, 4096), 0);
  EXPECT_EQ(std::memcmp(dst1.p, src.p, 4096), 0);
}

// The peering context (the verbs context's TCP bootstrap) and the plain TCP
// context alike: no key, no context.
TEST(VerbsSelect, AContextWithoutAKeyDoesNotStart) {
  ContextOptions o = two_hosts();
  o.cluster_key.clear();
  for (bool prefer_verbs : {true, false}) {
    Status err;
    auto ctx = make_context(o, prefer_verbs, &err);
    EXPECT_FALSE(ctx);
    EXPECT_NE(err.message().find("no cluster key"), std::string::npos) << err.message();
  }
}

TEST(VerbsSelect, RequiredVerbsFailsNamingTheReason) {
  verbs::DeviceChoice c;
  ContextOptions o = two_hosts();
  o.verbs.device = "no-such-device0";
  o.verbs.required = true;
  Status err;
  auto ctx = make_context(o, true, &err);
  EXPECT_FALSE(ctx);
  EXPECT_NE(err.message().find("transport verbs is required but unusable"), std::string::npos);
  Status why = verbs::probe(o.verbs, "127.0.0.1", &c);
  EXPECT_FALSE(why);
  EXPECT_NE(err.message().find(why.message()), std::string::npos) << err.message();
}

// --- the registration cache -------------------------------------------------

class FakeRegistrar : public verbs::Registrar {
 public:
  Status register_memory(uint8_t* base, uint64_t bytes, int, Registration* out) override {
    if (fail_next) {
      fail_next = false;
      return Status(GSYNC_ERR_NOMEM, "RLIMIT_MEMLOCK is 8 KiB");
    }
    regs++;
    live++;
    *out = {reinterpret_cast<void*>(uintptr_t(regs)), base, bytes, regs, regs + 1000};
    return Status::ok();
  }
  void deregister_memory(const Registration&) override { live--; }
  uint32_t regs = 0;
  int live = 0;
  bool fail_next = false;
};

// An anonymous mapping that is its own VMA whatever lies next to it: the
// kernel merges adjacent mappings of the same protection into one (and
// ASan's allocator places them side by side), which would make two
// Mappings one registration. A PROT_NONE page on each side keeps it apart.
struct Mapping {
  explicit Mapping(size_t n) : bytes(n) {
    const size_t page = 4096;
    void* all = mmap(nullptr, n + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (all == MAP_FAILED) return;
    guarded = static_cast<uint8_t*>(all);
    base = guarded + page;
    if (mprotect(base, n, PROT_READ | PROT_WRITE) != 0) base = nullptr;
  }
  ~Mapping() {
    if (guarded) munmap(guarded, bytes + 2 * 4096);
  }
  void unmap() {
    munmap(guarded, bytes + 2 * 4096);
    guarded = base = nullptr;
  }
  uint8_t* guarded = nullptr;
  uint8_t* base = nullptr;
  size_t bytes;
};

TEST(VerbsMrCache, OneRegistrationPerMappingReusedByEveryRangeInIt) {
  FakeRegistrar r;
  MrCache cache(r);
  Mapping m(1 << 20);
  Status err;
  auto* a = cache.acquire(m.base + 4096, 8192, &err);
  ASSERT_NE(a, nullptr);
  // The whole mapping was registered, not just the range. (The kernel may
  // have merged it with an adjacent anonymous mapping into one VMA, so the
  // registration covers at least the mapping.)
  const auto& reg = MrCache::registration(a);
  EXPECT_LE(reg.base, m.base);
  EXPECT_GE(reg.base + reg.bytes, m.base + m.bytes);
  for (int step = 0; step < 100; step++) {
    auto* b = cache.acquire(m.base + (step * 4096) % (m.bytes - 100), 100, &err);
    EXPECT_EQ(b, a);
    cache.release(b);
  }
  EXPECT_EQ(r.regs, 1u);
  EXPECT_EQ(cache.hits(), 100u);
  EXPECT_EQ(cache.misses(), 1u);
  cache.release(a);
  EXPECT_EQ(r.live, 1);  // cached, not dropped when unused
}

TEST(VerbsMrCache, MunmapMakesTheRegistrationStaleAndItGoesOnceUnused) {
  FakeRegistrar r;
  MrCache cache(r);
  Status err;
  auto m = std::make_unique<Mapping>(1 << 16);
  uint8_t* where = m->base;
  auto* a = cache.acquire(where, 64, &err);
  ASSERT_NE(a, nullptr);
  m->unmap();                 // the hook sees it...
  EXPECT_EQ(r.live, 1);       // ...but a is still in use
  // A new mapping, maybe at the same address: never the old registration.
  Mapping again(1 << 16);
  auto* b = cache.acquire(again.base, 64, &err);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b, a);
  EXPECT_EQ(r.regs, 2u);
  cache.release(a);
  EXPECT_EQ(r.live, 1);  // the stale one is gone
  cache.release(b);
}

TEST(VerbsMrCache, FailureIsReportedAndNotCached) {
  FakeRegistrar r;
  MrCache cache(r);
  Mapping m(1 << 16);
  r.fail_next = true;
  Status err;
  EXPECT_EQ(cache.acquire(m.base, 64, &err), nullptr);
  EXPECT_NE(err.message().find("RLIMIT_MEMLOCK"), std::string::npos);
  auto* a = cache.acquire(m.base, 64, &err);
  EXPECT_NE(a, nullptr);
  cache.release(a);
}

TEST(VerbsMrCache, CacheDestructionDeregistersEverything) {
  FakeRegistrar r;
  Mapping m1(1 << 16), m2(1 << 16);
  {
    MrCache cache(r);
    Status err;
    cache.release(cache.acquire(m1.base, 10, &err));
    cache.release(cache.acquire(m2.base, 10, &err));
    EXPECT_EQ(r.live, 2);
  }
  EXPECT_EQ(r.live, 0);
}

TEST(VerbsMemlock, ProblemNamesTheLimitAndTheUnitSetting) {
  // Root without a limit: nothing to say; with a tiny one, both names.
  std::string m = verbs::memlock_problem(~0ull >> 1);
  if (!m.empty()) {
    EXPECT_NE(m.find("RLIMIT_MEMLOCK"), std::string::npos);
    EXPECT_NE(m.find("LimitMEMLOCK"), std::string::npos);
  }
}

// --- message formats ------------------------------------------------------------

TEST(VerbsFrames, RoundTrip) {
  verbs::QpInfo q;
  q.qpn = 0x123456;
  q.psn = 77;
  q.lid = 9;
  q.gid[15] = 1;
  q.mtu = 3;
  q.link_layer = 2;
  q.recv_slots = 64;
  verbs::QpInfo q2;
  ASSERT_TRUE(verbs::decode(verbs::encode(q), &q2));
  EXPECT_EQ(q2.qpn, q.qpn);
  EXPECT_EQ(q2.gid[15], 1);
  EXPECT_EQ(q2.recv_slots, 64u);
  verbs::RegionInfo g{7, 0x7f0000001000, 1 << 20, 0xabc, "no memory"};
  verbs::RegionInfo g2;
  ASSERT_TRUE(verbs::decode(verbs::encode(g), &g2));
  EXPECT_EQ(g2.addr, g.addr);
  EXPECT_EQ(g2.rkey, g.rkey);
  EXPECT_EQ(g2.error, "no memory");
  uint32_t id = 0;
  ASSERT_TRUE(peering::decode_id(peering::encode_id(peering::Ctl::kRetire, 42), &id));
  EXPECT_EQ(id, 42u);
  EXPECT_FALSE(verbs::decode(std::string_view("Q\1\2"), &q2));  // short
}

}  // namespace
}  // namespace gsync::transport
