// SPDX-License-Identifier: Apache-2.0
//
// Batch leases (docs/fault-tolerance.md, "Batch leases") on real daemons:
// a worker killed mid-epoch, at a chosen moment (after one of its two
// pushes of a clock) and at random ones, has its batches trained on by the
// others, and every batch of the epoch is trained on exactly once - read
// off the servers' parameters, not the daemons' own counts; a rank that
// closes hands its lease back; the refusals name what is wrong.
//
// The model makes every application visible: batch b's gradient is -1 at
// element b (weight 1) on two keys, sgd with lr 1, so a clock adds 1/W to
// the elements of the W batches it applied and nothing elsewhere. Rank 0
// diffs the parameters after every clock; both keys must move alike (a
// clock's pushes are applied all or none), and every element exactly once.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <set>
#include <thread>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using tools::run_command;

constexpr uint64_t kKeyA = 1, kKeyB = 2;
constexpr uint64_t kBatches = 48;
constexpr uint64_t kEpoch = 3;

struct Rank {
  gsync_comm_t* comm = nullptr;
  float* a = nullptr;
  float* b = nullptr;
};

// Waits for both requests and frees them: the first failure's code, or 0.
int wait_both(gsync_request_t* ra, gsync_request_t* rb) {
  int rc = gsync_wait(ra, 60000);
  if (int rb_rc = gsync_wait(rb, 60000); rc == 0) rc = rb_rc;
  gsync_request_free(ra);
  gsync_request_free(rb);
  return rc;
}

int open_rank(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
              int r, Rank* out) {
  if (int rc = connect_place(bed, job, p, r, &out->comm, 0, 60000); rc != 0) return rc;
  void* mem;
  if (int rc = gsync_alloc(out->comm, 2 * kBatches * 4, &mem); rc != 0) return rc;
  out->a = static_cast<float*>(mem);
  out->b = out->a + kBatches;
  gsync_ps_opts_t o;
  gsync_ps_opts_init(&o);
  o.lr = 1.0f;
  std::fill(out->a, out->a + 2 * kBatches, 0.0f);
  gsync_request_t *ra, *rb;
  if (int rc = gsync_ps_declare(out->comm, kKeyA, out->a, kBatches, GSYNC_FLOAT32, &o, &ra); rc)
    return rc;
  if (int rc = gsync_ps_declare(out->comm, kKeyB, out->b, kBatches, GSYNC_FLOAT32, &o, &rb); rc)
    return rc;
  return wait_both(ra, rb);
}

int lease(gsync_comm_t* comm, uint64_t clock, uint64_t* batch, uint64_t batches = kBatches) {
  gsync_request_t* req;
  if (int rc = gsync_lease(comm, kEpoch, batches, clock, &req); rc != 0) return rc;
  int rc = gsync_wait(req, 60000);
  if (rc == 0) rc = gsync_lease_batch(req, batch);
  gsync_request_free(req);
  return rc;
}

// The gradients of `batch` (or of nothing, weight 0) into both buffers.
void fill(Rank& k, uint64_t batch) {
  std::fill(k.a, k.a + 2 * kBatches, 0.0f);
  if (batch == GSYNC_LEASE_WAIT) return;
  k.a[batch] = -1.0f;
  k.b[batch] = -1.0f;
}

gsync_push_opts_t weighing(uint64_t batch) {
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  po.weight = batch == GSYNC_LEASE_WAIT ? 0.0 : 1.0;
  return po;
}

// What a rank's training loop did, for the parent.
struct Trained {
  std::vector<uint64_t> batches;
  std::vector<int> applied;  // rank 0: per element, the clocks that moved it
  uint64_t clocks = 0;
  std::string answers;  // "clock:batch" (W: wait, E: end), for a failure's report
};

// Pushes both keys at clock (after `between`, which a victim uses to stop
// after its first push) and waits for the parameters.
int step(Rank& k, uint64_t clock, uint64_t batch, const std::function<void()>& between = {}) {
  fill(k, batch);
  gsync_push_opts_t po = weighing(batch);
  gsync_request_t *ra, *rb;
  if (int rc = gsync_ps_push_pull(k.comm, kKeyA, clock, k.a, kBatches, GSYNC_FLOAT32, &po, &ra))
    return rc;
  if (between) between();
  if (int rc = gsync_ps_push_pull(k.comm, kKeyB, clock, k.b, kBatches, GSYNC_FLOAT32, &po, &rb))
    return rc;
  return wait_both(ra, rb);
}

