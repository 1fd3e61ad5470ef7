// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/event_loop.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace gsync {

namespace {
// While polling with lookers, the fds are asked every this many rounds.
constexpr unsigned kFdEvery = 4;
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

void EventLoop::every(std::chrono::milliseconds period, std::function<void()> fn) {
  timers_.push_back(Timer{period, Clock::now() + period, std::move(fn)});
}

void EventLoop::defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }

void EventLoop::stop() { running_ = false; }

void EventLoop::run() {
  running_ = true;
  epoll_event events[64];
  while (running_) {
    while (!deferred_.empty()) {
      auto batch = std::move(deferred_);
      deferred_.clear();
      for (auto& fn : batch) fn();
    }
    int timeout_ms = -1;
    auto now = Clock::now();
    for (auto& t : timers_) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(t.next - now).count();
      if (ms < 0) ms = 0;
      if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(ms);
    }
    // Polling for a short window after each event: a small op's next
    // message (a peer's part, the rank's next submission) usually comes
    // within tens of microseconds, and sleeping costs a context switch and
    // a wakeup (an inter-processor interrupt, a VM exit on a guest) each
    // time. Every empty look yields the core, so on a host with more
    // daemons and ranks than cores the process that has work runs first;
    // a loop that polled without yielding held the core for its whole time
    // slice (measured: 4 KiB across 2 hosts went from 100 us to 300-500 us).
    bool polling = poll_.count() > 0 && now - last_event_ < poll_;
    bool found = false;
    if (!lookers_.empty()) {
      if (polling != announced_) {
        for (auto& l : lookers_) l.announce(polling);
        announced_ = polling;
      }
      // Polling: look every time round. About to sleep: one last look
      // after the producers were told, the other half of their check.
      for (auto& l : lookers_) found |= l.look();
      if (found) {
        last_event_ = Clock::now();
        timeout_ms = 0;
      }
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
    for (int i = 0; i < n; i++) {
      int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
      uint64_t gen = events[i].data.u64 >> 32;
      auto it = handlers_.find(fd);
      if (it == handlers_.end() || (it->second.generation & 0xffffffffu) != gen) continue;
      Handler h = it->second.handler;  // the handler may remove itself
      h(events[i].events);
    }
    now = Clock::now();
    for (auto& t : timers_) {
      if (now >= t.next) {
        t.next = now + t.period;
        t.fn();
      }
    }
  }
}

}  // namespace gsync
