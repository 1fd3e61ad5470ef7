// SPDX-License-Identifier: Apache-2.0
//
// Real multi-host clusters on one machine: one gsyncd per host, each in its
// own network namespace (loopback with distinct ports where namespaces
// cannot be made), racks joined by bridges (tools/testbed). Real rank
// processes on every host; every element of every result checked.
#include <gtest/gtest.h>
#include <signal.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon/cluster/cluster_key.h"
#include "daemon/cluster/messages.h"
#include "daemon/collective/messages.h"
#include "daemon/transport/transport.h"
#include "gsync_build_config.h"
#include "tests/integration/allreduce_cases.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tools/testbed/testbed.h"

namespace gsync::test {
namespace {

using Clock = std::chrono::steady_clock;

struct Layout {
  std::vector<int> racks;            // hosts per rack
  std::vector<int> ranks_per_host;   // may differ per host
  std::string algo;                  // daemon --algo
};

std::unique_ptr<testbed::Testbed> make_bed(const Layout& l, std::vector<std::string> extra = {}) {
  return test::make_bed(l.racks, l.algo, 20000, std::move(extra));
}

// What these tests wait on instead of sleeping: the daemons' own reports.
// Rank r's submissions its host's daemon has taken.
uint64_t submitted_on(const testbed::Testbed& bed, const std::vector<Place>& p,
                      const std::string& job, int r) {
  return submitted(bed.admin_socket(p[size_t(r)].host), job, r);
}
// Bytes host h has sent to host `to` (gsyncctl peers).
uint64_t bytes_sent_to(const testbed::Testbed& bed, int h, int to) {
  nlohmann::json j = admin_json(bed.admin_socket(h), "peers");
  if (!j.is_object() || !j["peers"].is_array()) return 0;
  for (const auto& peer : j["peers"])
    if (peer.value("host", "") == bed.host_id(to)) return peer.value("bytes_sent", uint64_t{0});
  return 0;
}

// Connects rank `rank` of job and allocates 1024 floats in its arena; null
// (after reporting why) when either fails.
float* connect_small(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
                     int rank, gsync_comm_t** comm) {
  if (connect_place(bed, job, p, rank, comm) != 0) {
    report(fmt::format("rank {}: connect: {}\n", rank, gsync_last_error()));
    return nullptr;
  }
  void* buf = nullptr;
  if (gsync_alloc(*comm, 4096, &buf) != 0) {
    report(fmt::format("rank {}: alloc: {}\n", rank, gsync_last_error()));
    return nullptr;
  }
  return static_cast<float*>(buf);
}

// Waits for req and reports its error, which must be GSYNC_ERR_RANK_DEAD
// within max_secs: at once, not at the op's timeout. 0 when it was.
int wait_rank_dead(gsync_request_t* req, double max_secs) {
  auto t0 = Clock::now();
  int rc = gsync_wait(req, 20000);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  report(fmt::format("{}\n", gsync_request_error(req)));
  RANK_CHECK(rc == GSYNC_ERR_RANK_DEAD, "got {} ({})", rc, gsync_request_error(req));
  RANK_CHECK(secs < max_secs, "failed after {} s, not at once", secs);
  gsync_request_free(req);
  return 0;
}

class Topology : public ::testing::TestWithParam<Layout> {};

// Every algorithm x every dtype and op, odd sizes, uneven ranks per host.
TEST_P(Topology, EveryDtypeAndOpAndSize) {
  const Layout& l = GetParam();
  auto bed = make_bed(l);
  ASSERT_TRUE(bed);
  std::vector<OpCase> cases = every_dtype_and_op(30011);  // no chunk size divides it
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}, size_t{16384}, size_t{1000003}})
    cases.push_back({GSYNC_FLOAT32, GSYNC_SUM, count});
  run_job(*bed, "matrix", l.ranks_per_host, cases);
  for (int h = 0; h < bed->hosts(); h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
}

INSTANTIATE_TEST_SUITE_P(
    Cluster, Topology,
    ::testing::Values(Layout{{2}, {1, 2}, "ring"}, Layout{{2}, {2, 2}, "direct"},
                      Layout{{3}, {1, 3, 2}, "ring"}, Layout{{2, 1}, {2, 1, 1}, "hier"},
                      Layout{{2, 2}, {1, 1, 1, 1}, "hier"}, Layout{{1, 1}, {4, 1}, "hier"},
                      Layout{{2, 2}, {2, 1, 2, 1}, "ring"}, Layout{{2, 2}, {1, 2, 1, 1}, "auto"},
                      Layout{{2, 2}, {1, 2, 1, 2}, "tree"}, Layout{{3}, {1, 1, 2}, "tree"},
                      Layout{{2, 2}, {2, 1, 1, 1}, "doubling"}, Layout{{3, 2}, {1, 1, 2, 1, 1}, "doubling"}),
    [](const auto& info) {
      std::string name = info.param.algo;
      for (int r : info.param.racks) name.append("_").append(std::to_string(r));
      return name.append("_").append(std::to_string(info.index));
    });

