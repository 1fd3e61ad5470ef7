// SPDX-License-Identifier: Apache-2.0
//
// The daemon's event loop with its polling window: events are delivered
// while it polls and after it went to sleep, timers still run, and an idle
// loop really sleeps once the window after its last event is over (its
// thread's CPU time stays near zero), so a quiet daemon costs nothing.
// And work announced in memory (a looker) is never missed at the edge of
// the polling window, where the producer stops ringing or starts again.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

#include "daemon/core/event_loop.h"

namespace gsync {
namespace {

using namespace std::chrono_literals;

double thread_cpu_ms(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Runs a loop on its own thread and stops it from there (stop() belongs to
// the loop's thread, as in the daemon, where a signalfd handler calls it)
// through an eventfd of its own; joins however the test ends, a failed
// ASSERT included. clock() is the loop thread's CPU-time clock.
class LoopThread {
 public:
  explicit LoopThread(EventLoop& loop)
      : loop_(loop), stop_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    loop_.add(stop_fd_, EPOLLIN, [this](uint32_t) { loop_.stop(); });
    std::atomic<bool> started{false};
    thread_ = std::thread([this, &started] {
      pthread_getcpuclockid(pthread_self(), &clock_);
      started = true;
      loop_.run();
    });
    while (!started) std::this_thread::yield();
  }
  ~LoopThread() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
    thread_.join();
    close(stop_fd_);
  }
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;
  clockid_t clock() const { return clock_; }

 private:
  EventLoop& loop_;
  int stop_fd_;
  clockid_t clock_{};
  std::thread thread_;
};

struct Fixture {
  EventLoop loop;
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::atomic<int> seen{0};
  std::atomic<int> ticks{0};
  std::unique_ptr<LoopThread> running;
  clockid_t clock{};