// Leases until the epoch ends; rank 0 diffs the parameters every clock.
int train(Rank& k, int r, Trained* t,
          const std::function<void(uint64_t clock, uint64_t batch, bool* stop)>& before_step = {}) {
  std::vector<float> prev(kBatches, 0.0f);
  t->applied.assign(kBatches, 0);
  for (uint64_t c = 0;; c++) {
    uint64_t batch = 0;
    if (int rc = lease(k.comm, c, &batch); rc != 0) return rc;
    t->answers += batch == GSYNC_LEASE_END    ? fmt::format(" {}:E", c)
                  : batch == GSYNC_LEASE_WAIT ? fmt::format(" {}:W", c)
                                              : fmt::format(" {}:{}", c, batch);
    if (batch == GSYNC_LEASE_END) {
      t->clocks = c;
      return 0;
    }
    bool stop = false;
    if (before_step) before_step(c, batch, &stop);
    if (stop) return 0;
    if (int rc = step(k, c, batch); rc != 0) return rc;
    if (batch != GSYNC_LEASE_WAIT) t->batches.push_back(batch);
    if (r != 0) continue;
    for (size_t i = 0; i < kBatches; i++) {
      if (k.a[i] != k.b[i]) {  // one key's push of a clock applied without the other's
        report(fmt::format("clock {}: key A element {} is {}, key B {}\n", c, i, k.a[i], k.b[i]));
        return 90;
      }
      if (k.a[i] - prev[i] > 0.1f) t->applied[i]++;
      prev[i] = k.a[i];
    }
  }
}

std::string describe(const Trained& t) {
  std::string out = "batches";
  for (uint64_t b : t.batches) out += fmt::format(" {}", b);
  out += "\napplied";
  for (int n : t.applied) out += fmt::format(" {}", n);
  return out + fmt::format("\nclocks {}\nanswers{}\n", t.clocks, t.answers);
}

// The numbers a child reported on its "batches" and "applied" lines.
std::vector<int64_t> numbers(const std::string& out, const std::string& line) {
  std::vector<int64_t> v;
  size_t at = out.find(line + " ");
  if (at == std::string::npos) at = out.find(line + "\n");
  if (at == std::string::npos) return v;
  size_t end = out.find('\n', at);
  std::string body = out.substr(at + line.size(), end - at - line.size());
  for (size_t i = 0; i < body.size();) {
    char* e = nullptr;
    long long x = std::strtoll(body.c_str() + i, &e, 10);
    if (e == body.c_str() + i) {
      i++;
      continue;
    }
    v.push_back(x);
    i = size_t(e - body.c_str());
  }
  return v;
}

// Every batch applied exactly once (rank 0's diffs), and the survivors'
// batches plus the victim's applied ones are each batch once.
void expect_each_batch_once(const std::vector<ChildResult>& res, int victim) {
  std::vector<int64_t> applied = numbers(res[0].output, "applied");
  ASSERT_EQ(applied.size(), kBatches) << res[0].output;
  for (size_t i = 0; i < kBatches; i++)
    EXPECT_EQ(applied[i], 1) << "batch " << i << " applied " << applied[i] << " times";
  std::multiset<int64_t> trained;
  for (size_t r = 0; r < res.size(); r++)
    if (int(r) != victim)
      for (int64_t b : numbers(res[r].output, "batches")) trained.insert(b);
  // The victim's pushes before its death were applied: those are the
  // batches no survivor trained on, and none may be missing twice.
  for (uint64_t b = 0; b < kBatches; b++) EXPECT_LE(trained.count(int64_t(b)), 1u) << b;
}