// 64 MiB (tens of chunks: as many stages at once as at 256 MiB, which took
// 41 s of the sanitizer lane), two ranks on some hosts: their fold and
// their store are pipelined with the cross-host step (a chunk goes out as
// soon as the fold has finished it and is stored into the other rank as
// soon as it is final, while the fold still works on later chunks).
// Averages rewrite the host's own copy in the store too.
TEST(MultiHost, LargeTensorsOnTwoRacks) {
  auto bed = make_bed({{2, 2}, {}, "auto"});
  ASSERT_TRUE(bed);
  run_job(*bed, "big", {2, 1, 1, 2}, {{GSYNC_FLOAT32, GSYNC_SUM, (64u << 20) / 4},
                                      {GSYNC_FLOAT32, GSYNC_WEIGHTED_AVG, (32u << 20) / 4 + 3},
                                      {GSYNC_BFLOAT16, GSYNC_AVG, (16u << 20) / 2 + 5}});
}

// The plan cache (docs/architecture.md, "The plan cache"): after the first
// step of a tensor every host reuses its plan, and once the job's ranks are
// gone so are its plans.
TEST(MultiHost, PlansAreReusedStepAfterStepAndGoWithTheJob) {
  auto bed = make_bed({{2, 1}, {}, "auto"});
  ASSERT_TRUE(bed);
  std::vector<OpCase> cases(6, OpCase{GSYNC_FLOAT32, GSYNC_SUM, 300001});
  run_job(*bed, "plans", {2, 1, 1}, cases);
  for (int h = 0; h < bed->hosts(); h++) {
    nlohmann::json plans;
    wait_until([&] {
      plans = admin_json(bed->admin_socket(h), "status")["plans"];
      return plans["idle"] == 0 && plans["retiring"] == 0;
    });
    // One plan for the six allreduces, one for run_cases' closing barrier.
    EXPECT_EQ(plans["misses"], 2) << bed->host_id(h) << ": " << plans.dump();
    EXPECT_EQ(plans["hits"], 5) << bed->host_id(h) << ": " << plans.dump();
    EXPECT_EQ(plans["idle"], 0) << bed->host_id(h) << ": " << plans.dump();
    EXPECT_EQ(plans["leased"], 0) << bed->host_id(h) << ": " << plans.dump();
  }
}

TEST(MultiHost, TwoJobsAtOnce) {
  auto bed = make_bed({{2, 1}, {}, "auto"});
  ASSERT_TRUE(bed);
  std::vector<OpCase> cases = {{GSYNC_FLOAT32, GSYNC_SUM, 1 << 20}, {GSYNC_BFLOAT16, GSYNC_AVG, 333},
                               {GSYNC_FLOAT64, GSYNC_MAX, 70001}};
  pid_t a = spawn([&] {
    run_job(*bed, "job-a", {1, 1, 1}, cases);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  run_job(*bed, "job-b", {2, 1, 2}, cases);
  int st;
  waitpid(a, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "job-a failed";
}

// A peer daemon killed mid-op: ranks elsewhere get an error naming the lost
// host; once it is back, the job (restarted on that host) completes a new op.
TEST(MultiHost, LostPeerFailsTheOpThenRejoins) {
  auto bed = make_bed({{2, 1}, {}, "ring"});
  ASSERT_TRUE(bed);
  auto p = places({1, 1, 1});
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  // Ranks 0 and 1 submit and wait; rank 2 (host 3) never submits this op.
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_place(*bed, "lost", p, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 1 << 22, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    if (r == 2) {
      char c;
      [[maybe_unused]] ssize_t n = read(go[0], &c, 1);  // until the parent killed our daemon
      gsync_close(comm);
      return 0;
    }
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 5, buf, 1 << 20, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    if (r == 0) {
      // The op runs on hosts 1 and 2 (every rank of the job is accounted
      // for, both parts are in), waiting for host 3's part.
      RANK_CHECK(wait_until([&] {
                   return job_count(bed->admin_socket(0), "lost", "ops_running") >= 1 &&
                          job_count(bed->admin_socket(1), "lost", "ops_running") >= 1;
                 }),
                 "the op did not start on hosts 1 and 2");
      bed->kill_daemon(2, SIGKILL);  // (the test bed is shared memory of the fork: pid is valid)
    }
    auto t0 = Clock::now();
    int rc = gsync_wait(req, 25000);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    report(fmt::format("{}\n", gsync_request_error(req)));
    RANK_CHECK(rc == GSYNC_ERR_HOST_LOST || rc == GSYNC_ERR_RANK_DEAD, "got {} ({})", rc,
               gsync_request_error(req));
    RANK_CHECK(secs < 15, "took {} s", secs);
    gsync_request_free(req);
    if (r == 0) [[maybe_unused]] ssize_t n = write(go[1], "gg", 2);
    gsync_close(comm);
    return 0;
  }, 120);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find(bed->host_id(2)), std::string::npos) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find("step 5"), std::string::npos) << res[size_t(r)].output;
  }
  // The host comes back and the job goes on with a new op.
  bed->kill_daemon(2, SIGKILL);
  Status st = bed->start_daemon(2);
  ASSERT_TRUE(st) << st.message();
  run_job(*bed, "lost-again", {1, 1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 100000}});
  std::string peers = admin_query(bed->admin_socket(0), "peers");
  EXPECT_NE(peers.find("\"state\":\"up\""), std::string::npos) << peers;
}

