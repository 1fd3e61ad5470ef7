// SPDX-License-Identifier: Apache-2.0
//
// The parameter server (docs/parameter-server.md) on real daemons: shards on
// 1 to 4 hosts, the optimizers' results bit for bit against a reference that
// does the documented fp32 operations in the documented order, the three
// sync modes' guarantees over thousands of clocks with random delays, and
// requests that are refused without changing anything.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "tests/integration/bed_util.h"
#include "tests/integration/ps_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using Clock = std::chrono::steady_clock;

// Every rank declares, then push_pulls `clocks` times; reports the hash of
// its final parameters and checks them against the reference, bit for bit.
int train_rank(const testbed::Testbed& bed, const std::string& job, const std::vector<int>& per_host,
               int rank, const PsRun& s, size_t n, uint64_t clocks) {
  auto p = places(per_host);
  gsync_comm_t* comm;
  RANK_CHECK(connect_ps(bed, job, p, rank, s, &comm) == 0, "{}", gsync_last_error());
  void* mem;
  RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "{}", gsync_last_error());
  auto* buf = static_cast<float*>(mem);
  for (size_t i = 0; i < n; i++) buf[i] = rank == 0 ? init(i) : -1.0f;
  gsync_request_t* req;
  RANK_CHECK(gsync_ps_declare(comm, 5, buf, n, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
             gsync_last_error());
  RANK_CHECK(gsync_wait(req, 60000) == 0, "declare: {}", gsync_request_error(req));
  gsync_request_free(req);
  for (size_t i = 0; i < n; i++) RANK_CHECK(buf[i] == init(i), "initial value {} on rank {}", i, rank);
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  po.weight = weight_of(rank);
  for (uint64_t c = 0; c < clocks; c++) {
    for (size_t i = 0; i < n; i++) buf[i] = grad(rank, c, i);
    RANK_CHECK(gsync_ps_push_pull(comm, 5, c, buf, n, GSYNC_FLOAT32, &po, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 60000) == 0, "clock {}: {}", c, gsync_request_error(req));
    gsync_request_free(req);
  }
  std::vector<float> got(buf, buf + n), want = reference(s, per_host, n, clocks);
  for (size_t i = 0; i < n; i++)
    RANK_CHECK(std::memcmp(&got[i], &want[i], 4) == 0, "element {}: got {:.9g}, want {:.9g}", i,
               got[i], want[i]);
  report(fmt::format("bits {:x}\n", bits_of(got)));
  RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
  gsync_close(comm);
  return 0;
}

std::vector<ChildResult> train(const testbed::Testbed& bed, const std::string& job,
                               const std::vector<int>& per_host, const PsRun& s, size_t n,
                               uint64_t clocks) {
  auto p = places(per_host);
  auto res = run_ranks(static_cast<int>(p.size()),
                       [&](int r) { return train_rank(bed, job, per_host, r, s, n, clocks); }, 600);
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
  return res;
}

PsRun sgd() {
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  s.opts.weight_decay = 0.01f;
  return s;
}

TEST(ParameterServer, BspSgdOnFourHostsIsBitExact) {
  auto bed = make_bed({2, 2}, "auto", 60000);
  ASSERT_TRUE(bed);
  train(*bed, "ps-sgd", {1, 1, 1, 1}, sgd(), 10007, 12);
}

// Two ranks on a host: their gradients are folded, weighed, before the
// host pushes (one push per host), and both get the parameters.
TEST(ParameterServer, RanksOfAHostPushOnceAndAllGetTheParameters) {
  auto bed = make_bed({2}, "auto", 60000);
  ASSERT_TRUE(bed);
  train(*bed, "ps-local", {1, 2}, sgd(), 4099, 6);
}

// ssp:0 is bsp: the same bits.
TEST(ParameterServer, SspWithoutStalenessIsBsp) {
  auto bed = make_bed({3}, "auto", 60000);
  ASSERT_TRUE(bed);
  PsRun s = sgd();
  s.sync = GSYNC_SYNC_SSP;
  s.staleness = 0;
  train(*bed, "ps-ssp0", {1, 1, 1}, s, 1500, 8);
}

