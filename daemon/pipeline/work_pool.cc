// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/work_pool.h"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

uint64_t WorkPool::submit(size_t total, size_t grain, RangeFn fn, size_t progress_step,
                          uint64_t tag) {
  auto task = std::make_shared<Task>();
  task->tag = tag;
  grain = std::max<size_t>(grain, 1);
  task->total = total;
  task->grain = grain;
  task->pieces = std::max<size_t>((total + grain - 1) / grain, 1);
  task->fn = std::move(fn);
  task->step = progress_step;
  if (progress_step) task->piece_done.assign(task->pieces, false);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = task->id = next_id_++;
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
  return id;
}

void WorkPool::take_events(std::vector<Progress>* progress, std::vector<Finished>* finished) {
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(done_fd_, &v, sizeof v);
  progress->clear();
  finished->clear();
  std::lock_guard<std::mutex> lock(mu_);
  progress->swap(progress_);
  finished->swap(finished_);
}

void WorkPool::take_events(std::vector<Progress>* progress, std::vector<uint64_t>* finished) {
  std::vector<Finished> done;
  take_events(progress, &done);
  finished->clear();
  for (const auto& f : done) finished->push_back(f.task);
}

void WorkPool::worker() {
  // Linux keeps niceness per thread: this lowers only the worker. Raising
  // niceness needs no privilege, so a failure (none known) is ignored.
  errno = 0;
  int base = getpriority(PRIO_PROCESS, 0);  // what the creating thread had
  if (errno == 0)
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), std::min(base + kWorkerNice, 19));
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
    if (task->step) {
      // Workers take pieces in order but finish them in any order: only the
      // finished prefix counts.
      task->piece_done[piece] = true;
      while (task->prefix < task->pieces && task->piece_done[task->prefix]) task->prefix++;
      size_t done = std::min(task->total, task->prefix * task->grain);
      if (done < task->total && done >= task->reported + task->step) {
        task->reported = done;
        progress_.push_back({task->id, done, task->tag});
        uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(done_fd_, &one, sizeof one);
      }
    }
    if (++task->done == task->pieces) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), task));
      finished_.push_back({task->id, task->tag});
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(done_fd_, &one, sizeof one);
    }
  }
}

}  // namespace gsync
