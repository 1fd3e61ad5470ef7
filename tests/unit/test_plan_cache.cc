// SPDX-License-Identifier: Apache-2.0
//
// The plan cache (daemon/pipeline/plan_cache.h) with the real schedule
// engine over the real TCP transport: two "hosts" in this process, each a
// control plane, an engine and a plan cache, driven by poll() from the test
// thread. A plan is built once per (job, key, shape, epoch) and reused step
// after step with the same regions; it is evicted, and its regions retired,
// when its buffer's arena closes, when the buffer moves, when the epoch
// changes and when an op on it fails - and a peer's write into a retired
// region then lands nowhere.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/cluster/cluster_key.h"
#include "daemon/cluster/control_plane.h"
#include "daemon/collective/engine.h"
#include "daemon/core/event_loop.h"
#include "daemon/core/wire_log.h"
#include "daemon/pipeline/plan_cache.h"
#include "tests/util/transport_harness.h"

namespace gsync::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kCount = 256 << 10;  // 1 MiB of float32: by rendezvous, in chunks
constexpr uint64_t kBytes = kCount * sizeof(float);

// Memory from mmap, as the daemon's arenas are.
struct Mem {
  explicit Mem(size_t n) : bytes(n) {
    p = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~Mem() { munmap(p, bytes); }
  float* f() const { return reinterpret_cast<float*>(p); }
  uint8_t* p;
  size_t bytes;
};

struct Host {
  Host(const ClusterFile& cluster, int self, const std::string& key_file) {
    cfg.cluster_key_file = key_file;
    cfg.transport = "tcp";
    cfg.poll_us = 0;
    cfg.algorithm = "ring";
    cfg.chunk_bytes = 256 << 10;
    ClusterFile c = cluster;
    c.self = self;
    cp = std::make_unique<cluster::ControlPlane>(cfg, c, loop);
    Status st = cp->start();
    EXPECT_TRUE(st) << st.message();
    engine = std::make_unique<collective::Engine>(*cp);
    st = cp->add_service(engine.get(), collective::Engine::claim());
    EXPECT_TRUE(st) << st.message();
    plans = std::make_unique<PlanCache>(*engine);
    plans->epoch_changed(cp->epoch());
  }
  ~Host() {
    if (cp) cp->remove_services();
  }
  DaemonConfig cfg;
  EventLoop loop;  // never run: the test polls the transport itself
  std::unique_ptr<cluster::ControlPlane> cp;
  std::unique_ptr<collective::Engine> engine;
  std::unique_ptr<PlanCache> plans;
};

class PlanCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ports = transport::testing::free_ports(2);
    ClusterFile cluster;
    cluster.name = "plans";
    for (int i = 0; i < 2; i++)
      cluster.hosts.push_back({fmt::format("h{}", i), "127.0.0.1", ports[size_t(i)], "r"});
    // Both hosts read one key file, as the daemons of a cluster do.
    char dir[] = "/tmp/gsync-plan-cache.XXXXXX";
    ASSERT_TRUE(mkdtemp(dir)) << strerror(errno);
    dir_ = dir;
    Status st = create_cluster_key(dir_ + "/cluster.key");
    ASSERT_TRUE(st) << st.message();
    for (int i = 0; i < 2; i++)
      hosts_.push_back(std::make_unique<Host>(cluster, i, dir_ + "/cluster.key"));
    ASSERT_TRUE(pump([&] { return h(0).cp->peer_up(1) && h(1).cp->peer_up(0); }));
    // The links coming up moved the epoch; the caches follow.
    for (auto& x : hosts_) x->plans->epoch_changed(x->cp->epoch());
  }

  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  Host& h(int i) { return *hosts_[size_t(i)]; }

  bool pump(const std::function<bool()>& pred, int timeout_ms = 10000) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred()) {
      if (Clock::now() > deadline) return false;
      std::vector<pollfd> fds;
      for (auto& x : hosts_) fds.push_back({x->cp->net().event_fd(), POLLIN, 0});
      ::poll(fds.data(), fds.size(), 5);
      for (auto& x : hosts_) x->cp->net().poll();
    }
    return true;
  }

  PlanKey key_for(int i, uint64_t key = 1) const {
    proto::OpShape shape;
    shape.count = kCount;
    return PlanKey{"job", key, shape, hosts_[size_t(i)]->cp->epoch()};
  }
  collective::PlanInputs inputs_for(int i) const {
    collective::PlanInputs in;
    in.shape.count = kCount;
    in.parts = {{0, "r"}, {1, "r"}};
    in.self = i;
    in.algorithm = "ring";
    in.chunk_bytes = 256 << 10;
    return in;
  }

  // One allreduce (sum) of data[i] on both hosts with plans from their
  // caches; returns the leases (still held) after checking the sums.
  // wire: each host's log of the op's transfers (none: not recorded).
  std::vector<PlanLease> step(uint64_t s, const std::vector<Mem*>& data,
                              const std::vector<uint64_t>& arenas, uint64_t key = 1,
                              const std::vector<WireLog*>& wire = {}) {
    std::vector<PlanLease> leases(2);
    std::vector<int> done(2, 0);
    for (int i = 0; i < 2; i++) {
      for (uint64_t e = 0; e < kCount; e++) data[size_t(i)]->f()[e] = float(i + 1) + float(e % 7);
      Buffer b;
      b.ptr = data[size_t(i)]->p;
      b.bytes = kBytes;
      b.arena = arenas[size_t(i)];
      Status err;
      leases[size_t(i)] = h(i).plans->lease(key_for(i, key), inputs_for(i), b, &err);
      EXPECT_TRUE(leases[size_t(i)]) << err.message();
    }
    for (int i = 0; i < 2; i++) {
      collective::EngineOp op;
      op.job = "job";
      op.id = {key, s};
      op.token = static_cast<uint32_t>(1000 + s);
      op.plan = leases[size_t(i)].plan;
      op.data = data[size_t(i)]->p;
      op.wire = wire.empty() ? nullptr : wire[size_t(i)];
      collective::EngineCallbacks cb;
      cb.done = [&done, i](const Status& st, double) {
        EXPECT_TRUE(st) << st.message();
        done[size_t(i)] = 1;
      };
      h(i).engine->begin(op, std::move(cb));
      h(i).engine->local_ready_upto(op.token, kCount);
    }
    EXPECT_TRUE(pump([&] { return done[0] && done[1]; }));
    for (int i = 0; i < 2; i++)
      for (uint64_t e = 0; e < kCount; e += 997)
        EXPECT_EQ(data[size_t(i)]->f()[e], 3.0f + 2.0f * float(e % 7)) << "host " << i << " @" << e;
    return leases;
  }

  // A write from host 1 into host 0's region id, then a whole allreduce on
  // the fence buffers over the same links: by then the write has long been
  // received (landed, or dropped).
  void write_into(uint32_t region, const Mem& src, Mem* fence0, Mem* fence1, uint64_t s) {
    uint64_t before = h(1).cp->net().stats(0).writes_sent;
    h(1).cp->net().write(0, src.p, 4096, region, 0, 0, 0);
    ASSERT_TRUE(pump([&] { return h(1).cp->net().stats(0).writes_sent > before; }));
    auto fence = step(s, {fence0, fence1}, {7, 8}, /*key=*/2);
    for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(fence[size_t(i)]), true, nullptr);
  }

  std::vector<std::unique_ptr<Host>> hosts_;
  std::string dir_;
};

