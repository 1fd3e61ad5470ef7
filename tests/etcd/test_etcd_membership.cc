// SPDX-License-Identifier: Apache-2.0
//
// Membership on etcd for real (docs/membership.md): a test bed whose daemons
// register in a real etcd (etcd-server from Debian, started by the bed) with
// a 2 s lease. Hosts join and leave while the cluster runs, a killed host is
// dropped when its lease expires, and a stopped etcd leaves running jobs
// alone. The figures the issue asks for (how long peers take to follow) are
// printed; the assertions are about what happens, with deadlines.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "tests/etcd/etcd_bed.h"
#include "tests/integration/allreduce_cases.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tools/testbed/commands.h"
#include "tools/testbed/etcd.h"

namespace gsync::test {
namespace {

using Clock = std::chrono::steady_clock;
// The peers host h lists (members), and which of them are up.
std::set<std::string> listed(const testbed::Testbed& bed, int h, bool up_only) {
  std::set<std::string> out;
  auto j = admin_json(bed.admin_socket(h), "peers");
  if (!j.is_object() || !j["peers"].is_array()) return out;
  for (const auto& p : j["peers"])
    if (!up_only || p.value("state", "") == "up") out.insert(p.value("host", ""));
  return out;
}

// Waits until every host in `at` lists exactly `want` as up peers (itself
// left out); the milliseconds it took, or -1 at the deadline.
double wait_peers(const testbed::Testbed& bed, const std::vector<int>& at,
                  const std::set<std::string>& want_all, int deadline_ms) {
  auto t0 = Clock::now();
  bool ok = wait_until(
      [&] {
        for (int h : at) {
          std::set<std::string> want = want_all;
          want.erase(bed.host_id(h));
          if (listed(bed, h, false) != want || listed(bed, h, true) != want) return false;
        }
        return true;
      },
      deadline_ms, 20);
  return ok ? std::chrono::duration<double, std::milli>(Clock::now() - t0).count() : -1;
}

std::string membership_line(const testbed::Testbed& bed, int h) {
  auto j = admin_json(bed.admin_socket(h), "status");
  return j.is_object() ? j["membership"].dump() : "";
}

TEST(EtcdMembership, HostsJoinAndLeaveARunningCluster) {
  auto bed = make_etcd_bed(3);
  ASSERT_TRUE(bed);
  ASSERT_GE(wait_peers(*bed, {0, 1, 2}, {"h1", "h2", "h3"}, 20000), 0)
      << bed->daemon_log(0);
  EXPECT_NE(membership_line(*bed, 0).find("\"source\":\"etcd\""), std::string::npos)
      << membership_line(*bed, 0);

  // A fourth host joins; every host links to it, and a job spans all four.
  int h4 = -1;
  Status st = bed->add_host(1, &h4);
  ASSERT_TRUE(st) << st.message();
  double joined = wait_peers(*bed, {0, 1, 2, 3}, {"h1", "h2", "h3", "h4"}, 20000);
  ASSERT_GE(joined, 0) << bed->daemon_log(0) << bed->daemon_log(h4);
  std::printf("a joining host was listed up by every peer %.0f ms after it was ready (lease ttl "
              "%d s)\n",
              joined, kTtlS);
  run_job(*bed, "grown", {1, 1, 1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 100003}});

  // A clean stop revokes the lease: the others drop it at once.
  bed->remove_host(h4, SIGTERM);
  double left = wait_peers(*bed, {0, 1, 2}, {"h1", "h2", "h3"}, 20000);
  ASSERT_GE(left, 0) << bed->daemon_log(0);
  std::printf("a host that stopped was dropped by every peer %.0f ms later\n", left);

  // A crash: its link dies at once, and the host is dropped when its lease
  // expires (the peers stop reconnecting to it).
  bed->remove_host(2, SIGKILL);
  auto t0 = Clock::now();
  ASSERT_GE(wait_peers(*bed, {0, 1}, {"h1", "h2"}, 3 * kTtlS * 1000 + 10000), 0)
      << bed->daemon_log(0);
  double gone = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("a killed host was dropped by every peer %.0f ms after kill -9 (lease ttl %d s)\n",
              gone, kTtlS);
  EXPECT_NE(bed->daemon_log(0).find("host h3"), std::string::npos);
  EXPECT_NE(bed->daemon_log(0).find("left cluster"), std::string::npos) << bed->daemon_log(0);

  // It comes back under the same id: same slot, linked again, in a job.
  st = bed->start_daemon(2);
  ASSERT_TRUE(st) << st.message();
  ASSERT_GE(wait_peers(*bed, {0, 1, 2}, {"h1", "h2", "h3"}, 20000), 0) << bed->daemon_log(2);
  run_job(*bed, "back", {1, 1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 4099}});
}