// A job on one host: its one daemon serves the whole tensor.
TEST(ParameterServer, OneHostServesTheWholeTensor) {
  auto bed = make_bed({1}, "auto", 60000);
  ASSERT_TRUE(bed);
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.optimizer = GSYNC_OPT_ADAM;
  s.opts.lr = 0.002f;
  s.opts.weight_decay = 0.01f;
  train(*bed, "ps-one", {2}, s, 777, 5);
}

TEST(ParameterServer, BspAdamWOnThreeHostsIsBitExact) {
  auto bed = make_bed({2, 1}, "auto", 60000);
  ASSERT_TRUE(bed);
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.optimizer = GSYNC_OPT_ADAMW;
  s.opts.lr = 0.01f;
  s.opts.weight_decay = 0.1f;
  train(*bed, "ps-adamw", {1, 1, 1}, s, 3001, 10);
}

// --- Requests that are refused -------------------------------------------

// Each refused request names what was wrong and changes nothing: the
// parameters a pull returns after all of them are those before.
TEST(ParameterServer, BadRequestsAreRefusedNamingTheFieldAndChangeNothing) {
  DaemonProcess d;
  gsync_comm_t* comm;
  ASSERT_EQ(connect_rank(d.socket(), "ps-bad", 1, 0, &comm), 0) << gsync_last_error();
  void* mem;
  ASSERT_EQ(gsync_alloc(comm, 4096 * 4, &mem), 0);
  auto* buf = static_cast<float*>(mem);
  for (int i = 0; i < 1000; i++) buf[i] = init(size_t(i));
  gsync_ps_opts_t o;
  gsync_ps_opts_init(&o);
  gsync_request_t* req = nullptr;
  auto wait = [&](const char* what) {
    int rc = gsync_wait(req, 10000);
    std::string err = gsync_request_error(req);
    gsync_request_free(req);
    req = nullptr;
    return std::make_pair(rc, what + std::string(": ") + err);
  };
  // Refused by the library, nothing sent.
  o.momentum = 1.5f;
  EXPECT_EQ(gsync_ps_declare(comm, 1, buf, 1000, GSYNC_FLOAT32, &o, &req), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("opts.momentum 1.5 is outside [0, 1)"),
            std::string::npos)
      << gsync_last_error();
  o.momentum = 0;
  EXPECT_EQ(gsync_ps_declare(comm, 1, buf, 1000, GSYNC_INT32, &o, &req), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("int32"), std::string::npos);
  ASSERT_EQ(gsync_ps_declare(comm, 1, buf, 1000, GSYNC_FLOAT32, &o, &req), 0);
  ASSERT_EQ(wait("declare").first, 0);
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  // (0 is a step without data: tests/integration/test_leases.cc.)
  for (double w : {-2.0, double(NAN), double(INFINITY)}) {
    po.weight = w;
    EXPECT_EQ(gsync_ps_push_pull(comm, 1, 0, buf, 1000, GSYNC_FLOAT32, &po, &req),
              GSYNC_ERR_INVALID) << w;
    EXPECT_NE(std::string(gsync_last_error()).find("opts.weight"), std::string::npos)
        << gsync_last_error();
  }
  po.weight = 1;
  po.lr = -0.5f;
  EXPECT_EQ(gsync_ps_push_pull(comm, 1, 0, buf, 1000, GSYNC_FLOAT32, &po, &req), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("opts.lr -0.5"), std::string::npos);
  po.lr = 0;
  // Refused by the daemon, each with the values at odds. (Each at a clock
  // of its own: a failed (key, clock) is remembered for a while, so that a
  // rank that comes late gets the same error, as for every op.)
  struct Case {
    std::function<int()> submit;
    int code;
    std::string names;
  };
  std::vector<float> other(2000, 0.25f);
  std::vector<Case> cases = {
      {[&] { return gsync_ps_push_pull(comm, 2, 0, buf, 1000, GSYNC_FLOAT32, &po, &req); },
       GSYNC_ERR_INVALID, "parameter key 2 is not declared"},
      {[&] { return gsync_ps_push_pull(comm, 1, 5, other.data(), 999, GSYNC_FLOAT32, &po, &req); },
       GSYNC_ERR_MISMATCH, "declared as 1000 float32; this push_pull has 999 float32"},
      {[&] { return gsync_ps_push_pull(comm, 1, 6, other.data(), 1000, GSYNC_BFLOAT16, &po, &req); },
       GSYNC_ERR_MISMATCH, "declared as 1000 float32; this push_pull has 1000 bfloat16"},
      {[&] { return gsync_ps_push_pull(comm, 1, 3, buf, 1000, GSYNC_FLOAT32, &po, &req); },
       GSYNC_ERR_INVALID, "clock 3 skips ahead; this worker's next clock is 0"},
      {[&] { return gsync_ps_declare(comm, 1, other.data(), 2000, GSYNC_FLOAT32, &o, &req); },
       GSYNC_ERR_MISMATCH, "is declared as 1000 float32 with sgd (lr 0.01); declared again as 2000"},
  };
  for (auto& c : cases) {
    ASSERT_EQ(c.submit(), 0) << gsync_last_error();
    auto [rc, err] = wait(c.names.c_str());
    EXPECT_EQ(rc, c.code) << err;
    EXPECT_NE(err.find(c.names), std::string::npos) << err;
  }
  // A good step, then a clock that goes backwards.
  for (int i = 0; i < 1000; i++) buf[i] = 1.0f;
  ASSERT_EQ(gsync_ps_push_pull(comm, 1, 0, buf, 1000, GSYNC_FLOAT32, &po, &req), 0);
  ASSERT_EQ(wait("clock 0").first, 0);
  std::vector<float> after_one(buf, buf + 1000);
  ASSERT_EQ(gsync_ps_push_pull(comm, 1, 0, buf, 1000, GSYNC_FLOAT32, &po, &req), 0);
  auto [rc, err] = wait("clock 0 again");
  EXPECT_EQ(rc, GSYNC_ERR_INVALID);
  EXPECT_NE(err.find("clock 0 goes backwards; this worker's next clock is 1"), std::string::npos)
      << err;
  // Nothing the refusals carried reached the parameters.
  ASSERT_EQ(gsync_ps_pull(comm, 1, 1, buf, 1000, GSYNC_FLOAT32, &req), 0);
  ASSERT_EQ(wait("pull").first, 0);
  for (int i = 0; i < 1000; i++) {
    ASSERT_EQ(buf[i], after_one[size_t(i)]) << i;
    ASSERT_EQ(buf[i], init(size_t(i)) - 0.01f * 1.0f) << i;
  }
  gsync_close(comm);
}

