// SPDX-License-Identifier: Apache-2.0
//
// A single-threaded epoll loop. All daemon state (sessions, jobs, ops) is
// owned by the thread running it, so that state needs no locks; worker
// threads hand results back through an eventfd watched here.
//
// The last line of defence (docs/errors.md, "Nothing from outside stops the
// daemon"): an exception that escapes a handler, a timer, a deferred task or
// a looker is caught here, logged naming the fd or timer, counted, and the
// loop goes on serving every other job. Parsers of outside bytes return a
// Status and never rely on this; it is there for the bug nobody found yet.
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "daemon/core/spare_cpu.h"

namespace gsync {

class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;
  using Clock = std::chrono::steady_clock;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Watch fd for events (EPOLLIN, ...). The handler may call remove() on any
  // fd, its own included; a removed fd's pending events are dropped.
  bool add(int fd, uint32_t events, Handler handler);
  bool modify(int fd, uint32_t events);
  void remove(int fd);

  // Run fn every period on the loop thread (timeouts, watchdog). name says
  // which timer it is when fn throws.
  void every(std::chrono::milliseconds period, std::function<void()> fn,
             const char* name = "timer");
  // Run fn once at the start of the next iteration (deferred work).
  void defer(std::function<void()> fn);

  // After an event, keep looking for the next one without sleeping for this
  // long, yielding the core between looks (0: always sleep in epoll_wait).
  // only_when_spare: and only while a CPU is spare (spare_cpu.h), so that
  // the looks never take a core from a computing rank.
  void set_poll(std::chrono::microseconds window, bool only_when_spare = false) {
    poll_ = window;
    spare_ = only_when_spare ? std::make_unique<SpareCpu>() : nullptr;
  }
  // What the polling test last found (null: polling does not depend on it).
  const SpareCpu* spare_cpu() const { return spare_.get(); }
  // Polling windows begun, and those skipped for want of a spare CPU.
  uint64_t poll_windows() const { return windows_; }
  uint64_t poll_windows_skipped() const { return windows_skipped_; }

  // Work announced in memory rather than on an fd (the clients' submission
  // rings, the network's completion ring). While the loop polls it calls
  // every look() every time round; look() handles what it finds and says
  // whether it found anything. announce(on) tells the producers whether the
  // loop is looking (they skip their doorbell fd while it is); after
  // announce(false) the loop looks once more before it sleeps, so a
  // producer that saw "looking" just before is not missed. announce() must
  // end with a seq_cst fence.
  void add_looker(std::function<bool()> look, std::function<void(bool)> announce) {
    lookers_.push_back(Looker{std::move(look), std::move(announce)});
  }

  void run();   // until stop()
  void stop();  // safe from the loop thread (signals arrive by signalfd)

  // Exceptions caught from handlers, timers, deferred tasks and lookers.
  uint64_t exceptions_caught() const { return exceptions_; }

 private:
  struct Timer {
    std::chrono::milliseconds period;
    Clock::time_point next;
    std::function<void()> fn;
    const char* name;
  };
  void run_deferred();
  int next_timeout_ms(Clock::time_point now) const;
  bool look_all(bool polling);
  bool window_open(Clock::time_point now);
  void dispatch(const epoll_event* events, int n);
  void run_timers();
  // Runs fn; an exception it throws is logged as coming from `what` and
  // counted, never passed on.
  template <typename Fn>
  void guarded(Fn&& fn, const char* what, int64_t id);
  int epfd_ = -1;
  bool running_ = false;
  uint64_t generation_ = 0;
  struct Entry {
    Handler handler;
    uint64_t generation;
  };
  std::unordered_map<int, Entry> handlers_;
  std::vector<Timer> timers_;
  std::vector<std::function<void()>> deferred_;
  std::chrono::microseconds poll_{0};
  std::unique_ptr<SpareCpu> spare_;
  uint64_t windows_ = 0, windows_skipped_ = 0;
  bool in_window_ = false;
  Clock::time_point last_event_;
  struct Looker {
    std::function<bool()> look;
    std::function<void(bool)> announce;
  };
  std::vector<Looker> lookers_;
  bool announced_ = false;
  unsigned looks_ = 0;  // polling rounds, counted to ask the fds every few
  uint64_t exceptions_ = 0;
};

}  // namespace gsync
