// SPDX-License-Identifier: Apache-2.0
//
// The eventfd doorbells of a session (comm.h): rung by the submitter, the
// completion fd's first arming and the poller's wake-up, drained by the
// waiters. Shared by the session's parts (comm.cc, comm_submit.cc,
// comm_wait.cc); not part of the library's surface.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace gsync::client {

inline void ring(int eventfd_fd) {
  const uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(eventfd_fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
  // EAGAIN means the counter is saturated: the reader has a wakeup pending.
}

inline void drain_eventfd(int eventfd_fd) {
  uint64_t value;
  ssize_t n;
  do {
    n = ::read(eventfd_fd, &value, sizeof(value));
  } while (n < 0 && errno == EINTR);
}

}  // namespace gsync::client
