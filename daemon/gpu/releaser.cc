// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/releaser.h"

#include <pthread.h>

namespace gsync::gpu {

Releaser::~Releaser() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Releaser::later(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(fn));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
}

void Releaser::drain() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_; });
}

void Releaser::run() {
  pthread_setname_np(pthread_self(), "gsync-release");
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything ran
    std::function<void()> fn = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    fn();  // a release: nothing in it throws (the driver's calls return codes)
    lock.lock();
    running_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace gsync::gpu
