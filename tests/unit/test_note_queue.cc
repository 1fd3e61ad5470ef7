// SPDX-License-Identifier: Apache-2.0
//
// NoteQueue (core/note_queue.h), the GPU work's completion notes (issue
// #39, item 5): notes pushed from other threads while nobody reads - far
// more than the 8192 a pipe held before it lost the rest - all come back
// in order, the eventfd says so, and an empty queue stays quiet.
#include <gtest/gtest.h>
#include <poll.h>

#include <thread>

#include "daemon/core/note_queue.h"

namespace gsync {
namespace {

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

TEST(NoteQueue, NothingIsLostWhenTheLoopFallsBehind) {
  NoteQueue q;
  ASSERT_GE(q.fd(), 0);
  EXPECT_FALSE(readable(q.fd()));
  // A 1 GiB op in 64 KiB chunks on three streams: 3 x 16384 notes.
  constexpr uint64_t kPerThread = 16384;
  std::vector<std::thread> drivers;
  for (uint64_t t = 0; t < 3; t++)
    drivers.emplace_back([&q, t] {
      for (uint64_t i = 0; i < kPerThread; i++) q.push(t << 32 | i);
    });
  for (auto& d : drivers) d.join();
  EXPECT_TRUE(readable(q.fd()));
  std::vector<uint64_t> got = q.take();
  ASSERT_EQ(got.size(), 3 * kPerThread);
  std::vector<uint64_t> next(3, 0);
  for (uint64_t n : got) {  // each thread's notes in the order it pushed them
    const uint64_t t = n >> 32;
    ASSERT_LT(t, 3u);
    ASSERT_EQ(n & 0xffffffffu, next[t]++) << "thread " << t;
  }
  EXPECT_FALSE(readable(q.fd()));
  EXPECT_TRUE(q.take().empty());
  q.push(7);
  EXPECT_TRUE(readable(q.fd()));
  EXPECT_EQ(q.take(), std::vector<uint64_t>{7});
}

}  // namespace
}  // namespace gsync
