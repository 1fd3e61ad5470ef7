// SPDX-License-Identifier: Apache-2.0
//
// The rank's spin rule (libclient/cpu_share.h) against real CPU affinities:
// a child process stands in for the daemon, pinned with sched_setaffinity,
// and the "rank" is a thread of this test pinned the same way.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "libclient/cpu_share.h"
#include "tools/common/procs.h"

namespace gsync::client {
namespace {

// A process confined to `cpus` until the test ends; killed and reaped by
// the destructor.
class Daemonish {
 public:
  explicit Daemonish(const std::vector<int>& cpus) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      char ok = tools::pin_to(cpus) ? 'y' : 'n';
      if (write(fds[1], &ok, 1) != 1) _exit(1);
      for (;;) pause();
    }
    close(fds[1]);
    char ok = 0;
    EXPECT_EQ(read(fds[0], &ok, 1), 1);
    EXPECT_EQ(ok, 'y');
    close(fds[0]);
  }
  ~Daemonish() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// The answer of a thread confined to `cpus` (threads have their own mask).
bool rank_shares(const std::vector<int>& cpus, pid_t daemon) {
  bool out = false;
  std::thread t([&] {
    EXPECT_TRUE(tools::pin_to(cpus));
    out = shares_one_cpu_with(daemon);
  });
  t.join();
  return out;
}

TEST(CpuShare, RankAndDaemonOnTheSameOneCpuShare) {
  auto cpus = tools::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  Daemonish d({cpus[0]});
  EXPECT_TRUE(rank_shares({cpus[0]}, d.pid()));
}

TEST(CpuShare, EitherSideWithAnotherCpuDoesNotShare) {
  auto cpus = tools::allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "SKIPPED: needs 2 CPUs, this process may use 1";
  Daemonish one({cpus[0]});
  EXPECT_FALSE(rank_shares({cpus[1]}, one.pid()));  // different cores
  EXPECT_FALSE(rank_shares({cpus[0], cpus[1]}, one.pid()));  // the rank may move
  Daemonish two({cpus[0], cpus[1]});
  EXPECT_FALSE(rank_shares({cpus[0]}, two.pid()));  // the daemon may move
}

TEST(CpuShare, AnUnreadableDaemonDoesNotShare) {
  auto cpus = tools::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_FALSE(rank_shares({cpus[0]}, 0));
  // A pid that was just reaped: nothing to read.
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  waitpid(gone, nullptr, 0);
  EXPECT_FALSE(rank_shares({cpus[0]}, gone));
}

}  // namespace
}  // namespace gsync::client
