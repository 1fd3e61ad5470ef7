// SPDX-License-Identifier: Apache-2.0
//
// A real daemon-side session (memfd arena, rings, eventfds) for in-process
// tests of the records that hold them (an op's arrivals, a world's
// waiters), with the global rank it says.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "daemon/shm/session.h"

namespace gsync::test {

inline std::shared_ptr<Session> make_session(uint64_t id, int rank) {
  std::unique_ptr<Session> s;
  Status st = Session::create(id, 16, 1 << 16, &s);
  EXPECT_TRUE(st) << st.message();
  s->rank = rank;
  return std::shared_ptr<Session>(std::move(s));
}

}  // namespace gsync::test