TEST_F(PlanCacheTest, OnePlanServesEveryStepWithTheSameRegions) {
  Mem a(kBytes), b(kBytes);
  const collective::Plan* first = nullptr;
  uint32_t region = 0;
  for (uint64_t s = 0; s < 5; s++) {
    auto leases = step(s, {&a, &b}, {1, 2});
    if (s == 0) {
      first = leases[0].plan.get();
      region = leases[0].plan->data_region;
      EXPECT_NE(region, 0u);
    }
    EXPECT_EQ(leases[0].plan.get(), first) << "step " << s;
    EXPECT_EQ(leases[0].plan->data_region, region) << "step " << s;
    for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(leases[size_t(i)]), true, nullptr);
  }
  for (int i = 0; i < 2; i++) {
    PlanCacheStats st = h(i).plans->stats();
    EXPECT_EQ(st.misses, 1u) << "host " << i;
    EXPECT_EQ(st.hits, 4u) << "host " << i;
    EXPECT_EQ(st.evictions, 0u) << "host " << i;
    EXPECT_EQ(st.idle, 1u) << "host " << i;
  }
}

TEST_F(PlanCacheTest, ClosedArenaEvictsAndItsRegionTakesNoMoreWrites) {
  Mem a(kBytes), b(kBytes), f0(kBytes), f1(kBytes), junk(4096);
  auto leases = step(0, {&a, &b}, {1, 2});
  uint32_t region = leases[0].plan->data_region;
  for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(leases[size_t(i)]), true, nullptr);
  // While the plan is cached its region is live: a peer's write lands.
  std::memset(junk.p, 0x11, 4096);
  write_into(region, junk, &f0, &f1, 1);
  EXPECT_EQ(std::memcmp(a.p, junk.p, 4096), 0) << "the control write did not land";
  h(0).plans->arena_closed(1);
  EXPECT_EQ(h(0).plans->stats().idle, 1u) << "only the fence's plan is left";
  EXPECT_EQ(h(0).plans->stats().evictions, 1u);
  ASSERT_TRUE(pump([&] { return h(0).plans->stats().retiring == 0; }));
  std::memset(junk.p, 0x5a, 4096);
  std::vector<uint8_t> before(a.p, a.p + 4096);
  write_into(region, junk, &f0, &f1, 2);
  EXPECT_EQ(std::memcmp(a.p, before.data(), 4096), 0)
      << "a write into the evicted plan's region landed";
  // The next step of the tensor builds a new plan with a new region.
  leases = step(3, {&a, &b}, {1, 2});
  EXPECT_NE(leases[0].plan->data_region, region);
  EXPECT_EQ(h(0).plans->stats().misses, 3u);  // the first plan, the fence's, the new one
}