// A three-member etcd cluster: the member every daemon names first is
// stopped; the cluster keeps its quorum, the daemons go on through the
// other two, a host joins and one leaves while it is down, and the member
// rejoins.
TEST(EtcdMembership, AThreeMemberEtcdLosesOneAndMembershipGoesOn) {
  auto bed = make_etcd_bed(3, true, 3);
  ASSERT_TRUE(bed);
  ASSERT_EQ(bed->etcd_members(), 3);
  ASSERT_GE(wait_peers(*bed, {0, 1, 2}, {"h1", "h2", "h3"}, 20000), 0) << bed->daemon_log(0);
  bed->etcd_member(0)->stop();
  int h4 = -1;
  Status st = bed->add_host(1, &h4);
  ASSERT_TRUE(st) << st.message();
  ASSERT_GE(wait_peers(*bed, {0, 1, 2, 3}, {"h1", "h2", "h3", "h4"}, 20000), 0)
      << bed->daemon_log(0) << bed->daemon_log(h4);
  run_job(*bed, "quorum", {1, 1, 1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 4099}});
  bed->remove_host(1, SIGTERM);
  ASSERT_GE(wait_peers(*bed, {0, 2, 3}, {"h1", "h3", "h4"}, 20000), 0) << bed->daemon_log(0);
  st = bed->etcd_member(0)->restart();
  ASSERT_TRUE(st) << st.message();
  bed->remove_host(h4, SIGTERM);
  ASSERT_GE(wait_peers(*bed, {0, 2}, {"h1", "h3"}, 20000), 0) << bed->daemon_log(0);
}

// kill -9 of a host in a running job: its ops fail on the survivors naming
// it; the survivors' next job runs without it. The time from the kill to
// their next successful op is printed (the bound: 2 x ttl + 1 s).
TEST(EtcdMembership, KilledHostFailsTheStepNamingItAndSurvivorsGoOn) {
  auto bed = make_etcd_bed(3);
  ASSERT_TRUE(bed);
  ASSERT_GE(wait_peers(*bed, {0, 1, 2}, {"h1", "h2", "h3"}, 20000), 0);
  auto p = places({1, 1, 1});
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::atomic<int64_t> killed_ns{0};
  std::thread killer([&] {
    // Once every rank has done a few steps.
    wait_until([&] { return submitted(bed->admin_socket(0), "doomed", 0) >= 5; }, 20000, 5);
    killed_ns = Clock::now().time_since_epoch().count();
    bed->remove_host(2, SIGKILL);
    [[maybe_unused]] ssize_t n = write(go[1], "x", 1);
  });
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_place(*bed, "doomed", p, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096 * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (uint64_t step = 0; step < 100000; step++) {
      for (int i = 0; i < 4096; i++) buf[i] = 1.0f;
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 1, step, buf, 4096, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                 "submit: {}", gsync_last_error());
      int rc = gsync_wait(req, 30000);
      if (rc != 0) {
        report(fmt::format("step {}: {}\n", step, gsync_request_error(req)));
        RANK_CHECK(rc == GSYNC_ERR_HOST_LOST || rc == GSYNC_ERR_RANK_DEAD, "got {}", rc);
        return 0;
      }
      gsync_request_free(req);
      RANK_CHECK(buf[0] == 3.0f, "step {}: {}", step, buf[0]);
    }
    return 1;
  }, 120);
  killer.join();
  close(go[0]);
  close(go[1]);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
    EXPECT_NE(res[size_t(r)].output.find("h3"), std::string::npos) << res[size_t(r)].output;
  }
  // The survivors' next step, as a training script that restarts its job
  // on the hosts that are left does it.
  run_job(*bed, "survivors", {1, 1}, {{GSYNC_FLOAT32, GSYNC_SUM, 4096}});
  double next_ms = (Clock::now().time_since_epoch().count() - killed_ns.load()) / 1e6;
  std::printf("kill -9 to the survivors' next successful step: %.0f ms (bound 2 x ttl + 1 s = "
              "%d ms)\n",
              next_ms, 2 * kTtlS * 1000 + 1000);
}

