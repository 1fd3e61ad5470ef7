// SPDX-License-Identifier: Apache-2.0
//
// One message on a unix socket with one file descriptor beside it
// (SCM_RIGHTS): how a device allocation reaches the daemon
// (protocol/device.h). Also used by the tests' hand-written client.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace gsync::client {

// sendmsg of len bytes, with fd when fd >= 0; its result (MSG_NOSIGNAL).
ssize_t send_with_fd(int sock, const void* msg, size_t len, int fd);

}  // namespace gsync::client