TEST_F(PlanCacheTest, AMovedBufferGetsANewRegionAndTheOldOneIsRetired) {
  Mem a(kBytes), a2(kBytes), b(kBytes), f0(kBytes), f1(kBytes), junk(4096);
  auto leases = step(0, {&a, &b}, {1, 2});
  uint32_t region = leases[0].plan->data_region;
  for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(leases[size_t(i)]), true, nullptr);
  // The rank freed its buffer and gives another for the same tensor.
  leases = step(1, {&a2, &b}, {1, 2});
  EXPECT_EQ(h(0).plans->stats().hits, 1u) << "the plan is kept, only its region follows";
  EXPECT_NE(leases[0].plan->data_region, region);
  for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(leases[size_t(i)]), true, nullptr);
  std::memset(junk.p, 0x5a, 4096);
  std::vector<uint8_t> before(a.p, a.p + 4096);
  write_into(region, junk, &f0, &f1, 2);
  EXPECT_EQ(std::memcmp(a.p, before.data(), 4096), 0) << "a write into the old buffer's region landed";
}

TEST_F(PlanCacheTest, AnEpochChangeEvictsIdlePlansAndRefusesOldOnes) {
  Mem a(kBytes), b(kBytes);
  auto leases = step(0, {&a, &b}, {1, 2});
  for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(leases[size_t(i)]), true, nullptr);
  EXPECT_EQ(h(0).plans->stats().idle, 1u);
  h(0).plans->epoch_changed(h(0).cp->epoch() + 1);
  EXPECT_EQ(h(0).plans->stats().idle, 0u);
  EXPECT_EQ(h(0).plans->stats().evictions, 1u);
  // A plan leased under the old epoch is not cached when given back.
  Buffer buf;
  buf.ptr = a.p;
  buf.bytes = kBytes;
  buf.arena = 1;
  Status err;
  PlanLease old = h(0).plans->lease(key_for(0), inputs_for(0), buf, &err);
  ASSERT_TRUE(old) << err.message();
  h(0).plans->give_back(std::move(old), true, nullptr);
  EXPECT_EQ(h(0).plans->stats().idle, 0u);
  EXPECT_EQ(h(0).plans->stats().evictions, 2u);
}

TEST_F(PlanCacheTest, AFailedOpEvictsItsPlanAndReleasesOnlyOnceRetired) {
  Mem a(kBytes), b(kBytes);
  auto leases = step(0, {&a, &b}, {1, 2});
  h(1).plans->give_back(std::move(leases[1]), true, nullptr);
  bool released = false;
  h(0).plans->give_back(std::move(leases[0]), false, [&] { released = true; });
  ASSERT_TRUE(pump([&] { return released; }));
  EXPECT_EQ(h(0).plans->stats().idle, 0u);
  EXPECT_EQ(h(0).plans->stats().evictions, 1u);
  EXPECT_EQ(h(0).plans->stats().retiring, 0u);
}

