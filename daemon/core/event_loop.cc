// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/event_loop.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include <spdlog/spdlog.h>

namespace gsync {

namespace {
// While polling with lookers, the fds are asked every this many rounds.
constexpr unsigned kFdEvery = 4;
// Exceptions caught from handlers that are logged each; after these, only
// every power of two.
constexpr uint64_t kLoggedExceptions = 16;
}  // namespace

EventLoop::EventLoop() : epfd_(epoll_create1(EPOLL_CLOEXEC)) {
  if (epfd_ < 0) spdlog::critical("epoll_create1: {}", strerror(errno));
}

EventLoop::~EventLoop() {
  if (epfd_ >= 0) close(epfd_);
}

bool EventLoop::add(int fd, uint32_t events, Handler handler) {
  // The generation in the event's data tells a stale event (for an fd that
  // was removed and reused within one epoll_wait batch) from a live one.
  uint64_t gen = ++generation_;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = (gen << 32) | static_cast<uint32_t>(fd);
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    spdlog::error("epoll_ctl(ADD, fd {}): {}", fd, strerror(errno));
    return false;
  }
  handlers_[fd] = Entry{std::move(handler), gen};
  return true;
}

bool EventLoop::modify(int fd, uint32_t events) {
  auto it = handlers_.find(fd);
  if (it == handlers_.end()) return false;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = (it->second.generation << 32) | static_cast<uint32_t>(fd);
  return epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void EventLoop::remove(int fd) {
  if (handlers_.erase(fd) > 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::every(std::chrono::milliseconds period, std::function<void()> fn,
                      const char* name) {
  timers_.push_back(Timer{period, Clock::now() + period, std::move(fn), name});
}

void EventLoop::defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }

void EventLoop::stop() { running_ = false; }

template <typename Fn>
void EventLoop::guarded(Fn&& fn, const char* what, int64_t id) {
  try {
    fn();
    return;
  } catch (const std::exception& e) {
    exceptions_++;
    // A handler that throws on every call (its fd stays readable) would
    // fill the log: the first few, then every power of two.
    if (exceptions_ <= kLoggedExceptions || (exceptions_ & (exceptions_ - 1)) == 0)
      spdlog::critical("event loop: the handler of {} {} threw ({}); the event is dropped and the "
                       "daemon goes on serving ({} caught so far)",
                       what, id, e.what(), exceptions_);
  } catch (...) {
    exceptions_++;
    if (exceptions_ <= kLoggedExceptions || (exceptions_ & (exceptions_ - 1)) == 0)
      spdlog::critical("event loop: the handler of {} {} threw something that is not a "
                       "std::exception; the event is dropped and the daemon goes on serving ({} "
                       "caught so far)",
                       what, id, exceptions_);
  }
}

void EventLoop::run_deferred() {
  while (!deferred_.empty()) {
    auto batch = std::move(deferred_);
    deferred_.clear();
    for (size_t i = 0; i < batch.size(); i++) guarded(batch[i], "deferred task", int64_t(i));
  }
}

int EventLoop::next_timeout_ms(Clock::time_point now) const {
  int timeout_ms = -1;
  for (const auto& t : timers_) {
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(t.next - now).count();
    if (ms < 0) ms = 0;
    if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(ms);
  }
  return timeout_ms;
}

// Tells the lookers whether the loop polls when that changed, then asks
// each. Polling: every time round. About to sleep: one last look after the
// producers were told, the other half of their check.
bool EventLoop::look_all(bool polling) {
  if (polling != announced_) {
    for (size_t i = 0; i < lookers_.size(); i++)
      guarded([&] { lookers_[i].announce(polling); }, "looker", int64_t(i));
    announced_ = polling;
  }
  bool found = false;
  for (size_t i = 0; i < lookers_.size(); i++)
    guarded([&] { found |= lookers_[i].look(); }, "looker", int64_t(i));
  return found;
}

void EventLoop::dispatch(const epoll_event* events, int n) {
  for (int i = 0; i < n; i++) {
    int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
    uint64_t gen = events[i].data.u64 >> 32;
    auto it = handlers_.find(fd);
    if (it == handlers_.end() || (it->second.generation & 0xffffffffu) != gen) continue;
    Handler h = it->second.handler;  // the handler may remove itself
    uint32_t ev = events[i].events;
    guarded([&] { h(ev); }, "fd", fd);
  }
}

void EventLoop::run_timers() {
  auto now = Clock::now();
  // By index: a timer may add another (every() from inside a timer).
  for (size_t i = 0; i < timers_.size(); i++) {
    if (now < timers_[i].next) continue;
    timers_[i].next = now + timers_[i].period;
    auto fn = timers_[i].fn;
    guarded(fn, timers_[i].name, int64_t(i));
  }
}

// Whether the loop polls now: inside the window after the last event, and
// (only_when_spare) with a CPU to spare. spare() samples every few
// milliseconds at most, so asking every round costs a clock compare.
bool EventLoop::window_open(Clock::time_point now) {
  if (poll_.count() == 0 || now - last_event_ >= poll_) {
    in_window_ = false;
    return false;
  }
  const bool polls = !spare_ || spare_->spare(now);
  if (!in_window_) {
    in_window_ = true;
    (polls ? windows_ : windows_skipped_)++;
  }
  return polls;
}

void EventLoop::run() {
  running_ = true;
  epoll_event events[64];
  while (running_) {
    run_deferred();
    auto now = Clock::now();
    int timeout_ms = next_timeout_ms(now);
    // Polling for a short window after each event: a small op's next
    // message (a peer's part, the rank's next submission) usually comes
    // within tens of microseconds, and sleeping costs a context switch and
    // a wakeup (an inter-processor interrupt, a VM exit on a guest) each
    // time. Every empty look yields the core, so on a host with more
    // daemons and ranks than cores the process that has work runs first;
    // a loop that polled without yielding held the core for its whole time
    // slice (measured: 4 KiB across 2 hosts went from 100 us to 300-500 us).
    bool polling = window_open(now);
    bool found = !lookers_.empty() && look_all(polling);
    if (found) {
      last_event_ = Clock::now();
      timeout_ms = 0;
    }
    // While polling, the lookers see the work of a small op (the next
    // submission, a peer's message) without a system call; the fds (new
    // clients, their requests, timers, the admin socket) are asked every
    // kFdEvery-th round only: one epoll_wait saved in most rounds.
    int n = 0;
    if (!polling || lookers_.empty() || ++looks_ % kFdEvery == 0) {
      n = epoll_wait(epfd_, events, 64, polling || found ? 0 : timeout_ms);
      if (n < 0 && errno != EINTR) {
        spdlog::critical("epoll_wait: {}", strerror(errno));
        return;
      }
    }
    if (n > 0) {
      last_event_ = Clock::now();
    } else if (polling && !found) {
      sched_yield();
    }
    dispatch(events, n);
    run_timers();
  }
}

}  // namespace gsync
