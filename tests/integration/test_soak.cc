// SPDX-License-Identifier: Apache-2.0
//
// A soak: one real daemon serves 8 jobs of 2 ranks for a minute
// (GSYNC_SOAK_SECONDS), allreducing tensors of random sizes, while a 9th job
// has a rank SIGKILLed in the middle of an op every round and comes back.
// Every result is checked, and at the end the daemon must hold what it held
// before: the same open fds and no more memory than before plus a margin.
// A leak of one fd or one arena per killed client shows here.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using Clock = std::chrono::steady_clock;

int open_fds(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    n++;
  return n;
}

// Resident memory in KiB (VmRSS).
long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  long value = 0;
  while (f >> key) {
    if (key == "VmRSS:") {
      f >> value;
      return value;
    }
    f.ignore(4096, '\n');
  }
  return -1;
}

int soak_seconds() {
  const char* s = std::getenv("GSYNC_SOAK_SECONDS");
  return s ? std::max(1, std::atoi(s)) : 60;
}

// One rank of a steady job: allreduce (sum) tensors of random sizes until
// the deadline, every element checked.
int steady_rank(const std::string& sock, const std::string& job, int rank, Clock::time_point until) {
  gsync_comm_t* comm = nullptr;
  RANK_CHECK(connect_rank(sock, job, 2, rank, &comm, 64 << 20) == 0, "{}", gsync_last_error());
  float* buf = nullptr;
  RANK_CHECK(gsync_alloc(comm, 8 << 20, reinterpret_cast<void**>(&buf)) == 0, "alloc");
  std::mt19937 rng(std::hash<std::string>{}(job));  // both ranks draw the same sizes
  uint64_t step = 0;
  for (;;) {
    // Both ranks stop at the same step: they agree on it with a min.
    buf[0] = Clock::now() < until ? 1.0f : 0.0f;
    gsync_request_t* go = nullptr;
    RANK_CHECK(gsync_allreduce(comm, 99, step, buf, 1, GSYNC_FLOAT32, GSYNC_MIN, 0, &go) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(go, 30000) == 0, "step {}: {}", step, gsync_request_error(go));
    gsync_request_free(go);
    if (buf[0] == 0.0f) break;
    size_t count = size_t(1) << (rng() % 21);  // 1 .. 1 Mi floats
    for (size_t i = 0; i < count; i++) buf[i] = float(rank + 1);
    gsync_request_t* req = nullptr;
    RANK_CHECK(gsync_allreduce(comm, 1, step, buf, count, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "{}", gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0, "step {}: {}", step, gsync_request_error(req));
    gsync_request_free(req);
    RANK_CHECK(buf[0] == 3.0f && buf[count - 1] == 3.0f, "step {}: {}", step, buf[count - 1]);
    step++;
  }
  gsync_close(comm);
  return 0;
}

// The victims' job, one round: rank 0 submits and waits; rank 1 submits
// another op and is killed while both are pending; rank 0 must hear of it.
bool victim_round(const DaemonProcess& d, int round, std::string* why) {
  std::string job = "victims";
  pid_t victim = spawn([&] {
    gsync_comm_t* comm = nullptr;
    if (connect_rank(d.socket(), job, 2, 1, &comm, 16 << 20) != 0) return 1;
    void* buf = nullptr;
    if (gsync_alloc(comm, 1 << 20, &buf) != 0) return 2;
    gsync_request_t* req = nullptr;
    gsync_allreduce(comm, 2, uint64_t(round), buf, 1 << 18, GSYNC_FLOAT32, GSYNC_SUM, 0, &req);
    gsync_wait(req, -1);  // killed here
    return 0;
  });
  auto res = run_ranks(1, [&](int) {
    gsync_comm_t* comm = nullptr;
    RANK_CHECK(connect_rank(d.socket(), job, 2, 0, &comm, 16 << 20) == 0, "{}", gsync_last_error());
    void* buf = nullptr;
    RANK_CHECK(gsync_alloc(comm, 1 << 20, &buf) == 0, "alloc");
    gsync_request_t* req = nullptr;
    RANK_CHECK(gsync_allreduce(comm, 1, uint64_t(round), buf, 1 << 18, GSYNC_FLOAT32, GSYNC_SUM, 0,
                               &req) == 0,
               "{}", gsync_last_error());
    RANK_CHECK(wait_until([&] { return submitted(d.admin_socket(), job, 1) >= 1; }),
               "the victim never submitted");
    kill(victim, SIGKILL);
    int rc = gsync_wait(req, 20000);
    RANK_CHECK(rc == GSYNC_ERR_RANK_DEAD, "round {}: got {} ({})", round, rc, gsync_request_error(req));
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  int st = 0;
  waitpid(victim, &st, 0);
  *why = res[0].output;
  return res[0].code == 0 && WIFSIGNALED(st);
}

TEST(Soak, EightJobsAndKilledClientsLeaveNothingBehind) {
  DaemonProcess d({}, "", "info");
  // A first job brings up what stays for the daemon's life (threads, pools).
  auto warm = run_ranks(2, [&](int r) {
    return steady_rank(d.socket(), "warm-up", r, Clock::now() + std::chrono::milliseconds(200));
  });
  for (auto& r : warm) ASSERT_EQ(r.code, 0) << r.output;
  auto idle = [&] {
    nlohmann::json s = admin_json(d.admin_socket(), "status");
    return s.is_object() && s["clients"] == 0 && s["jobs"] == 0;
  };
  ASSERT_TRUE(wait_until(idle)) << "the warm-up job did not close";
  int fds0 = open_fds(d.pid());
  long rss0 = rss_kib(d.pid());
  auto until = Clock::now() + std::chrono::seconds(soak_seconds());

  pid_t steady = spawn([&] {
    auto res = run_ranks(16, [&](int r) {
      return steady_rank(d.socket(), "steady-" + std::to_string(r / 2), r % 2, until);
    }, soak_seconds() + 120);
    int bad = 0;
    for (auto& x : res)
      if (x.code) {
        report(x.output);
        bad++;
      }
    return bad;
  });
  int rounds = 0;
  std::string why;
  while (Clock::now() < until) {
    ASSERT_TRUE(victim_round(d, rounds, &why)) << "round " << rounds << ": " << why;
    rounds++;
  }
  int st = 0;
  ASSERT_EQ(waitpid(steady, &st, 0), steady);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "steady jobs failed: status " << st;
  EXPECT_GE(rounds, 3) << "too few kill rounds to mean anything";
  EXPECT_TRUE(d.alive());

  // Everything gone from the daemon's view, then from its fd table and
  // (within a margin: freed memory need not go back to the kernel at once)
  // its resident set.
  ASSERT_TRUE(wait_until(idle)) << admin_query(d.admin_socket(), "status");
  int fds = 0;
  EXPECT_TRUE(wait_until([&] { return (fds = open_fds(d.pid())) == fds0; }))
      << fds << " fds open, " << fds0 << " before the soak";
  long rss = rss_kib(d.pid());
  int64_t completed = admin_json(d.admin_socket(), "status")["ops"].value("completed", int64_t{0});
  EXPECT_GE(completed, 8 * 2 * 10) << "the steady jobs hardly ran";
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's allocator keeps what is freed (its quarantine, its
  // caches), so the resident set says nothing here. LeakSanitizer says
  // more: at the daemon's exit it reports every block still allocated and
  // unreachable, and exits non-zero (the lane fails on its report too).
  EXPECT_EQ(d.stop(), 0) << "the daemon's exit under LeakSanitizer\n" << d.log();
#else
  EXPECT_LE(rss, rss0 + 32 * 1024) << "RSS " << rss << " KiB after, " << rss0 << " before";
#endif
  std::printf("soak: %d s, %lld ops completed, %d kill rounds, fds %d -> %d, RSS %ld -> %ld KiB\n",
              soak_seconds(), static_cast<long long>(completed), rounds, fds0, fds, rss0, rss);
}

}  // namespace
}  // namespace gsync::test