// A peer lost while a large op with several local ranks is under way: the
// fold, chunks on the wire and chunk stores may all be in flight. Ops that
// complete have the whole sum; the one cut off fails naming the host (no
// partial sum, no hang), the daemon lives on, and a new job completes once
// the host is back.
TEST(MultiHost, LostPeerDuringAPipelinedOp) {
  auto bed = make_bed({{2}, {}, "ring"});
  ASSERT_TRUE(bed);
  auto p = places({3, 1});
  constexpr size_t kCount = (128u << 20) / 4;
  auto res = run_ranks(4, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_place(*bed, "lost-big", p, r, &comm, (128u << 20) + (8 << 20)) == 0, "{}",
               gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, kCount * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (uint64_t step = 0; step < 20; step++) {
      for (size_t i = 0; i < kCount; i += 4096) buf[i] = 1.0f;
      gsync_request_t* req;
      uint64_t sent_before = r == 0 && step == 1 ? bytes_sent_to(*bed, 0, 1) : 0;
      RANK_CHECK(gsync_allreduce(comm, 1, step, buf, kCount, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                 "submit");
      if (r == 0 && step == 1) {
        // Step 1 is on the wire (a MiB of it has left for host 2; heartbeats
        // are bytes too, but not that many): the kill cuts it mid-transfer.
        RANK_CHECK(wait_until([&] { return bytes_sent_to(*bed, 0, 1) > sent_before + (1 << 20); },
                              20000, 1),
                   "step 1 never reached the wire");
        bed->kill_daemon(1, SIGKILL);
      }
      int rc = gsync_wait(req, 25000);
      std::string err = gsync_request_error(req);
      gsync_request_free(req);
      if (rc != 0) {
        report(fmt::format("{}\n", err));
        if (r == 3) return 0;  // its own daemon is gone
        RANK_CHECK(rc == GSYNC_ERR_HOST_LOST || rc == GSYNC_ERR_RANK_DEAD, "got {} ({})", rc, err);
        RANK_CHECK(step >= 1, "step {} failed before the kill: {}", step, err);
        gsync_close(comm);
        return 0;
      }
      for (size_t i = 0; i < kCount; i += 4096)
        RANK_CHECK(buf[i] == 4.0f, "step {} element {}: {} (a partial sum?)", step, i, buf[i]);
    }
    RANK_CHECK(false, "20 ops completed without host 2");
    return 1;
  }, 120);
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find(bed->host_id(1)), std::string::npos) << res[size_t(r)].output;
  }
  EXPECT_TRUE(bed->daemon_alive(0)) << bed->daemon_log(0);
  bed->kill_daemon(1, SIGKILL);
  Status st = bed->start_daemon(1);
  ASSERT_TRUE(st) << st.message();
  run_job(*bed, "lost-big-again", {3, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 1000003}});
}

// Rank 3 is killed; rank 2 (same host) then exits too, as a training
// process does when its step fails. Host 1's ranks submit only after both
// departures reached their daemon: their op fails at once, naming rank 3
// (the cause), not rank 2 (a consequence).
TEST(MultiHost, FirstRemoteDepartureIsTheCauseNamed) {
  auto bed = make_bed({{2}, {}, "auto"});
  ASSERT_TRUE(bed);
  auto p = places({2, 2});
  auto res = run_ranks(4, [&](int r) {
    gsync_comm_t* comm;
    float* buf = connect_small(*bed, "cause", p, r, &comm);
    if (!buf) return 1;
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 256, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    RANK_CHECK(gsync_wait(req, 20000) == 0, "first op: {}", gsync_request_error(req));
    gsync_request_free(req);
    if (r == 3) raise(SIGKILL);
    // Host 1 (ranks 0 and 1) counts the departures of host 2's ranks.
    auto departures = [&] { return job_count(bed->admin_socket(0), "cause", "remote_departures"); };
    if (r == 2) {
      // Leaves second: only once host 1 heard of rank 3.
      bool heard = wait_until([&] { return departures() >= 1; });
      gsync_close(comm);
      RANK_CHECK(heard, "host 1 never heard of rank 3");
      return 0;
    }
    // Submit once both departures reached this host.
    RANK_CHECK(wait_until([&] { return departures() >= 2; }), "departures seen: {}", departures());
    RANK_CHECK(gsync_allreduce(comm, 1, 1, buf, 256, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    int rc = wait_rank_dead(req, 2);
    gsync_close(comm);
    return rc;
  }, 60);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find("rank 3 ("), std::string::npos) << res[size_t(r)].output;
    EXPECT_EQ(res[size_t(r)].output.find("rank 2 ("), std::string::npos) << res[size_t(r)].output;
  }
}

