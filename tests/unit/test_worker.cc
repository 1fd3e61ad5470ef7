// SPDX-License-Identifier: Apache-2.0
//
// Worker (daemon/core/worker.h): what imports and releases a client's
// device memory, or writes a checkpoint, runs off the calling thread, in
// order; a result comes back to the thread that waits on done_fd(), in
// order; everything queued has run by the time the worker is gone. No GPU
// needed: the closures are plain code.
#include <gtest/gtest.h>

#include <poll.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "daemon/core/worker.h"

namespace gsync {
namespace {

TEST(Worker, RunsInOrderOffTheCallingThread) {
  Worker r("test-worker");
  std::vector<int> order;
  std::thread::id ran_on;
  for (int i = 0; i < 100; i++)
    r.later([&order, &ran_on, i] {
      order.push_back(i);
      ran_on = std::this_thread::get_id();
    });
  r.drain();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; i++) EXPECT_EQ(order[size_t(i)], i);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(Worker, EverythingQueuedRunsBeforeItIsGone) {
  std::atomic<int> ran{0};
  {
    Worker r("test-worker");
    // The first blocks until the rest are queued: the destructor finds a
    // backlog, and must run it before it joins.
    std::atomic<bool> go{false};
    r.later([&] {
      while (!go.load()) std::this_thread::yield();
      ran++;
    });
    for (int i = 0; i < 50; i++) r.later([&] { ran++; });
    go = true;
  }
  EXPECT_EQ(ran.load(), 51);
}

// Waits (with a deadline) until done_fd() is readable.
bool done_ready(const Worker& w) {
  pollfd p{w.done_fd(), POLLIN, 0};
  return poll(&p, 1, 10000) == 1;
}

TEST(Worker, ThenHandsEachResultBackInOrderToTheThreadThatAsks) {
  Worker w("test-worker");
  ASSERT_GE(w.done_fd(), 0);
  std::vector<std::thread::id> worked_on;
  std::vector<int> done;
  std::thread::id me = std::this_thread::get_id();
  std::vector<std::thread::id> done_on;
  for (int i = 0; i < 20; i++)
    w.then([&worked_on] { worked_on.push_back(std::this_thread::get_id()); },
           [&done, &done_on, i] {
             done.push_back(i);
             done_on.push_back(std::this_thread::get_id());
           });
  // Nothing comes back until asked for; then all of it, in order.
  while (done.size() < 20) {
    ASSERT_TRUE(done_ready(w)) << "no result within 10 s";
    w.run_done();
  }
  for (int i = 0; i < 20; i++) EXPECT_EQ(done[size_t(i)], i);
  for (auto id : done_on) EXPECT_EQ(id, me);
  w.drain();
  ASSERT_EQ(worked_on.size(), 20u);
  for (auto id : worked_on) EXPECT_NE(id, me);
  // Drained and picked up (a signal that came after the last pick-up's
  // read finds nothing): the fd is quiet again.
  w.run_done();
  EXPECT_EQ(done.size(), 20u);
  pollfd p{w.done_fd(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
}

TEST(Worker, AResultComesBackEvenWhenTheWorkThrows) {
  Worker w("test-worker");
  bool answered = false;
  w.then([] { throw std::runtime_error("a driver wrapper's bug"); },
         [&answered] { answered = true; });
  ASSERT_TRUE(done_ready(w));
  w.run_done();
  EXPECT_TRUE(answered);
}

// A result the event thread never picked up (the daemon stopping) holds
// what releases device memory through the worker when it goes: it runs,
// inline, rather than on a thread started in the destructor.
TEST(Worker, WhatAResultNeverPickedUpReleasesRunsWhenTheWorkerGoes) {
  std::atomic<int> released{0};
  {
    Worker w("test-worker");
    struct Holder {
      Worker* w;
      std::atomic<int>* released;
      ~Holder() {
        w->later([r = released] { (*r)++; });
      }
    };
    std::shared_ptr<Holder> held(new Holder{&w, &released});
    w.then([] {}, [held] {});
    held.reset();
    w.drain();
    EXPECT_EQ(released.load(), 0);  // still held by the waiting result
  }
  EXPECT_EQ(released.load(), 1);
}

TEST(Worker, AResultThatThrowsLeavesTheRestSignalled) {
  Worker w("test-worker");
  int ran = 0;
  w.then([] {}, [] { throw std::runtime_error("a bug in an answer"); });
  w.then([] {}, [&ran] { ran++; });
  w.drain();
  ASSERT_TRUE(done_ready(w));
  EXPECT_THROW(w.run_done(), std::runtime_error);
  ASSERT_TRUE(done_ready(w)) << "the second result was left without a signal";
  w.run_done();
  EXPECT_EQ(ran, 1);
}

// What a work held is gone by the time its answer runs: nothing of it is
// left alive on the worker's thread once the event thread sees the answer.
TEST(Worker, WhatTheWorkHeldIsGoneBeforeItsAnswerRuns) {
  Worker w("test-worker");
  for (int i = 0; i < 200; i++) {
    auto token = std::make_shared<int>(i);
    std::weak_ptr<int> seen = token;
    bool expired = false;
    w.then([token = std::move(token)] {}, [&expired, seen] { expired = seen.expired(); });
    ASSERT_TRUE(done_ready(w));
    w.run_done();
    ASSERT_TRUE(expired) << "round " << i << ": the work's capture was still alive";
  }
}

// A result never picked up may, as it goes with the worker, ask for more
// work (a release that answers): it runs, inline, work and answer both.
TEST(Worker, WhatAResultQueuesAsItGoesRunsInline) {
  int ran = 0;
  {
    Worker w("test-worker");
    struct Requeue {
      Worker* w;
      int* ran;
      ~Requeue() {
        w->then([r = ran] { (*r)++; }, [r = ran] { (*r)++; });
      }
    };
    std::shared_ptr<Requeue> held(new Requeue{&w, &ran});
    w.then([] {}, [held] {});
    held.reset();
    w.drain();
    EXPECT_EQ(ran, 0);
  }
  EXPECT_EQ(ran, 2) << "the work or its answer queued while the worker went never ran";
}

// A closure given to later() that throws (a bug) is logged; the thread
// goes on with the rest of the queue.
TEST(Worker, AThrowingCallLeavesTheThreadServing) {
  Worker w("test-worker");
  int ran = 0;
  w.later([] { throw std::runtime_error("a bug in a release"); });
  w.later([&ran] { ran++; });
  w.drain();
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace gsync