// etcd stops under a running job: its ops keep completing, status says etcd
// is unreachable; etcd restarts and membership follows it again (a host
// joins).
TEST(EtcdMembership, JobsKeepGoingWhileEtcdIsDown) {
  auto bed = make_etcd_bed(3);
  ASSERT_TRUE(bed);
  ASSERT_GE(wait_peers(*bed, {0, 1, 2}, {"h1", "h2", "h3"}, 20000), 0);
  const std::string done = bed->dir() + "/done";
  auto p = places({1, 1, 1});
  // The ranks run on a thread of their own: etcd is stopped and started
  // from this one (a child dies with the thread that started it).
  std::vector<ChildResult> res;
  std::thread ranks([&] {
    res = run_ranks(3, [&](int r) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_place(*bed, "steady", p, r, &comm) == 0, "{}", gsync_last_error());
      float* buf;
      RANK_CHECK(gsync_alloc(comm, 1024 * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
      for (uint64_t step = 0;; step++) {
        // Element 0 says whether this rank saw the end: every rank stops
        // after the same step.
        buf[0] = access(done.c_str(), F_OK) == 0 ? 1.0f : 0.0f;
        for (int i = 1; i < 1024; i++) buf[i] = float(r + 1);
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce(comm, 1, step, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                   "submit: {}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 30000) == 0, "step {}: {}", step, gsync_request_error(req));
        gsync_request_free(req);
        RANK_CHECK(buf[7] == 6.0f, "step {}: {}", step, buf[7]);
        if (buf[0] > 0) break;
      }
      gsync_close(comm);
      return 0;
    }, 180);
  });
  auto ops = [&] { return submitted(bed->admin_socket(0), "steady", 0); };
  auto etcd_up_everywhere = [&](bool up) {
    for (int h = 0; h < 3; h++)
      if (membership_line(*bed, h).find(up ? "\"up\":true" : "\"up\":false") ==
          std::string::npos)
        return false;
    return true;
  };
  EXPECT_TRUE(wait_until([&] { return ops() >= 20; }, 20000, 5));
  bed->etcd()->stop();
  EXPECT_TRUE(wait_until([&] { return etcd_up_everywhere(false); }, 20000, 20))
      << membership_line(*bed, 0);
  // Ops go on, and past two lease ttls with etcd away nobody is dropped.
  uint64_t at = ops();
  auto down_at = Clock::now();
  EXPECT_TRUE(wait_until(
      [&] { return ops() >= at + 50 && Clock::now() - down_at >= std::chrono::seconds(2 * kTtlS); },
      30000, 20));
  EXPECT_EQ(listed(*bed, 0, true).size(), 2u);
  Status st = bed->etcd()->restart();
  EXPECT_TRUE(st) << st.message();
  EXPECT_TRUE(wait_until([&] { return etcd_up_everywhere(true); }, 20000, 20))
      << membership_line(*bed, 0);
  at = ops();
  EXPECT_TRUE(wait_until([&] { return ops() >= at + 20; }, 20000, 5));
  std::FILE* f = std::fopen(done.c_str(), "w");
  if (f) std::fclose(f);
  ranks.join();
  for (size_t r = 0; r < res.size(); r++) EXPECT_EQ(res[r].code, 0) << res[r].output;
  EXPECT_NE(bed->daemon_log(0).find("etcd is unreachable"), std::string::npos)
      << bed->daemon_log(0);
  EXPECT_NE(bed->daemon_log(0).find("etcd answers again"), std::string::npos);
  EXPECT_EQ(listed(*bed, 0, true).size(), 2u);
  // Membership follows etcd again: a host joins.
  int h4 = -1;
  st = bed->add_host(1, &h4);
  ASSERT_TRUE(st) << st.message();
  EXPECT_GE(wait_peers(*bed, {0, 1, 2, 3}, {"h1", "h2", "h3", "h4"}, 20000), 0)
      << bed->daemon_log(0);
}

// A second daemon that claims a live host's id at another address is
// refused at start, naming the daemon that holds it.
TEST(EtcdMembership, ADuplicateHostIdIsRefused) {
  auto bed = make_etcd_bed(2);
  ASSERT_TRUE(bed);
  std::vector<std::string> argv = bed->daemon_command(0);
  for (size_t i = 0; i + 1 < argv.size(); i++) {
    if (argv[i] == "--socket" || argv[i] == "--admin-socket")
      argv[i + 1] = bed->dir() + "/dup" + argv[i].substr(2) + ".sock";
    if (argv[i] == "--port") argv[i + 1] = "1";  // another endpoint; never bound
  }
  argv.insert(argv.begin(), {"timeout", "30"});  // a daemon that is not refused is stopped
  auto r = testbed::run_command(argv);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find("registered in etcd already"), std::string::npos) << r.out << r.err;
  EXPECT_TRUE(bed->daemon_alive(0));
}

}  // namespace
}  // namespace gsync::test