// Host 2 begins an op, host 1's rank submits its part and leaves (its
// daemon still finishes the op), and host 0's rank submits only after host 0
// heard of the departure: host 0 fails the op at once, and host 2, which
// waits for host 0's part, must hear of it then, not at its 20 s timeout.
// (Hosts are named h1, h2, h3.)
TEST(MultiHost, OpFailedAfterADepartureFailsWhereItHadBegun) {
  for (const char* algo : {"direct", "tree"}) {
    auto bed = make_bed({{3}, {}, algo});
    ASSERT_TRUE(bed);
    auto p = places({1, 1, 1});
    std::string job = fmt::format("begun-{}", algo);
    auto res = run_ranks(3, [&](int r) {
      gsync_comm_t* comm;
      float* buf = connect_small(*bed, job, p, r, &comm);
      if (!buf) return 1;
      RANK_CHECK(gsync_barrier(comm, 0, 20000) == 0, "barrier: {}", gsync_last_error());
      // Host 3 begins the op first, then host 2; host 1's rank comes last,
      // once its daemon heard that host 2's rank left. (The barrier was
      // every rank's first submission.)
      if (r == 1)
        RANK_CHECK(wait_until([&] { return submitted_on(*bed, p, job, 2) >= 2; }), "rank 2 late");
      if (r == 0)
        RANK_CHECK(wait_until([&] {
                     return job_count(bed->admin_socket(0), job, "remote_departures") >= 1;
                   }),
                   "host 1 never heard of rank 1 leaving");
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 256, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                 "submit: {}", gsync_last_error());
      if (r == 1) {
        // Leaves once its part is in its daemon's hands.
        bool in = wait_until([&] { return submitted_on(*bed, p, job, 1) >= 2; });
        gsync_close(comm);
        RANK_CHECK(in, "host 2 never took rank 1's part");
        return 0;
      }
      int rc = wait_rank_dead(req, r == 0 ? 1 : 3);
      // Rank 0 stays until host 3's op has failed: its own departure would
      // also fail the op there.
      if (r == 0)
        RANK_CHECK(wait_until([&] { return daemon_ops_failed(bed->admin_socket(2)) >= 1; }),
                   "the op never failed on host 3");
      gsync_close(comm);
      return rc;
    }, 60);
    for (int r : {0, 2}) {
      const std::string& out = res[size_t(r)].output;
      EXPECT_EQ(res[size_t(r)].code, 0) << algo << " rank " << r << ": " << out;
      EXPECT_NE(out.find("rank 1 ("), std::string::npos) << algo << ": " << out;
    }
    EXPECT_NE(res[2].output.find("reported by host h1"), std::string::npos) << res[2].output;
  }
}

// The end of a training run: every rank leaves right after its last op. A
// small op across 4 hosts goes up a tree (or pairwise, doubling), so a host
// whose rank is done may announce the departure before the last transfer
// reached some other host; that host must still complete the op, not fail
// it (the departed rank's part is in). Many short jobs, each root in turn.
class SmallOps : public ::testing::TestWithParam<std::string> {};