// Each host's wire log (core/wire_log.h) of a 4-chunk ring op: a send of
// each chunk to the peer, completed, and an arrival of each chunk from it,
// all between the op's start and its end; an op given no log runs the same.
TEST_F(PlanCacheTest, TheEngineLogsEachChunkOnTheWire) {
  Mem a(kBytes), b(kBytes);
  WireLog logs[2];
  for (auto& l : logs) l.reset();
  const auto before = Clock::now();
  auto leases = step(0, {&a, &b}, {1, 2}, 1, {&logs[0], &logs[1]});
  const auto after = Clock::now();
  const size_t chunks = leases[0].plan->nchunks;
  EXPECT_EQ(chunks, 4u);
  for (int i = 0; i < 2; i++) {
    std::set<uint32_t> sent, arrived;
    for (const WireEvent& e : logs[i].events()) {
      EXPECT_EQ(e.peer, 1 - i) << "host " << i;
      EXPECT_GE(e.at, before);
      EXPECT_LE(e.at, after);
      const std::string what = e.what;
      EXPECT_TRUE(what == "partial sum" || what == "final sum") << what;
      if (e.sent) {
        sent.insert(e.chunk);
        EXPECT_GE(e.done, e.at) << "host " << i << " chunk " << e.chunk << ": no completion";
        EXPECT_LE(e.done, after);
      } else {
        arrived.insert(e.chunk);
        EXPECT_EQ(e.done, Clock::time_point{});
      }
    }
    EXPECT_EQ(logs[i].events().size(), 2 * chunks) << "host " << i;
    EXPECT_EQ(sent.size(), chunks) << "host " << i;
    EXPECT_EQ(arrived.size(), chunks) << "host " << i;
    EXPECT_EQ(logs[i].dropped(), 0u);
  }
  for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(leases[size_t(i)]), true, nullptr);
  // Without a log (ops not recorded) the next step runs and the logs stay as they were.
  leases = step(1, {&a, &b}, {1, 2});
  EXPECT_EQ(logs[0].events().size(), 2 * chunks);
  for (int i = 0; i < 2; i++) h(i).plans->give_back(std::move(leases[size_t(i)]), true, nullptr);
}

// The bound: the first kMaxEvents transfers kept, the rest counted; a
// reset empties the log and keeps its memory.
TEST(WireLog, KeepsItsBoundAndCountsTheRest) {
  WireLog log;
  EXPECT_FALSE(log.reserved());
  log.reset();
  EXPECT_TRUE(log.reserved());
  const auto t0 = Clock::now();
  uint32_t last = 0;
  for (uint32_t c = 0; c < WireLog::kMaxEvents + 88; c++) {
    uint32_t ref = log.add(true, 1, c, "partial sum", t0);
    EXPECT_EQ(ref, c < WireLog::kMaxEvents ? c + 1 : 0u) << c;
    if (ref) last = ref;
  }
  EXPECT_EQ(log.events().size(), WireLog::kMaxEvents);
  EXPECT_EQ(log.dropped(), 88u);
  log.done(last, t0 + std::chrono::microseconds(3));
  log.done(0, t0);  // a dropped send's completion: nothing
  EXPECT_EQ(log.events().back().done, t0 + std::chrono::microseconds(3));
  EXPECT_EQ(log.events().back().chunk, WireLog::kMaxEvents - 1);
  const void* memory = log.events().data();
  log.reset();
  EXPECT_TRUE(log.events().empty());
  EXPECT_EQ(log.dropped(), 0u);
  EXPECT_EQ(log.events().data(), memory);
}

}  // namespace
}  // namespace gsync::pipeline

namespace gsync::pipeline {
namespace {

// gsyncctl ops shows what an op's plan did (issue #38, item 8): a tensor
// below the chunk size goes as one chunk of its own size, a last chunk
// shorter than the others says so, a barrier moves no data.
TEST(PlanDescribe, SaysWhatWasDoneNotWhatWasConfigured) {
  struct Case {
    const char* algo;
    proto::Opcode opcode;
    uint64_t count;
    const char* want;
  };
  const Case cases[] = {
      {"ring", proto::Opcode::kAllreduce, 8192, "ring, 1 chunk of 32768 bytes"},
      {"hier", proto::Opcode::kAllreduce, 8192, "hier, 1 chunk of 32768 bytes"},
      {"doubling", proto::Opcode::kAllreduce, 8192, "doubling (eager), 1 chunk of 32768 bytes"},
      {"ring", proto::Opcode::kAllreduce, (2 * (256 << 10) + 4096) / 4,
       "ring, 3 chunks of 262144 bytes (the last 4096)"},
      {"tree", proto::Opcode::kBarrier, 0, "tree, no data"},
  };
  for (const Case& c : cases) {
    collective::PlanInputs in;
    in.shape.opcode = c.opcode;
    in.shape.count = c.count;
    in.parts = {{0, "r1"}, {1, "r1"}, {2, "r2"}, {3, "r2"}};
    in.self = 0;
    in.algorithm = c.algo;
    in.chunk_bytes = 256 << 10;
    EXPECT_EQ(collective::build_plan(in)->describe(), c.want) << c.algo << " " << c.count;
  }
}

}  // namespace
}  // namespace gsync::pipeline
