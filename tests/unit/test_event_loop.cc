// SPDX-License-Identifier: Apache-2.0
//
// The daemon's event loop with its polling window: events are delivered
// while it polls and after it went to sleep, timers still run, and an idle
// loop really sleeps once the window after its last event is over (its
// thread's CPU time stays near zero), so a quiet daemon costs nothing.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
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

struct Fixture {
  EventLoop loop;
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::atomic<int> seen{0};
  std::atomic<int> ticks{0};
  std::thread thread;
  clockid_t clock{};

  explicit Fixture(std::chrono::microseconds poll) {
    loop.set_poll(poll);
    loop.add(efd, EPOLLIN, [this](uint32_t) {
      uint64_t v;
      if (read(efd, &v, sizeof v) == sizeof v) seen += static_cast<int>(v);
    });
    loop.every(5ms, [this] { ticks++; });
    std::atomic<bool> started{false};
    thread = std::thread([this, &started] {
      pthread_getcpuclockid(pthread_self(), &clock);
      started = true;
      loop.run();
    });
    while (!started) std::this_thread::yield();
  }
  ~Fixture() {
    loop.defer([] {});
    uint64_t one = 1;
    loop.stop();  // the loop thread checks running_ after its next wake
    [[maybe_unused]] ssize_t n = write(efd, &one, sizeof one);
    thread.join();
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

}  // namespace
}  // namespace gsync