TEST_P(SmallOps, RanksLeavingRightAfterTheLastOpFailNobody) {
  auto bed = make_bed({{4}, {}, GetParam()});
  ASSERT_TRUE(bed);
  auto p = places({1, 1, 1, 1});
  for (int j = 0; j < 12; j++) {
    std::string job = fmt::format("last-{}", j);
    auto res = run_ranks(4, [&](int r) {
      gsync_comm_t* comm;
      float* buf = connect_small(*bed, job, p, r, &comm);
      if (!buf) return 1;
      for (uint64_t step = 0; step < 4; step++) {
        for (int i = 0; i < 256; i++) buf[i] = float(r + i);
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce(comm, 1, step, buf, 256, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                   "submit: {}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 20000) == 0, "step {}: {}", step, gsync_request_error(req));
        gsync_request_free(req);
        for (int i = 0; i < 256; i++)
          RANK_CHECK(buf[i] == float(6 + 4 * i), "step {} element {}: {}", step, i, buf[i]);
      }
      gsync_close(comm);
      return 0;
    }, 60);
    for (int r = 0; r < 4; r++)
      EXPECT_EQ(res[size_t(r)].code, 0) << job << " rank " << r << ": " << res[size_t(r)].output;
  }
}

// The other side of the rule above: a rank that leaves without submitting
// fails the op on every other host at once (not at its timeout), naming
// it, though in a tree or a doubling not every host hears from it directly.
// The key sets the tree's root (key + step mod 4 here), so the leaving host
// is the root in one job and a leaf in the others.
TEST_P(SmallOps, RankLeavingBeforeItsPartFailsEveryHostAtOnce) {
  auto bed = make_bed({{4}, {}, GetParam()});
  ASSERT_TRUE(bed);
  auto p = places({1, 1, 1, 1});
  for (uint64_t key = 0; key < 4; key++) {
    std::string job = fmt::format("gone-{}", key);
    auto res = run_ranks(4, [&](int r) {
      gsync_comm_t* comm;
      float* buf = connect_small(*bed, job, p, r, &comm);
      if (!buf) return 1;
      RANK_CHECK(gsync_barrier(comm, 0, 20000) == 0, "barrier: {}", gsync_last_error());
      if (r == 3) {
        // Leaves once every other rank's part is in its daemon's hands.
        bool in = wait_until([&] {
          for (int o = 0; o < 3; o++)
            if (submitted_on(*bed, p, job, o) < 2) return false;  // the barrier, then the op
          return true;
        });
        gsync_close(comm);
        RANK_CHECK(in, "the other ranks did not submit");
        return 0;
      }
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, key, 0, buf, 256, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                 "submit");
      int rc = wait_rank_dead(req, 3);
      gsync_close(comm);
      return rc;
    }, 60);
    for (int r = 0; r < 3; r++) {
      EXPECT_EQ(res[size_t(r)].code, 0) << job << " rank " << r << ": " << res[size_t(r)].output;
      EXPECT_NE(res[size_t(r)].output.find("rank 3 ("), std::string::npos) << res[size_t(r)].output;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MultiHost, SmallOps, ::testing::Values("tree", "doubling"));

// Every rank but `absent` submits one op of `count` floats (key 3, step 9,
// op timeout 800 ms) and reports the error it ends with, which must be a
// timeout; `absent` connects and never submits.
std::vector<ChildResult> run_with_absent_rank(const testbed::Testbed& bed,
                                              const std::vector<int>& per_host, int absent,
                                              int count, double max_secs,
                                              const std::string& job = "late") {
  auto p = places(per_host);
  std::vector<int64_t> failed_before;
  for (int h = 0; h < bed.hosts(); h++) failed_before.push_back(daemon_ops_failed(bed.admin_socket(h)));
  // Whether the op has failed on every host of a rank that submitted it.
  auto failed_everywhere = [&] {
    for (size_t o = 0; o < p.size(); o++) {
      int h = p[o].host;
      if (int(o) != absent && daemon_ops_failed(bed.admin_socket(h)) <= failed_before[size_t(h)])
        return false;
    }
    return true;
  };
  return run_ranks(static_cast<int>(p.size()), [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_place(bed, job, p, r, &comm, 0, 800) == 0, "{}", gsync_last_error());
    if (r == absent) {
      // Connected, never submits: stays until the op has failed on every
      // other rank's host (a departure would fail it sooner, and
      // differently).
      bool failed = wait_until(failed_everywhere, 20000);
      gsync_close(comm);
      RANK_CHECK(failed, "the others' op did not fail");
      return 0;
    }
    float* buf;
    RANK_CHECK(gsync_alloc(comm, size_t(count) * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 3, 9, buf, size_t(count), GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "submit");
    auto t0 = Clock::now();
    int rc = gsync_wait(req, 10000);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    report(fmt::format("{}\n", gsync_request_error(req)));
    RANK_CHECK(rc == GSYNC_ERR_TIMEOUT, "got {} ({})", rc, gsync_request_error(req));
    RANK_CHECK(secs > 0.5 && secs < max_secs, "timed out after {} s", secs);
    gsync_request_free(req);
    // Nor does a rank that has its error leave before every host has
    // failed the op: a host that heard nothing of the op from this one
    // (a doubling partner's partner) would fail it for the departure
    // instead, if the departure came before the abort that names the
    // absent host (two links, no order between them).
    RANK_CHECK(wait_until(failed_everywhere, 20000), "the op did not fail on every host");
    gsync_close(comm);
    return 0;
  }, 60);
}

// A rank on another host never submits: the op times out in the cross-host
// step on the hosts that were ready, naming the host that was not.
TEST(MultiHost, CrossHostTimeoutNamesTheHostThatDidNotArrive) {
  auto bed = make_bed({{2, 1}, {}, "auto"});
  ASSERT_TRUE(bed);
  auto res = run_with_absent_rank(*bed, {1, 1, 1}, 2, 1 << 18, 2.4);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find(bed->host_id(2)), std::string::npos) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find("key 3 step 9"), std::string::npos) << res[size_t(r)].output;
  }
}

// A small tensor across 4 hosts goes up a tree: the hosts below the root
// wait for the root's final sum, the one waiting for the missing host's
// part names it (and aborts the op for everyone).
TEST(MultiHost, TreeTimeoutNamesTheHostThatDidNotArrive) {
  auto bed = make_bed({{4}, {}, "auto"});
  ASSERT_TRUE(bed);
  auto res = run_with_absent_rank(*bed, {1, 1, 1, 1}, 3, 256, 2.4);
  int named = 0;
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find("key 3 step 9"), std::string::npos) << res[size_t(r)].output;
    named += res[size_t(r)].output.find(bed->host_id(3)) != std::string::npos;
  }
  EXPECT_GE(named, 1) << "no error names the host that never arrived:\n"
                      << res[0].output << res[1].output << res[2].output;
}