  explicit Fixture(std::chrono::microseconds poll, bool only_when_spare = false) {
    loop.set_poll(poll, only_when_spare);
    loop.add(efd, EPOLLIN, [this](uint32_t) {
      uint64_t v;
      if (read(efd, &v, sizeof v) == sizeof v) seen += static_cast<int>(v);
    });
    loop.every(5ms, [this] { ticks++; });
    running = std::make_unique<LoopThread>(loop);
    clock = running->clock();
  }
  ~Fixture() {
    running.reset();
    close(efd);
  }
  void ring() {
    uint64_t one = 1;
    ASSERT_EQ(write(efd, &one, sizeof one), ssize_t(sizeof one));
  }
  bool wait_seen(int n) {
    for (int i = 0; i < 2000 && seen < n; i++) std::this_thread::sleep_for(1ms);
    return seen >= n;
  }
};

TEST(EventLoop, PollingDeliversEventsAndTimersThenSleeps) {
  Fixture f(200us);
  f.ring();
  ASSERT_TRUE(f.wait_seen(1));
  // Inside and after the window: both kinds of wait deliver.
  f.ring();
  ASSERT_TRUE(f.wait_seen(2));
  std::this_thread::sleep_for(20ms);
  f.ring();
  ASSERT_TRUE(f.wait_seen(3));
  // Quiet for 300 ms (timers every 5 ms, each opening a 200 us window): a
  // loop that kept polling would burn most of those 300 ms of CPU.
  std::this_thread::sleep_for(20ms);
  double before = thread_cpu_ms(f.clock);
  int ticks_before = f.ticks;
  std::this_thread::sleep_for(300ms);
  double used = thread_cpu_ms(f.clock) - before;
  EXPECT_GE(f.ticks - ticks_before, 20) << "timers did not run while the loop was idle";
  EXPECT_LT(used, 30.0) << "the idle loop used " << used << " ms of CPU in 300 ms";
}

TEST(EventLoop, NoPollingSleepsAtOnce) {
  Fixture f(0us);
  f.ring();
  ASSERT_TRUE(f.wait_seen(1));
  double before = thread_cpu_ms(f.clock);
  std::this_thread::sleep_for(200ms);
  EXPECT_LT(thread_cpu_ms(f.clock) - before, 30.0);
}

TEST(SpareCpu, TheRule) {
  EXPECT_TRUE(SpareCpu::spare_given(0.0, 1));
  EXPECT_TRUE(SpareCpu::spare_given(0.4, 1));
  EXPECT_FALSE(SpareCpu::spare_given(0.6, 1));
  EXPECT_TRUE(SpareCpu::spare_given(1.4, 2));
  EXPECT_FALSE(SpareCpu::spare_given(2.0, 2));
  EXPECT_FALSE(SpareCpu::spare_given(9.0, 8));
}

// More spinning threads than CPUs: /proc/loadavg shows them runnable, the
// check finds no spare CPU, and a loop in mode auto sleeps instead of
// polling after its events (each skipped window is counted).
TEST(EventLoop, PollingWaitsForASpareCpu) {
  SpareCpu probe;
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < probe.cpus() + 2; i++)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  bool busy = false;
  auto until = SpareCpu::Clock::now() + 5s;
  while (!busy && SpareCpu::Clock::now() < until) {
    busy = !probe.spare(SpareCpu::Clock::now());
    std::this_thread::sleep_for(1ms);
  }
  uint64_t polled = 0, skipped = 0;
  if (busy) {
    Fixture f(200us, true);
    for (int i = 1; i <= 60; i++) {
      f.ring();
      ASSERT_TRUE(f.wait_seen(i));
      std::this_thread::sleep_for(1ms);
    }
    f.running.reset();  // the loop thread joined: its counters are ours to read
    polled = f.loop.poll_windows();
    skipped = f.loop.poll_windows_skipped();
  }
  stop = true;
  for (auto& t : spinners) t.join();
  ASSERT_TRUE(busy) << "no spare CPU never seen: " << probe.runnable() << " runnable on "
                    << probe.cpus() << " CPUs";
  // Not a count of the 60 rings: on a loaded machine several rings fall in
  // one window, and the first windows poll while the smoothed sample
  // climbs. What must hold is that most windows were skipped.
  EXPECT_GE(skipped, 10u) << polled << " windows polled, " << skipped << " skipped";
  EXPECT_GT(skipped, 2 * polled) << polled << " windows polled, " << skipped << " skipped";
}

// The producer side of a looker, as libgsync does it for a submission:
// publish, fence, ring only when the loop is not looking. The loop has no
// timer, so a wakeup lost at the window's edge would leave the work there
// for good instead of for one timer period.
TEST(EventLoop, LookerMissesNothingAtTheEdgeOfTheWindow) {
  EventLoop loop;
  loop.set_poll(100us);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::atomic<uint32_t> published{0}, taken{0}, looking{0};
  auto take = [&] {
    uint32_t p = published.load(std::memory_order_acquire);
    if (p == taken.load(std::memory_order_relaxed)) return false;
    taken.store(p, std::memory_order_release);
    return true;
  };
  loop.add(efd, EPOLLIN, [&](uint32_t) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = read(efd, &v, sizeof v);
    take();
  });
  loop.add_looker(take, [&](bool on) {
    looking.store(on ? 1 : 0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  });
  std::unique_ptr<LoopThread> running = std::make_unique<LoopThread>(loop);

  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pause_us(0, 250);  // around the 100 us window
  int rung = 0, skipped = 0;
  constexpr uint32_t kItems = 3000;
  for (uint32_t i = 1; i <= kItems; i++) {
    published.store(i, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (looking.load(std::memory_order_relaxed) == 0) {
      uint64_t one = 1;
      ASSERT_EQ(write(efd, &one, sizeof one), ssize_t(sizeof one));
      rung++;
    } else {
      skipped++;
    }
    auto deadline = std::chrono::steady_clock::now() + 2s;
    while (taken.load(std::memory_order_acquire) < i) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "item " << i << " was never taken (" << rung << " rung, " << skipped
          << " skipped so far): a wakeup was lost";
      std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
  }
  // Both paths ran: the doorbell while the loop slept, the look while it polled.
  EXPECT_GT(rung, 0);
  EXPECT_GT(skipped, 0);
  running.reset();
  close(efd);
}

// Several lookers (the clients' rings, the network's completion ring) are
// each looked at every round, and while the loop polls through them the
// fds, which it asks only every few rounds, are still served: each fd event
// is handled while the loop still says it is polling. (A loop that never
// asked its fds while polling would serve the event only after its window
// ran out and it announced it was going to sleep.)
TEST(EventLoop, EveryLookerAndTheFdsAreServedWhilePolling) {
  EventLoop loop;
  loop.set_poll(200ms);  // outlasts every pause of the test: the loop polls throughout
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::atomic<uint32_t> published[2]{}, taken[2]{};
  std::atomic<int> fd_seen{0}, fd_seen_polling{0}, looking{0};
  for (int k = 0; k < 2; k++) {
    loop.add_looker(
        [&, k] {
          uint32_t p = published[k].load(std::memory_order_acquire);
          if (p == taken[k].load(std::memory_order_relaxed)) return false;
          taken[k].store(p, std::memory_order_release);
          return true;
        },
        [&](bool on) {
          looking.store(on ? 1 : 0);
          std::atomic_thread_fence(std::memory_order_seq_cst);
        });
  }
  loop.add(efd, EPOLLIN, [&](uint32_t) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = read(efd, &v, sizeof v);
    if (looking.load() == 1) fd_seen_polling.fetch_add(1);
    fd_seen.fetch_add(1);
  });
  std::unique_ptr<LoopThread> running = std::make_unique<LoopThread>(loop);

  auto wait_for = [](const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + 2s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  };
  // The first fd event starts the polling window (the loop slept until it).
  uint64_t one = 1;
  ASSERT_EQ(write(efd, &one, sizeof one), ssize_t(sizeof one));
  ASSERT_TRUE(wait_for([&] { return fd_seen.load() == 1; }));
  constexpr int kFdEvents = 10;
  for (uint32_t i = 1; i <= 20 * kFdEvents; i++) {
    int k = static_cast<int>(i % 2);
    published[k].store(i, std::memory_order_release);
    ASSERT_TRUE(wait_for([&] { return taken[k].load() == i; })) << "looker " << k << " item " << i;
    if (i % 20 == 0) {
      ASSERT_EQ(write(efd, &one, sizeof one), ssize_t(sizeof one));
      int want = 1 + static_cast<int>(i / 20);
      ASSERT_TRUE(wait_for([&] { return fd_seen.load() == want; })) << "fd event " << want;
    }
  }
  EXPECT_EQ(fd_seen_polling.load(), kFdEvents)
      << "fd events were served only once the loop stopped polling";
  running.reset();
  close(efd);
}

// The last line of defence: a handler, a timer or a deferred task that
// throws is logged and counted, and the loop goes on serving: the same fd
// again, another fd, the other timers. (Without the catch the exception
// leaves run() and the test's loop thread calls std::terminate.)
TEST(EventLoop, AnExceptionFromAHandlerIsCaughtAndTheLoopGoesOn) {
  EventLoop loop;
  int bad = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), good = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::atomic<int> bad_calls{0}, good_seen{0}, timer_calls{0}, deferred_ran{0};
  loop.add(bad, EPOLLIN, [&](uint32_t) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = read(bad, &v, sizeof v);
    bad_calls++;
    // What nlohmann::json's dump() did with invalid UTF-8 in an admin reply.
    throw std::runtime_error("[json.exception.type_error.316] invalid UTF-8 byte");
  });
  loop.add(good, EPOLLIN, [&](uint32_t) {
    uint64_t v;
    if (read(good, &v, sizeof v) == sizeof v) good_seen += static_cast<int>(v);
    // A deferred task that throws something that is not a std::exception.
    loop.defer([] { throw 42; });
    loop.defer([&] { deferred_ran++; });
  });
  loop.every(2ms, [&] {
    timer_calls++;
    throw std::logic_error("timer");
  }, "test timer");
  auto running = std::make_unique<LoopThread>(loop);
  auto wait_for = [](const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    return done();
  };
  uint64_t one = 1;
  for (int i = 1; i <= 3; i++) {
    ASSERT_EQ(write(bad, &one, sizeof one), ssize_t(sizeof one));
    ASSERT_TRUE(wait_for([&] { return bad_calls == i; })) << "the throwing fd was not served again";
    ASSERT_EQ(write(good, &one, sizeof one), ssize_t(sizeof one));
    ASSERT_TRUE(wait_for([&] { return good_seen == i && deferred_ran == i; }))
        << "another fd or a deferred task was not served after an exception";
  }
  ASSERT_TRUE(wait_for([&] { return timer_calls >= 3; })) << "a throwing timer stopped firing";
  running.reset();
  // 3 from the fd, 3 deferred, at least 3 from the timer.
  EXPECT_GE(loop.exceptions_caught(), 9u);
  close(bad);
  close(good);
}

}  // namespace
}  // namespace gsync