// A host lost while the others wait for it in a BSP step: their requests
// fail at once with the lost host named, not at the op timeout.
TEST(ParameterServer, ALostHostFailsTheRequestsNamingIt) {
  auto bed = make_bed({2, 1}, "auto", 60000);
  ASSERT_TRUE(bed);
  auto p = places({1, 1, 1});
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  PsRun s = sgd();
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_ps(*bed, "ps-lost", p, r, s, &comm) == 0, "{}", gsync_last_error());
    void* mem;
    RANK_CHECK(gsync_alloc(comm, 4096 * 4, &mem) == 0, "alloc");
    gsync_request_t* req;
    RANK_CHECK(gsync_ps_declare(comm, 3, mem, 4096, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0, "declare: {}", gsync_request_error(req));
    gsync_request_free(req);
    if (r == 2) {
      char c;
      [[maybe_unused]] ssize_t n = read(go[0], &c, 1);  // until the parent killed our daemon
      gsync_close(comm);
      return 0;
    }
    RANK_CHECK(gsync_ps_push_pull(comm, 3, 0, mem, 4096, GSYNC_FLOAT32, nullptr, &req) == 0, "{}",
               gsync_last_error());
    if (r == 0) {
      // Both pushes are in at host 1's server, which waits for host 3's.
      RANK_CHECK(wait_until([&] {
                   nlohmann::json j = admin_json(bed->admin_socket(0), "jobs");
                   for (const auto& row : j.value("jobs", nlohmann::json::array()))
                     for (const auto& k : row.value("parameters", nlohmann::json::array()))
                       if (k.value("pulls_waiting", 0) >= 2) return true;
                   return false;
                 }),
                 "host 1's server never had both requests waiting");
      bed->kill_daemon(2, SIGKILL);
    }
    auto t0 = Clock::now();
    int rc = gsync_wait(req, 30000);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    report(fmt::format("{}\n", gsync_request_error(req)));
    RANK_CHECK(rc == GSYNC_ERR_HOST_LOST, "got {} ({})", rc, gsync_request_error(req));
    RANK_CHECK(secs < 15, "took {} s", secs);
    gsync_request_free(req);
    // Rank 1 closes only once rank 0 has its answer too: its departure
    // would otherwise reach host 1 as a rank that left (RANK_DEAD), maybe
    // before host 1 sees host 3 gone.
    if (r == 0) [[maybe_unused]] ssize_t n = write(go[1], "gg", 2);
    if (r == 1) {
      char c;
      [[maybe_unused]] ssize_t n = read(go[0], &c, 1);
    }
    gsync_close(comm);
    return 0;
  }, 120);
  close(go[0]);
  close(go[1]);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find(bed->host_id(2)), std::string::npos)
        << res[size_t(r)].output;
  }
}