// Recursive doubling across 5 hosts: 4 exchange pairwise, the fifth hands
// its part to host 1 and gets the sum back. Whether the absent host is that
// fifth one or one of the pairs, the host waiting for it directly times out
// first (the others wait a grace per step) and its abort names it to all.
TEST(MultiHost, DoublingTimeoutNamesTheHostThatDidNotArrive) {
  auto bed = make_bed({{5}, {}, "doubling"});
  ASSERT_TRUE(bed);
  for (int absent : {4, 1}) {
    auto res = run_with_absent_rank(*bed, {1, 1, 1, 1, 1}, absent, 256, 2.4,
                                    fmt::format("late-{}", absent));
    for (int r = 0; r < 5; r++) {
      if (r == absent) continue;
      EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
      EXPECT_NE(res[size_t(r)].output.find(bed->host_id(absent)), std::string::npos)
          << "absent " << absent << ", rank " << r << ": " << res[size_t(r)].output;
    }
  }
}

// Runs cmd (a daemon command line) in host h's namespace, its output in
// log; the caller kills and reaps the pid.
pid_t spawn_daemon(testbed::Testbed& bed, int h, std::vector<std::string> cmd,
                   const std::string& log) {
  return bed.spawn_in_host(h, [cmd, log]() mutable {
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    return 127;
  });
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The peers entry of host `of` in host `at`'s `gsyncctl peers --json`.
nlohmann::json peer_entry(const testbed::Testbed& bed, int at, int of) {
  nlohmann::json j =
      nlohmann::json::parse(admin_query(bed.admin_socket(at), "peers"), nullptr, false);
  if (j.is_discarded() || !j.contains("peers")) return {};
  for (const auto& p : j["peers"])
    if (p.value("host", "") == bed.host_id(of)) return p;
  return {};
}

// Host 3 comes back holding another cluster's key (a key file from another
// bed): the others refuse it and name it - their peers entry for it is down
// with a key-mismatch last error, and its own names them - while jobs on the
// hosts with the right key go on.
TEST(MultiHost, ADaemonWithAnotherClustersKeyIsRefusedAndNamed) {
  auto bed = make_bed({{3}, {}, "auto"});
  ASSERT_TRUE(bed);
  // Up first, so that "down" below is news about the odd host.
  auto up = [&](int at, int of) { return peer_entry(*bed, at, of).value("state", "") == "up"; };
  auto until = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < until && !(up(0, 2) && up(1, 2)))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(up(0, 2) && up(1, 2)) << peer_entry(*bed, 0, 2).dump();
  bed->kill_daemon(2, SIGKILL);
  std::string other_key = bed->dir() + "/other-cluster.key";
  Status made = create_cluster_key(other_key);
  ASSERT_TRUE(made) << made.message();
  auto cmd = bed->daemon_command(2);
  bool replaced = false;
  for (size_t i = 0; i + 1 < cmd.size(); i++)
    if (cmd[i] == "--cluster-key") {
      cmd[i + 1] = other_key;
      replaced = true;
    }
  ASSERT_TRUE(replaced) << "the test bed starts daemons without --cluster-key";
  std::string log = bed->dir() + "/other-key.log";
  pid_t pid = spawn_daemon(*bed, 2, cmd, log);
  auto mismatch = [&](int at, int of) {
    return peer_entry(*bed, at, of).value("last_error", "").find("key mismatch") !=
           std::string::npos;
  };
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline && !(mismatch(0, 2) && mismatch(1, 2) && mismatch(2, 0)))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The right-key hosts run a job meanwhile (the odd one has no rank in it).
  run_job(*bed, "right-key", {1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 100003}});
  std::string their_log = file_text(log);
  for (int at : {0, 1}) {
    nlohmann::json p = peer_entry(*bed, at, 2);
    std::string err = p.value("last_error", "");
    EXPECT_EQ(p.value("state", ""), "down") << p.dump();
    EXPECT_NE(err.find("key mismatch: " + bed->host_id(2) + " (" + bed->address(2) + ":"),
              std::string::npos)
        << bed->host_id(at) << ": " << p.dump();
  }
  // Its side: the acceptor's refusal, naming each connecting host.
  for (int of : {0, 1}) {
    std::string err = peer_entry(*bed, 2, of).value("last_error", "");
    EXPECT_NE(err.find("key mismatch: " + bed->host_id(of) + " ("), std::string::npos)
        << err << "\n"
        << their_log;
  }
  EXPECT_NE(their_log.find("refused a connection from " + bed->address(0) + ":"), std::string::npos)
      << their_log;
  EXPECT_NE(bed->daemon_log(0).find("key mismatch: " + bed->host_id(2)), std::string::npos)
      << bed->daemon_log(0);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  for (int h : {0, 1}) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
  // With the bed's key again it rejoins, and a job across all three completes.
  Status st = bed->start_daemon(2);
  ASSERT_TRUE(st) << st.message();
  run_job(*bed, "all-keys", {1, 1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 4097}});
}

