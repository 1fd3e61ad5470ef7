// SPDX-License-Identifier: Apache-2.0
//
// gpu::Releaser (daemon/gpu/releaser.h): what releases a client's device
// memory runs off the calling thread, in order, and everything queued has
// run by the time the releaser is gone. No GPU needed: the closures are
// plain code.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "daemon/gpu/releaser.h"

namespace gsync::gpu {
namespace {

TEST(GpuReleaser, RunsInOrderOffTheCallingThread) {
  Releaser r;
  std::vector<int> order;
  std::thread::id ran_on;
  for (int i = 0; i < 100; i++)
    r.later([&order, &ran_on, i] {
      order.push_back(i);
      ran_on = std::this_thread::get_id();
    });
  r.drain();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; i++) EXPECT_EQ(order[size_t(i)], i);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(GpuReleaser, EverythingQueuedRunsBeforeItIsGone) {
  std::atomic<int> ran{0};
  {
    Releaser r;
    // The first blocks until the rest are queued: the destructor finds a
    // backlog, and must run it before it joins.
    std::atomic<bool> go{false};
    r.later([&] {
      while (!go.load()) std::this_thread::yield();
      ran++;
    });
    for (int i = 0; i < 50; i++) r.later([&] { ran++; });
    go = true;
  }
  EXPECT_EQ(ran.load(), 51);
}

}  // namespace
}  // namespace gsync::gpu
