// SPDX-License-Identifier: Apache-2.0
//
// A thread of its own for calls that may wait, so the event thread never
// does: the GPU's (importing and mapping a client's allocation - the first
// one on a GPU also makes the daemon's context there, hundreds of
// milliseconds -, pinning staging memory, unmapping when the last op over
// an allocation ends: cuMemUnmap may wait for the device) and the
// checkpoints' (hash, write, fsync). A queue of closures and the thread
// that runs them in order, started at the first one, and a queue of
// results the event thread picks up when done_fd() is readable. Destroyed
// after every holder of what it releases (gsyncd.h declares the GPU's
// before the event loop): it runs what is queued, joins, then destroys the
// results never picked up; what is queued after that runs inline.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace gsync {

class Worker {
 public:
  // name: the thread's, as top and gdb show it (15 characters at most).
  explicit Worker(const char* name);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs fn on the worker's thread, after everything queued before it
  // (inline once the worker is being destroyed).
  void later(std::function<void()> fn);
  // Runs work there, after everything queued before it, then done on the
  // thread that calls run_done() (the event thread), in the same order.
  // done runs even if work throws (logged); what work holds is gone before
  // done runs. Without an eventfd both run inline.
  void then(std::function<void()> work, std::function<void()> done);

  // Readable while a done is waiting (an eventfd; -1 if none could be
  // made: then nothing wakes the caller, and then() runs work inline).
  int done_fd() const { return done_fd_; }
  // Runs every waiting done, in order (event thread). What one throws goes
  // to the caller, and done_fd() stays readable for the rest.
  void run_done();

  // Returns once everything queued so far has run on the worker (tests).
  void drain();

 private:
  void run();
  void signal();
  // Runs a queued call or a then()'s work; what it throws is logged (a
  // then()'s done still runs and answers).
  void run_work(const std::function<void()>& work) const;
  const char* name_;
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;  // fn being run now
  bool stopping_ = false;
  std::thread thread_;
  int done_fd_ = -1;
  std::mutex done_mu_;
  std::deque<std::function<void()>> done_;
};

}  // namespace gsync