TEST(MultiHost, ClusterNameMismatchIsRefusedNamingBoth) {
  auto bed = make_bed({{2}, {}, "auto"});
  ASSERT_TRUE(bed);
  // Host 2 comes back believing in another cluster.
  bed->kill_daemon(1, SIGKILL);
  std::string other = bed->dir() + "/other-cluster.toml";
  {
    std::ifstream in(bed->cluster_file());
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    auto pos = text.find("name = \"");
    ASSERT_NE(pos, std::string::npos);
    text.insert(pos + 8, "other-");
    std::ofstream(other) << text;
  }
  auto cmd = bed->daemon_command(1);
  for (size_t i = 0; i + 1 < cmd.size(); i++)
    if (cmd[i] == "--cluster") cmd[i + 1] = other;
  pid_t pid = bed->spawn_in_host(1, [&] {
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fd = open((bed->dir() + "/other.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(argv[0], argv.data());
    return 127;
  });
  std::string peers;
  wait_until([&] {
    peers = admin_query(bed->admin_socket(0), "peers");
    return peers.find("other-") != std::string::npos;
  });
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_NE(peers.find("other-"), std::string::npos) << peers << "\n" << bed->daemon_log(0);
  EXPECT_NE(peers.find(bed->name()), std::string::npos) << peers;
  // The refusal comes with its age, seconds at most here (gsyncctl peers
  // shows "... (1.2s ago)"). Keys are in alphabetical order: the age
  // follows the error it belongs to.
  auto age_at = peers.find("\"last_error_age_s\":", peers.find("other-"));
  ASSERT_NE(age_at, std::string::npos) << peers;
  double age = std::strtod(peers.c_str() + age_at + 19, nullptr);
  EXPECT_GE(age, 0.0) << peers;
  EXPECT_LT(age, 30.0) << peers;
  EXPECT_NE(peers.compare(age_at + 19, 4, "null"), 0) << peers;
}

TEST(MultiHost, MalformedFrameDropsTheConnectionNotTheDaemon) {
  auto bed = make_bed({{2}, {}, "auto"});
  ASSERT_TRUE(bed);
  // Garbage at host 1's daemon port, from inside host 2's namespace.
  std::string addr = bed->address(0);
  uint16_t port = bed->port(0);
  pid_t pid = bed->spawn_in_host(1, [&] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return 1;
    // The daemon must close the connection: EOF, or a reset since the junk
    // is never read. Not within 10 s is a failure, not a hang.
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string junk(4096, '\x5a');
    if (write(fd, junk.data(), junk.size()) <= 0) return 2;
    char c;
    ssize_t n = read(fd, &c, 1);
    int err = errno;
    close(fd);
    if (n == 0 || (n < 0 && err == ECONNRESET)) return 0;
    return n < 0 && (err == EAGAIN || err == EWOULDBLOCK) ? 3 : 4;
  });
  int st;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << "1: no connect, 2: no write, 3: the daemon did not close the "
                                   "connection within 10 s, 4: it answered the junk";
  run_job(*bed, "after-junk", {1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 4097}});
  EXPECT_TRUE(bed->daemon_alive(0));
}

// Stands in for host `self` of the bed (its daemon killed): links with the
// others over the real transport, announces rank `self` of each job in
// `jobs`, and answers every op's data with `corrupt` applied to a copy of
// it. Returns 0 once an OpAbort whose text contains `expect` came back for
// every job, 2 on timeout.
int fake_peer(const testbed::Testbed& bed, int self, const std::vector<std::string>& jobs,
              std::function<void(collective::OpReady*, std::string* data)> corrupt,
              const std::string& expect) {
  transport::ContextOptions o;
  o.identity = {bed.name(), cluster::kProtocolVersion, GSYNC_VERSION_STRING};
  // It holds the bed's key: past the handshake, what it sends is checked
  // like any peer's.
  if (!load_cluster_key(bed.key_file(), &o.cluster_key)) return 3;
  for (int h = 0; h < bed.hosts(); h++) o.hosts.push_back({bed.host_id(h), bed.address(h), bed.port(h), ""});
  o.self = self;
  Status err;
  auto net = transport::make_context(o, /*prefer_verbs=*/false, &err);
  if (!net) return 3;
  std::set<std::string> aborted;
  bool announced = false;
  transport::Handlers h;
  h.on_peer_up = [&](int peer) {
    for (const auto& job : jobs) net->send_control(peer, cluster::encode_announce(job, 2, {self}));
    announced = true;
  };
  h.on_control = [&](int peer, std::string_view msg) {
    collective::OpReady m;
    if (msg.empty()) return;
    if (msg[0] == collective::kOpData && cluster::decode(msg, &m)) {
      std::string data(msg.substr(sizeof m));
      m.slot = static_cast<uint8_t>(self);  // what a direct schedule expects from us
      corrupt(&m, &data);
      std::string reply(cluster::as_bytes(m));
      net->send_control(peer, reply + data);
    }
    collective::OpAbort a;
    if (msg[0] == collective::kOpAbort && cluster::decode(msg, &a)) {
      std::string text = cluster::field(a.message, sizeof a.message);
      report(fmt::format("abort: {}\n", text));
      if (text.find(expect) != std::string::npos) aborted.insert(cluster::field(a.job, sizeof a.job));
    }
  };
  if (!net->start(std::move(h))) return 3;
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  epoll_ctl(ep, EPOLL_CTL_ADD, net->event_fd(), &ev);
  auto until = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < until && aborted.size() < jobs.size()) {
    epoll_wait(ep, &ev, 1, 20);
    net->poll();
  }
  close(ep);
  return announced && aborted.size() == jobs.size() ? 0 : 2;
}

