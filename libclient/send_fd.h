// SPDX-License-Identifier: Apache-2.0
//
// One message on a unix socket with file descriptors beside it
// (SCM_RIGHTS): how a device allocation reaches the daemon
// (protocol/device.h). Also used by the tests' hand-written client.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace gsync::client {

// sendmsg of len bytes with the n fds (none when n is 0, at most 16); its
// result (MSG_NOSIGNAL).
ssize_t send_with_fds(int sock, const void* msg, size_t len, const int* fds, size_t n);

}  // namespace gsync::client
