// SPDX-License-Identifier: Apache-2.0
//
// Worker threads that run large reductions and copies off the event thread.
// A task is a range [0, total) cut into grains; every worker takes grains of
// the oldest unfinished task, so one big tensor uses all cores. Finished
// task ids are handed back through an eventfd the event loop watches; the
// workers never touch daemon state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gsync {

// Folds and stores are bulk work with slack in a pipelined op; the event
// loop's work is what feeds the network and moves every schedule along.
// When both want a core the loop should have it, so the workers run this
// many nice levels below the thread that made the pool. Measured on the
// shaped test bed (docs/performance.md): the fold at the start of each op
// took the cores from the uplink's traffic for 0.2 s; with the workers at
// +10, 256 MiB went from 1.12-1.16x to 1.10x the uplink floor.
constexpr int kWorkerNice = 10;

class WorkPool {
 public:
  using RangeFn = std::function<void(size_t begin, size_t end)>;

  explicit WorkPool(unsigned threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Runs fn over [0, total) in pieces of at most grain. Returns the task id.
  // With progress_step, the task also reports how much of it is done from
  // the start on, each time that grew by progress_step (not at the end: the
  // finished task says that), so a later stage can start on the front of a
  // range while its back is still being worked on. tag comes back with
  // every event of the task: the caller's own name for it (the pipeline
  // puts the op's serial and stage there, so an event needs no lookup of
  // the task id).
  uint64_t submit(size_t total, size_t grain, RangeFn fn, size_t progress_step = 0,
                  uint64_t tag = 0);
  struct Progress {
    uint64_t task;
    size_t done;  // [0, done) of the task's range is finished; done < total
    uint64_t tag = 0;
  };
  struct Finished {
    uint64_t task;
    uint64_t tag;
  };
  // Readable when take_events() has something.
  int done_fd() const { return done_fd_; }
  // Progress reports (in order) and then the finished tasks.
  void take_events(std::vector<Progress>* progress, std::vector<Finished>* finished);
  void take_events(std::vector<Progress>* progress, std::vector<uint64_t>* finished);
  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }

 private:
  struct Task {
    uint64_t id, tag;
    size_t total, grain, pieces;
    size_t next = 0, done = 0;
    RangeFn fn;
    // Progress: pieces finished so far, the finished prefix, what was reported.
    size_t step = 0, prefix = 0, reported = 0;
    std::vector<bool> piece_done;
  };
  void worker();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::vector<Finished> finished_;
  std::vector<Progress> progress_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  int done_fd_ = -1;
  std::vector<std::thread> workers_;
};

}  // namespace gsync