// A worker on the second host is killed after its push of key A at clock
// 4, before its push of key B: the clock's pushes of that host begin only
// once every rank there has pushed both, so none of the victim's clock 4
// is applied, and its batch goes to another rank. gsyncctl jobs shows the
// ledger on the keeper (the first host) and the departure.
TEST(Leases, WorkerKilledBetweenItsPushesHandsItsBatchOn) {
  auto bed = make_bed({2}, "ring", 20000);
  ASSERT_TRUE(bed);
  const std::vector<int> per_host{2, 2};
  auto p = places(per_host);
  const std::string job = "lease-kill";
  const int victim = 3;
  const uint64_t kill_clock = 4;
  int from_victim[2], go[2];
  ASSERT_EQ(pipe(from_victim), 0);
  ASSERT_EQ(pipe(go), 0);
  std::vector<ChildResult> res;
  std::thread ranks([&] {
    res = run_ranks(4, [&](int r) {
      close(from_victim[0]);
      close(go[1]);
      Rank k;
      RANK_CHECK(open_rank(*bed, job, p, r, &k) == 0, "{}", gsync_last_error());
      Trained t;
      const int rc = train(k, r, &t, [&](uint64_t c, uint64_t batch, bool*) {
        if (r != victim || c != kill_clock || batch == GSYNC_LEASE_WAIT) return;
        // Push A, tell the parent the batch, and wait to be killed.
        step(k, c, batch, [&] {
          uint64_t msg[2] = {batch, uint64_t(getpid())};
          [[maybe_unused]] ssize_t n = write(from_victim[1], msg, sizeof msg);
          for (;;) pause();
        });
      });
      RANK_CHECK(rc == 0, "rank {}: {}", r, gsync_last_error());
      report(describe(t));
      RANK_CHECK(read_byte(go[0], 60000), "rank {}: no word to close", r);
      gsync_close(k.comm);
      return 0;
    });
  });
  // The parent keeps its ends open: closing them here could come before
  // the ranks are forked. A poll bounds the wait instead of an EOF.
  uint64_t msg[2] = {0, 0};
  pollfd pf{from_victim[0], POLLIN, 0};
  if (poll(&pf, 1, 120000) != 1 || read(from_victim[0], msg, sizeof msg) != ssize_t(sizeof msg)) {
    close(go[1]);
    ranks.join();
    for (const auto& c : res) ADD_FAILURE() << "rank exit " << c.code << ": " << c.output;
    FAIL() << "the victim never stopped between its pushes";
  }
  const uint64_t lost_batch = msg[0];
  // Declarations 2, then per clock a lease and two pushes; at the kill
  // clock its lease and push A: the daemon has taken them.
  const uint64_t taken = 2 + 3 * kill_clock + 2;
  ASSERT_TRUE(wait_until([&] { return submitted(bed->admin_socket(1), job, victim) >= taken; }))
      << admin_query(bed->admin_socket(1), "clients");
  ASSERT_EQ(kill(pid_t(msg[1]), SIGKILL), 0);
  // The others finish the epoch; then, before they close, the reports.
  const bool settled = wait_until(
      [&] {
        nlohmann::json row = job_row(bed->admin_socket(0), job);
        return row.is_object() && row["leases"].is_object() && row["leases"]["epochs"].is_array() &&
               !row["leases"]["epochs"].empty() &&
               row["leases"]["epochs"][0].value("settled", 0) == int(kBatches);
      },
      60000);
  if (!settled) {
    ADD_FAILURE() << "the epoch never settled: " << admin_query(bed->admin_socket(0), "jobs");
    bed->teardown();  // the ranks fail and exit
    ranks.join();
    return;
  }
  nlohmann::json keeper = job_row(bed->admin_socket(0), job);
  nlohmann::json other = job_row(bed->admin_socket(1), job);
  const nlohmann::json& e = keeper["leases"]["epochs"][0];
  EXPECT_EQ(e["epoch"], kEpoch) << e.dump();
  EXPECT_EQ(e["batches"], kBatches) << e.dump();
  EXPECT_EQ(e["outstanding"], 0) << e.dump();
  EXPECT_EQ(e["reassigned"], 1) << e.dump();
  EXPECT_EQ(e["leased"], kBatches + 1) << e.dump();
  EXPECT_EQ(other["departures"], 1) << other.dump();
  EXPECT_EQ(other["leases"]["keeper"], keeper["leases"]["keeper"]) << other.dump();
  if (const char* ctl = std::getenv("GSYNCCTL")) {
    std::string out = run_command(fmt::format("{} -s {} jobs 2>&1", ctl, bed->admin_socket(0)));
    EXPECT_NE(out.find(fmt::format("epoch {}: {} batches, {} settled, 0 outstanding, 1 "
                                   "reassigned",
                                   kEpoch, kBatches, kBatches)),
              std::string::npos)
        << out;
  }
  ASSERT_EQ(write(go[1], "xxx", 3), 3);
  ranks.join();
  for (int fd : {go[0], go[1], from_victim[0], from_victim[1]}) close(fd);
  ASSERT_EQ(res.size(), 4u);
  for (int r = 0; r < 4; r++) {
    if (r == victim) {
      EXPECT_EQ(res[r].code, -SIGKILL);
      continue;
    }
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
  }
  expect_each_batch_once(res, victim);
  // The victim's lost batch was trained on by exactly one survivor.
  size_t takers = 0;
  for (int r = 0; r < 4; r++)
    if (r != victim)
      for (int64_t b : numbers(res[r].output, "batches")) takers += b == int64_t(lost_batch);
  EXPECT_EQ(takers, 1u) << "batch " << lost_batch;
}

