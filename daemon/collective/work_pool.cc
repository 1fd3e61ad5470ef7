// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/work_pool.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace gsync {

WorkPool::WorkPool(unsigned threads) : done_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (threads == 0) threads = 1;
  for (unsigned i = 0; i < threads; i++) workers_.emplace_back([this] { worker(); });
}

WorkPool::~WorkPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  if (done_fd_ >= 0) close(done_fd_);
}

uint64_t WorkPool::submit(size_t total, size_t grain, RangeFn fn) {
  auto task = std::make_shared<Task>();
  grain = std::max<size_t>(grain, 1);
  task->total = total;
  task->grain = grain;
  task->pieces = std::max<size_t>((total + grain - 1) / grain, 1);
  task->fn = std::move(fn);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = task->id = next_id_++;
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
  return id;
}

std::vector<uint64_t> WorkPool::take_finished() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(done_fd_, &v, sizeof v);
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(finished_, {});
}

void WorkPool::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::shared_ptr<Task> task;
    for (auto& t : queue_)
      if (t->next < t->pieces) {
        task = t;
        break;
      }
    if (!task) {
      if (stopping_) return;
      cv_.wait(lock);
      continue;
    }
    size_t piece = task->next++;
    lock.unlock();
    size_t begin = piece * task->grain;
    size_t end = std::min(task->total, begin + task->grain);
    if (begin < end || task->total == 0) task->fn(begin, end);
    lock.lock();
    if (++task->done == task->pieces) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), task));
      finished_.push_back(task->id);
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(done_fd_, &one, sizeof one);
    }
  }
}

}  // namespace gsync