// A clock out of order is refused by the pushing host's own shard, which
// is served first, and sends nothing (issue #38, item 1): the key goes on
// for every host, the refused clock is taken when it is due (the refusal
// is not remembered as a failed op), and the parameters are the bits of a
// run without the refusals. A refused push leaves the host's weighted
// gradient in the buffer (item 5, gsync.h): the caller fills it again.
TEST(ParameterServer, ARefusedClockLeavesTheKeyWorkingOnEveryHost) {
  auto bed = make_bed({2}, "auto", 60000);
  ASSERT_TRUE(bed);
  const std::vector<int> per_host{1, 1};
  auto p = places(per_host);
  PsRun s = sgd();
  const size_t n = 4096;
  const uint64_t clocks = 4;
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_ps(*bed, "ps-refused", p, r, s, &comm) == 0, "{}", gsync_last_error());
    void* mem;
    RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "alloc");
    auto* buf = static_cast<float*>(mem);
    for (size_t i = 0; i < n; i++) buf[i] = r == 0 ? init(i) : -1.0f;
    gsync_request_t* req;
    RANK_CHECK(gsync_ps_declare(comm, 5, buf, n, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0, "declare: {}", gsync_request_error(req));
    gsync_request_free(req);
    gsync_push_opts_t po;
    gsync_push_opts_init(&po);
    po.weight = weight_of(r);
    auto push_pull = [&](uint64_t c, uint64_t as, std::string* err) {
      for (size_t i = 0; i < n; i++) buf[i] = grad(r, c, i);
      if (int rc = gsync_ps_push_pull(comm, 5, as, buf, n, GSYNC_FLOAT32, &po, &req); rc != 0) {
        *err = gsync_last_error();
        return rc;
      }
      int rc = gsync_wait(req, 30000);
      *err = gsync_request_error(req);
      gsync_request_free(req);
      return rc;
    };
    std::string err;
    for (uint64_t c = 0; c < clocks; c++) {
      if (r == 0 && c == 2) {
        for (uint64_t bad : {uint64_t{3}, uint64_t{1}}) {
          int rc = push_pull(c, bad, &err);
          RANK_CHECK(rc == GSYNC_ERR_INVALID, "clock {} when 2 is due: {} ({})", bad, rc, err);
          const std::string want = fmt::format("clock {} {}; this worker's next clock is 2", bad,
                                               bad > c ? "skips ahead" : "goes backwards");
          RANK_CHECK(err.find(want) != std::string::npos, "'{}' not in '{}'", want, err);
          for (size_t i = 0; i < n; i++) {
            const float w = grad(r, c, i) * static_cast<float>(weight_of(r));
            RANK_CHECK(std::memcmp(&buf[i], &w, 4) == 0, "element {}: {} after the refusal, "
                       "not the weighted gradient {}", i, buf[i], w);
          }
        }
      }
      RANK_CHECK(push_pull(c, c, &err) == 0, "clock {}: {}", c, err);
    }
    std::vector<float> got(buf, buf + n), want = reference(s, per_host, n, clocks);
    for (size_t i = 0; i < n; i++)
      RANK_CHECK(std::memcmp(&got[i], &want[i], 4) == 0, "element {}: got {:.9g}, want {:.9g}", i,
                 got[i], want[i]);
    RANK_CHECK(gsync_barrier(comm, 1, 30000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 120);
  for (size_t r = 0; r < res.size(); r++) EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
}

// A host whose only rank is killed (issue #38, item 2): the job closes
// there and its host tells the others, whose requests waiting in a bsp
// clock fail at once with GSYNC_ERR_RANK_DEAD naming the rank and its
// host, not at the op timeout; their next requests fail the same way.
// With batch leases too: the host's shards went with its job, so the job
// cannot go on without a restart (docs/fault-tolerance.md).
void only_rank_killed(const std::string& job, bool leasing) {
  auto bed = make_bed({2}, "auto", 60000);
  ASSERT_TRUE(bed);
  auto p = places({1, 1});
  PsRun s = sgd();
  constexpr size_t n = 4096;
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_ps(*bed, job, p, r, s, &comm) == 0, "{}", gsync_last_error());
    void* mem;
    RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "alloc");
    gsync_request_t* req;
    RANK_CHECK(gsync_ps_declare(comm, 3, mem, n, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0, "declare: {}", gsync_request_error(req));
    gsync_request_free(req);
    auto submit = [&](uint64_t c) {
      if (leasing) {
        RANK_CHECK(gsync_lease(comm, 1, 8, c, &req) == 0, "{}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 30000) == 0, "lease {}: {}", c, gsync_request_error(req));
        gsync_request_free(req);
      }
      RANK_CHECK(gsync_ps_push_pull(comm, 3, c, mem, n, GSYNC_FLOAT32, nullptr, &req) == 0,
                 "{}", gsync_last_error());
      return 0;
    };
    RANK_CHECK(submit(0) == 0, "clock 0");
    RANK_CHECK(gsync_wait(req, 30000) == 0, "clock 0: {}", gsync_request_error(req));
    gsync_request_free(req);
    if (r == 1) {
      // Rank 0's clock 1 waits at this host's server for this rank's push.
      RANK_CHECK(wait_until([&] {
                   nlohmann::json j = admin_json(bed->admin_socket(1), "jobs");
                   for (const auto& row : j.value("jobs", nlohmann::json::array()))
                     for (const auto& k : row.value("parameters", nlohmann::json::array()))
                       if (k.value("pulls_waiting", 0) >= 1) return true;
                   return false;
                 }),
                 "rank 0's clock 1 never waited at host 2's server");
      raise(SIGKILL);
    }
    RANK_CHECK(submit(1) == 0, "clock 1");
    for (uint64_t c = 1; c <= 2; c++) {
      if (c == 2) RANK_CHECK(submit(2) == 0, "clock 2");
      auto t0 = Clock::now();
      int rc = gsync_wait(req, 30000);
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      std::string err = gsync_request_error(req);
      gsync_request_free(req);
      report(fmt::format("clock {}: {}\n", c, err));
      RANK_CHECK(rc == GSYNC_ERR_RANK_DEAD, "clock {}: got {} ({})", c, rc, err);
      RANK_CHECK(secs < 15, "clock {} took {} s", c, secs);
      RANK_CHECK(err.find("rank 1 ") != std::string::npos &&
                     err.find(bed->host_id(1)) != std::string::npos,
                 "clock {}: the error names neither rank 1 nor host {}: {}", c, bed->host_id(1),
                 err);
    }
    gsync_close(comm);
    return 0;
  }, 120);
  EXPECT_EQ(res[0].code, 0) << res[0].output;
  EXPECT_EQ(res[1].code, -SIGKILL) << res[1].output;
}

