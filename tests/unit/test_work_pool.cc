// SPDX-License-Identifier: Apache-2.0
//
// The daemon's work pool: every element of a task runs exactly once, and a
// task asked for progress reports only prefixes that are really finished,
// growing by at least the step, never the whole range (the finished task
// says that) - what lets the cross-host step start on the front of a fold.
// And the workers run kWorkerNice levels below the thread that made the pool.
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/pipeline/work_pool.h"

namespace gsync {
namespace {

// Runs a task with progress reports on a pool of `threads`; returns how
// many reports came. Every report is a finished prefix, kStep or more past
// the last one.
size_t progress_reports(unsigned threads) {
  WorkPool pool(threads);
  constexpr size_t kTotal = 100000, kGrain = 1000, kStep = 10000;
  auto ran = std::make_shared<std::vector<std::atomic<int>>>(kTotal);
  uint64_t id = pool.submit(kTotal, kGrain, [ran](size_t b, size_t e) {
    for (size_t i = b; i < e; i++) (*ran)[i]++;
    std::this_thread::sleep_for(std::chrono::microseconds(50 * (b / kGrain % 3)));
  }, kStep);
  int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  epoll_ctl(ep, EPOLL_CTL_ADD, pool.done_fd(), &ev);
  size_t last = 0, reports = 0;
  bool finished = false;
  while (!finished) {
    if (epoll_wait(ep, &ev, 1, 10000) != 1) {
      ADD_FAILURE() << "no event in 10 s";
      break;
    }
    std::vector<WorkPool::Progress> progress;
    std::vector<uint64_t> done;
    pool.take_events(&progress, &done);
    for (const auto& p : progress) {
      EXPECT_EQ(p.task, id);
      EXPECT_GE(p.done, last + kStep);
      EXPECT_LT(p.done, kTotal);
      for (size_t i = 0; i < p.done; i++) EXPECT_EQ((*ran)[i].load(), 1) << "element " << i;
      last = p.done;
      reports++;
    }
    for (uint64_t d : done) finished |= d == id;
  }
  close(ep);
  for (size_t i = 0; i < kTotal; i++) EXPECT_EQ((*ran)[i].load(), 1) << "element " << i;
  return reports;
}

// Two workers finish pieces out of order: only the finished prefix is
// reported. How many reports come depends on the scheduler (a worker held
// off the CPU merges the steps the other finished behind it into one), so
// only their properties are checked.
TEST(WorkPool, ProgressReportsOnlyFinishedPrefixes) { progress_reports(2); }

// One worker finishes pieces in order: a report at every step boundary
// short of the end, exactly.
TEST(WorkPool, ProgressIsReportedAtEveryStep) { EXPECT_EQ(progress_reports(1), 9u); }

TEST(WorkPool, WorkersRunBelowTheLoopsPriority) {
  errno = 0;
  int mine = getpriority(PRIO_PROCESS, 0);
  ASSERT_EQ(errno, 0);
  WorkPool pool(2);
  auto seen = std::make_shared<std::vector<int>>();
  auto mu = std::make_shared<std::mutex>();
  // Pieces slow enough that both workers take some.
  uint64_t id = pool.submit(8, 1, [seen, mu](size_t, size_t) {
    int nice = getpriority(PRIO_PROCESS, 0);
    std::lock_guard<std::mutex> lock(*mu);
    seen->push_back(nice);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  std::vector<WorkPool::Progress> progress;
  std::vector<uint64_t> done;
  for (int i = 0; i < 5000 && std::find(done.begin(), done.end(), id) == done.end(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<uint64_t> more;
    pool.take_events(&progress, &more);
    done.insert(done.end(), more.begin(), more.end());
  }
  ASSERT_EQ(seen->size(), 8u);
  for (int n : *seen) EXPECT_EQ(n, std::min(mine + kWorkerNice, 19));
  // The thread that made the pool keeps its own.
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), mine);
}

TEST(WorkPool, NoProgressUnlessAsked) {
  WorkPool pool(2);
  uint64_t id = pool.submit(50000, 100, [](size_t, size_t) {});
  std::vector<WorkPool::Progress> progress;
  std::vector<uint64_t> done;
  for (int i = 0; i < 10000 && done.empty(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<WorkPool::Progress> p;
    pool.take_events(&p, &done);
    progress.insert(progress.end(), p.begin(), p.end());
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0], id);
  EXPECT_TRUE(progress.empty());
}

}  // namespace
}  // namespace gsync
