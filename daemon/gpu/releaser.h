// SPDX-License-Identifier: Apache-2.0
//
// Runs what releases GPU resources on a thread of its own, so the event
// thread never waits for the driver: unmapping a client's allocation
// (cuMemUnmap may wait for the device) when the last op over it ends or
// the client goes. No CUDA in it: a queue of closures and the thread that
// runs them in order, started at the first one. Destroyed after every
// holder of what it releases (gsyncd.h declares it early): it runs what is
// queued, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace gsync::gpu {

class Releaser {
 public:
  Releaser() = default;
  ~Releaser();
  Releaser(const Releaser&) = delete;
  Releaser& operator=(const Releaser&) = delete;

  // Runs fn on the releaser's thread, after everything queued before it.
  void later(std::function<void()> fn);
  // Returns once everything queued so far has run (tests).
  void drain();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;  // fn being run now
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gsync::gpu
