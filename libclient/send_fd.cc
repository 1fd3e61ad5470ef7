// SPDX-License-Identifier: Apache-2.0
#include "libclient/send_fd.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

namespace gsync::client {

ssize_t send_with_fd(int sock, const void* msg, size_t len, int fd) {
  iovec iov{const_cast<void*>(msg), len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(sock, &m, MSG_NOSIGNAL);
}

}  // namespace gsync::client