TEST(ParameterServer, AHostsOnlyRankKilledFailsTheOthersNamingIt) {
  only_rank_killed("ps-only-rank", false);
}

TEST(ParameterServer, AHostsOnlyRankKilledFailsTheOthersWithLeasesToo) {
  only_rank_killed("ps-only-rank-leased", true);
}

// --- The sync modes' guarantees ------------------------------------------

// Counters: on a tensor of hosts x 16 values, value j * 16 + v counts the
// pushes of worker v that host j's server has applied. Worker v's gradient
// is -hosts at its counters and 0 elsewhere; with weights of 1 and SGD at
// lr 1 each applied push adds exactly 1 there (bsp: the clock's sum over
// hosts, -hosts, scaled by 1/hosts; asp and ssp: one push, scaled by 1
// over the step's weight, hosts).
constexpr size_t kSlice = 16;

int counting_rank(const testbed::Testbed& bed, const std::string& job, int hosts, int rank,
                  const PsRun& s, uint64_t clocks, unsigned seed) {
  auto p = places(std::vector<int>(size_t(hosts), 1));
  gsync_comm_t* comm;
  RANK_CHECK(connect_ps(bed, job, p, rank, s, &comm) == 0, "{}", gsync_last_error());
  const size_t n = size_t(hosts) * kSlice;
  void* mem;
  RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "{}", gsync_last_error());
  auto* buf = static_cast<float*>(mem);
  std::fill(buf, buf + n, 0.0f);
  gsync_request_t* req;
  RANK_CHECK(gsync_ps_declare(comm, 9, buf, n, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
             gsync_last_error());
  RANK_CHECK(gsync_wait(req, 60000) == 0, "declare: {}", gsync_request_error(req));
  gsync_request_free(req);
  std::mt19937 rng(seed + unsigned(rank));
  std::uniform_int_distribution<int> delay_us(0, 600);
  uint64_t worst_lag = 0;
  const uint64_t bound = s.sync == GSYNC_SYNC_SSP ? s.staleness : 0;
  for (uint64_t c = 0; c < clocks; c++) {
    // A worker's step takes a while; now and then one stalls.
    int d = delay_us(rng);
    if (d > 590) d *= 8;
    if (d > 300) std::this_thread::sleep_for(std::chrono::microseconds(d));
    std::fill(buf, buf + n, 0.0f);
    for (int j = 0; j < hosts; j++) buf[size_t(j) * kSlice + size_t(rank)] = -float(hosts);
    RANK_CHECK(gsync_ps_push_pull(comm, 9, c, buf, n, GSYNC_FLOAT32, nullptr, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 60000) == 0, "clock {}: {}", c, gsync_request_error(req));
    gsync_request_free(req);
    // The parameters of step c + 1: this worker's own push of clock c and,
    // ssp, every worker's up to clock c - s; bsp, exactly clock c.
    for (int j = 0; j < hosts; j++) {
      for (int v = 0; v < hosts; v++) {
        float got = buf[size_t(j) * kSlice + size_t(v)];
        RANK_CHECK(got == std::floor(got) && got >= 0, "a counter of {} is not a count", got);
        uint64_t seen = static_cast<uint64_t>(got);
        if (v == rank) RANK_CHECK(seen >= c + 1, "clock {}: host {} has {} of its own pushes", c, j, seen);
        if (s.sync == GSYNC_SYNC_BSP)
          RANK_CHECK(seen == c + 1, "clock {}: host {} has {} pushes of worker {} (bsp)", c, j,
                     seen, v);
        if (s.sync != GSYNC_SYNC_ASP && c + 1 > bound)
          RANK_CHECK(seen >= c + 1 - bound,
                     "clock {}: host {} has {} pushes of worker {}, fewer than clock {} - s ({})",
                     c, j, seen, v, c, bound);
        if (seen < c + 1) worst_lag = std::max(worst_lag, c + 1 - seen);
      }
    }
  }
  RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
  // Every push applied once, none lost, none twice.
  RANK_CHECK(gsync_ps_pull(comm, 9, clocks, buf, n, GSYNC_FLOAT32, &req) == 0, "{}",
             gsync_last_error());
  RANK_CHECK(gsync_wait(req, 60000) == 0, "final pull: {}", gsync_request_error(req));
  gsync_request_free(req);
  for (size_t i = 0; i < n; i++) {
    bool counter = i % kSlice < size_t(hosts);
    RANK_CHECK(buf[i] == (counter ? float(clocks) : 0.0f), "value {} is {} after {} clocks", i,
               buf[i], clocks);
  }
  report(fmt::format("lag {}\n", worst_lag));
  // This host's server counts what it applied: every worker's every push.
  nlohmann::json jobs = admin_json(bed.admin_socket(p[size_t(rank)].host), "jobs");
  uint64_t updates = ~0ull;
  double rate = 0, waited = 0;
  size_t waits = 0;
  for (const auto& row : jobs.value("jobs", nlohmann::json::array()))
    if (row.value("job", "") == job)
      for (const auto& k : row.value("parameters", nlohmann::json::array()))
        if (k.value("key", 0) == 9) {
          updates = k.value("updates", uint64_t{0});
          rate = k.value("updates_per_s", 0.0);
          const nlohmann::json pw = k.value("pull_wait_s", nlohmann::json::object());
          for (const auto& [host, w] : pw.items()) {
            waits++;
            waited += w.get<double>();
          }
        }
  RANK_CHECK(updates == uint64_t(hosts) * clocks, "host {} applied {} pushes, not {} x {}",
             p[size_t(rank)].host, updates, hosts, clocks);
  RANK_CHECK(rate > 0, "host {} shows {} updates per second", p[size_t(rank)].host, rate);
  // Every worker's pulls' wait here; with random stalls, bsp's and ssp's
  // pulls waited for the slowest now and then.
  RANK_CHECK(waits == size_t(hosts), "{} workers' waits shown", waits);
  if (s.sync != GSYNC_SYNC_ASP)
    RANK_CHECK(waited > 0, "host {}: no pull ever waited", p[size_t(rank)].host);
  RANK_CHECK(gsync_barrier(comm, 2, 60000) == 0, "barrier: {}", gsync_last_error());
  gsync_close(comm);
  return 0;
}