// Workers killed at random moments (any rank but 0, which reads the
// parameters), three runs: each batch is still trained on exactly once.
TEST(Leases, WorkersKilledAtRandomMomentsLoseNoBatch) {
  auto bed = make_bed({2}, "ring", 20000);
  ASSERT_TRUE(bed);
  const std::vector<int> per_host{2, 2};
  auto p = places(per_host);
  std::mt19937 rng(20261202);
  for (int run = 0; run < 3; run++) {
    const int victim = 1 + int(rng() % 3);
    const std::string job = fmt::format("lease-random-{}", run);
    // Submissions before the kill: a rank makes at least 2 + 3 x 12 (the
    // declarations, then a lease and two pushes per clock of a 48-batch
    // epoch on 4 ranks), so the kill comes mid-epoch.
    const uint64_t after = 4 + rng() % 30;
    int pids[2];
    ASSERT_EQ(pipe(pids), 0);
    std::vector<ChildResult> res;
    std::thread ranks([&] {
      res = run_ranks(4, [&](int r) {
        close(pids[0]);
        if (r == victim) {
          pid_t me = getpid();
          [[maybe_unused]] ssize_t n = write(pids[1], &me, sizeof me);
        }
        Rank k;
        RANK_CHECK(open_rank(*bed, job, p, r, &k) == 0, "{}", gsync_last_error());
        Trained t;
        const int rc = train(k, r, &t);
        report(describe(t));
        RANK_CHECK(rc == 0, "rank {}: {}", r, gsync_last_error());
        gsync_close(k.comm);
        return 0;
      });
    });
    pid_t vpid = 0;
    pollfd pf{pids[0], POLLIN, 0};
    const bool told = poll(&pf, 1, 60000) == 1 && read(pids[0], &vpid, sizeof vpid) == sizeof vpid;
    close(pids[0]);
    close(pids[1]);
    if (!told) {
      ranks.join();
      FAIL() << "run " << run << ": the victim never said its pid";
    }
    const int host = p[size_t(victim)].host;
    bool reached = wait_until(
        [&] { return submitted(bed->admin_socket(host), job, victim) >= after; }, 60000, 1);
    kill(vpid, SIGKILL);
    ranks.join();
    ASSERT_TRUE(reached) << "run " << run;
    for (int r = 0; r < 4; r++) {
      if (r != victim) {
        EXPECT_EQ(res[r].code, 0) << "run " << run << " rank " << r << ": " << res[r].output;
      }
    }
    expect_each_batch_once(res, victim);
    if (HasFailure()) {
      for (int r = 0; r < 4; r++) ADD_FAILURE() << "rank " << r << ": " << res[r].output;
      ADD_FAILURE() << "run " << run << " victim " << victim << " after " << after << "\n"
                    << bed->daemon_log(0) << bed->daemon_log(1);
      return;
    }
  }
}

