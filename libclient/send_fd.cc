// SPDX-License-Identifier: Apache-2.0
#include "libclient/send_fd.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace gsync::client {

ssize_t send_with_fds(int sock, const void* msg, size_t len, const int* fds, size_t n) {
  constexpr size_t kMax = 16;
  if (n > kMax) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<void*>(msg), len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMax)] = {};
  if (n > 0) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  }
  return sendmsg(sock, &m, MSG_NOSIGNAL);
}

}  // namespace gsync::client
