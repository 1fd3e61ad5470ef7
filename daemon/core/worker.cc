// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/worker.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <exception>

#include <spdlog/spdlog.h>

namespace gsync {

Worker::Worker(const char* name)
    : name_(name), done_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Worker::~Worker() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Results never picked up (the loop has stopped) go now: what they hold
  // (a session, an import) may release device memory, through later(),
  // which runs it inline from here on.
  // From here on then() runs inline too (no fd to signal). A result that
  // goes may queue more: taken until none is left.
  if (done_fd_ >= 0) close(done_fd_);
  done_fd_ = -1;
  for (;;) {
    std::deque<std::function<void()>> left;
    {
      std::lock_guard lock(done_mu_);
      left.swap(done_);
    }
    if (left.empty()) break;
    left.clear();
  }
}

void Worker::later(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(fn));
      if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
      cv_.notify_one();
      return;
    }
  }
  fn();  // stopping (its thread joined or about to be): nothing runs it later
}

void Worker::then(std::function<void()> work, std::function<void()> done) {
  if (done_fd_ < 0) {
    run_work(work);
    work = nullptr;
    done();
    return;
  }
  later([this, work = std::move(work), done = std::move(done)]() mutable {
    // done runs either way: it is what answers whoever waits.
    run_work(work);
    // What the work held goes here, before its answer is seen: the event
    // thread finds nothing of it still alive on this one.
    work = nullptr;
    {
      std::lock_guard lock(done_mu_);
      done_.push_back(std::move(done));
    }
    signal();
  });
}

void Worker::run_work(const std::function<void()>& work) const {
  try {
    work();
  } catch (const std::exception& e) {
    spdlog::error("{}: a call threw: {}", name_, e.what());
  } catch (...) {
    spdlog::error("{}: a call threw", name_);
  }
}

void Worker::run_done() {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = read(done_fd_, &count, sizeof count);
  for (;;) {
    std::function<void()> fn;
    {
      std::lock_guard lock(done_mu_);
      if (done_.empty()) return;
      fn = std::move(done_.front());
      done_.pop_front();
    }
    try {
      fn();
    } catch (...) {
      // The loop catches it; the results behind it must not wait for the
      // next import's signal.
      signal();
      throw;
    }
  }
}

void Worker::signal() {
  const uint64_t one = 1;
  // Cannot fail short of a counter at its maximum, which reads as readable.
  [[maybe_unused]] ssize_t n = write(done_fd_, &one, sizeof one);
}

void Worker::drain() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_; });
}

void Worker::run() {
  pthread_setname_np(pthread_self(), name_);
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything ran
    std::function<void()> fn = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    // A later() call that throws is a bug, but not one to end the daemon
    // over (then()'s catch their own, to answer anyway).
    run_work(fn);
    // What it held goes before the lock is taken: a release it held may
    // queue more (later() takes the lock).
    fn = nullptr;
    lock.lock();
    running_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace gsync