// One host, no cluster: a rank that closes holding a lease hands it back,
// the other gets it; the refusals name what is wrong; the departed rank
// cannot rejoin.
TEST(Leases, ClosedRankHandsBackAndRefusalsAreClear) {
  DaemonProcess d;
  const std::string job = "lease-local";
  gsync_comm_t *c0, *c1;
  auto connect = [&](int r, gsync_comm_t** c) {
    return connect_rank(d.socket(), job, 2, r, c, 0, 20000);
  };
  ASSERT_EQ(connect(0, &c0), 0) << gsync_last_error();
  ASSERT_EQ(connect(1, &c1), 0) << gsync_last_error();
  uint64_t batch = 0;
  // Before any declaration: nothing could settle a lease.
  EXPECT_EQ(lease(c0, 0, &batch), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("before any parameter is declared"),
            std::string::npos)
      << gsync_last_error();
  void *m0, *m1;
  ASSERT_EQ(gsync_alloc(c0, 64, &m0), 0);
  ASSERT_EQ(gsync_alloc(c1, 64, &m1), 0);
  gsync_ps_opts_t o;
  gsync_ps_opts_init(&o);
  gsync_request_t *r0, *r1;
  ASSERT_EQ(gsync_ps_declare(c0, kKeyA, m0, 4, GSYNC_FLOAT32, &o, &r0), 0);
  ASSERT_EQ(gsync_ps_declare(c1, kKeyA, m1, 4, GSYNC_FLOAT32, &o, &r1), 0);
  ASSERT_EQ(gsync_wait(r0, 20000), 0) << gsync_request_error(r0);
  ASSERT_EQ(gsync_wait(r1, 20000), 0) << gsync_request_error(r1);
  gsync_request_free(r0);
  gsync_request_free(r1);
  ASSERT_EQ(lease(c0, 0, &batch, 3), 0) << gsync_last_error();
  EXPECT_EQ(batch, 0u);
  ASSERT_EQ(lease(c1, 0, &batch, 3), 0) << gsync_last_error();
  EXPECT_EQ(batch, 1u);
  // Another size for a begun epoch.
  EXPECT_EQ(lease(c1, 0, &batch, 4), GSYNC_ERR_MISMATCH);
  EXPECT_NE(std::string(gsync_last_error()).find("begun with 3"), std::string::npos)
      << gsync_last_error();
  // Rank 1 closes holding batch 1: rank 0's pushes go on alone, and batch
  // 1 comes to it (then 2, then the end once all are settled).
  gsync_close(c1);
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  std::vector<uint64_t> got;
  for (uint64_t c = 0; c < 10; c++) {
    gsync_request_t* r;
    ASSERT_EQ(gsync_ps_push_pull(c0, kKeyA, c, m0, 4, GSYNC_FLOAT32, &po, &r), 0);
    ASSERT_EQ(gsync_wait(r, 20000), 0) << gsync_request_error(r);
    gsync_request_free(r);
    ASSERT_EQ(lease(c0, c + 1, &batch, 3), 0) << gsync_last_error();
    if (batch == GSYNC_LEASE_END) break;
    got.push_back(batch);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2})) << d.log();
  // A lease for a clock whose pushes have begun could never settle.
  EXPECT_EQ(lease(c0, 1, &batch, 3), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("whose pushes have begun"), std::string::npos)
      << gsync_last_error();
  // The job went on without rank 1: it cannot come back.
  gsync_comm_t* again = nullptr;
  EXPECT_EQ(connect(1, &again), GSYNC_ERR_REFUSED);
  EXPECT_NE(std::string(gsync_last_error()).find("cannot rejoin"), std::string::npos)
      << gsync_last_error();
  gsync_close(c0);
}

// A push of weight 0 (what a rank told GSYNC_LEASE_WAIT sends) is a step
// without data: the clock passes and nothing moves, not even by momentum,
// and the next real step is the one the optimizer would have taken next.
TEST(Leases, AStepWithoutDataChangesNothing) {
  DaemonProcess d;
  gsync_comm_t* comm;
  ASSERT_EQ(connect_rank(d.socket(), "empty-step", 1, 0, &comm), 0) << gsync_last_error();
  void* mem;
  ASSERT_EQ(gsync_alloc(comm, 16, &mem), 0);
  auto* buf = static_cast<float*>(mem);
  gsync_ps_opts_t o;
  gsync_ps_opts_init(&o);
  o.lr = 0.5f;
  o.momentum = 0.9f;
  std::fill(buf, buf + 4, 1.0f);
  gsync_request_t* req;
  ASSERT_EQ(gsync_ps_declare(comm, kKeyA, buf, 4, GSYNC_FLOAT32, &o, &req), 0);
  ASSERT_EQ(gsync_wait(req, 20000), 0) << gsync_request_error(req);
  gsync_request_free(req);
  auto push = [&](uint64_t c, float g, double w) {
    gsync_push_opts_t po;
    gsync_push_opts_init(&po);
    po.weight = w;
    std::fill(buf, buf + 4, g);
    EXPECT_EQ(gsync_ps_push_pull(comm, kKeyA, c, buf, 4, GSYNC_FLOAT32, &po, &req), 0);
    EXPECT_EQ(gsync_wait(req, 20000), 0) << gsync_request_error(req);
    gsync_request_free(req);
    return buf[0];
  };
  const float p1 = push(0, 1.0f, 1.0);  // 1 - 0.5 x 1
  EXPECT_EQ(p1, 0.5f);
  EXPECT_EQ(push(1, 0.0f, 0.0), p1);  // no data: momentum does not move it
  // The second real step: m = 0.9 x 1 + 1, p = 0.5 - 0.5 x 1.9.
  EXPECT_EQ(push(2, 1.0f, 1.0), 0.5f - 0.5f * (0.9f * 1.0f + 1.0f));
  gsync_close(comm);
}

}  // namespace
}  // namespace gsync::test