// A peer that passes the links' handshake but sends an op's data that does
// not fit the op: the daemon fails the op for its ranks with
// GSYNC_ERR_PROTOCOL naming the peer and what was wrong, tells the peer
// (OpAbort), and keeps serving: with the real daemon back, a job completes.
TEST(MultiHost, BadOpDataFromAPeerFailsTheOpNamingItNotTheDaemon) {
  struct Case {
    std::string job, expect;
    std::function<void(collective::OpReady*, std::string*)> corrupt;
  };
  std::vector<Case> cases = {
      {"bad-slot", "does not expect", [](collective::OpReady* m, std::string*) { m->slot = 9; }},
      {"bad-length", "bytes of data, expected",
       [](collective::OpReady*, std::string* d) { d->resize(d->size() / 2); }},
      {"bad-kind", "unknown kind", [](collective::OpReady* m, std::string*) { m->xfer = 7; }},
      {"bad-shape", "hosts disagree", [](collective::OpReady* m, std::string*) { m->dtype = 9; }},
  };
  // tcp links: the fake is the peering context with no fast link (make_context
  // without verbs), whatever devices this machine has.
  auto bed = make_bed({{2}, {}, "direct"}, {"--transport", "tcp"});
  ASSERT_TRUE(bed);
  bed->kill_daemon(1, SIGKILL);
  auto p = places({1, 1});
  for (const auto& c : cases) {
    pid_t fake = bed->spawn_in_host(1, [&] { return fake_peer(*bed, 1, {c.job}, c.corrupt, c.expect); });
    ASSERT_GT(fake, 0);
    auto res = run_ranks(1, [&](int) {
      gsync_comm_t* comm;
      float* buf = connect_small(*bed, c.job, p, 0, &comm);
      if (!buf) return 1;
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 256, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
      int rc = gsync_wait(req, 20000);
      report(fmt::format("{}\n", gsync_request_error(req)));
      RANK_CHECK(rc == GSYNC_ERR_PROTOCOL || rc == GSYNC_ERR_MISMATCH, "got {} ({})", rc,
                 gsync_request_error(req));
      gsync_request_free(req);
      gsync_close(comm);
      return 0;
    }, 60);
    EXPECT_EQ(res[0].code, 0) << c.job << ": " << res[0].output << bed->daemon_log(0);
    EXPECT_NE(res[0].output.find(bed->host_id(1)), std::string::npos) << c.job << ": " << res[0].output;
    EXPECT_NE(res[0].output.find(c.expect), std::string::npos) << c.job << ": " << res[0].output;
    int st;
    waitpid(fake, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << c.job << ": the fake peer got no OpAbort saying '" << c.expect << "'";
    EXPECT_TRUE(bed->daemon_alive(0)) << bed->daemon_log(0);
  }
  Status st = bed->start_daemon(1);
  ASSERT_TRUE(st) << st.message();
  run_job(*bed, "after-bad-data", {1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 4097}});
}

// A job that waits for a rank on a host this one cannot reach says so
// (issue #38, item 6): host 3's daemon is gone, and the op's timeout names
// the ranks that never came and the link from h1 to h3 that is not up.
TEST(MultiHost, AWaitNamesTheLinksThatAreDown) {
  auto bed = make_bed({{3}, {}, "auto"});
  ASSERT_TRUE(bed);
  bed->kill_daemon(2, SIGKILL);
  auto p = std::vector<Place>{{0, 0, 1}, {2, 0, 1}};
  gsync_comm_t* comm;
  ASSERT_EQ(connect_place(*bed, "no-link", p, 0, &comm), 0) << gsync_last_error();
  EXPECT_EQ(gsync_barrier(comm, 1, 1500), GSYNC_ERR_TIMEOUT);  // the op's own timeout
  const std::string err = gsync_last_error();
  EXPECT_NE(err.find("ranks not on any host yet: 1"), std::string::npos) << err;
  EXPECT_NE(err.find("links from h1 not up: h3 ("), std::string::npos) << err;
  gsync_close(comm);
}

}  // namespace
}  // namespace gsync::test