// The largest lag any rank saw.
uint64_t worst_lag(const std::vector<ChildResult>& res) {
  uint64_t worst = 0;
  for (const auto& r : res) {
    std::istringstream in(r.output);
    std::string word;
    uint64_t v = 0;
    while (in >> word)
      if (word == "lag" && in >> v) worst = std::max(worst, v);
  }
  return worst;
}

std::vector<ChildResult> count_pushes(const char* job, int sync, uint32_t staleness,
                                      uint64_t clocks) {
  auto bed = make_bed({3}, "auto", 60000);
  EXPECT_TRUE(bed);
  if (!bed) return {};
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 1.0f;
  s.sync = sync;
  s.staleness = staleness;
  auto res = run_ranks(3, [&](int r) { return counting_rank(*bed, job, 3, r, s, clocks, 77); }, 900);
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
  return res;
}

TEST(SyncModes, SspNeverAnswersBeyondItsBound) {
  auto res = count_pushes("ps-ssp", GSYNC_SYNC_SSP, 2, 10000);
  uint64_t lag = worst_lag(res);
  EXPECT_LE(lag, 2u);
  std::printf("ssp:2 over 10000 clocks: the largest lag a pull saw was %llu\n",
              static_cast<unsigned long long>(lag));
}

TEST(SyncModes, BspAnswersEveryClockComplete) { count_pushes("ps-bsp", GSYNC_SYNC_BSP, 0, 2000); }

TEST(SyncModes, AspNeverWaitsAndLosesNothing) {
  auto res = count_pushes("ps-asp", GSYNC_SYNC_ASP, 0, 2000);
  std::printf("asp over 2000 clocks: the largest lag a pull saw was %llu\n",
              static_cast<unsigned long long>(worst_lag(res)));
}

}  // namespace
}  // namespace gsync::test
