// SPDX-License-Identifier: Apache-2.0
#include "daemon/shm/handshake.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "daemon/core/text.h"

namespace gsync {

bool peer_credentials(int fd, Peer* peer) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  peer->pid = cred.pid;
  peer->uid = cred.uid;
  peer->gid = cred.gid;
  return true;
}

Status read_hello(int fd, proto::HelloRequest* hello) {
  // One byte more than the struct, to notice a client that sends more.
  alignas(8) char buf[sizeof(proto::HelloRequest) + 1];
  ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n < 0) return {GSYNC_ERR_PROTOCOL, fmt::format("reading hello: {}", strerror(errno))};
  return parse_hello(buf, static_cast<size_t>(n), hello);
}

Status parse_hello(const void* msg, size_t n, proto::HelloRequest* hello) {
  const char* buf = static_cast<const char*>(msg);
  if (n < 8) return {GSYNC_ERR_PROTOCOL, fmt::format("hello of {} bytes is too short", n)};
  uint32_t magic, version;
  std::memcpy(&magic, buf, 4);
  std::memcpy(&version, buf + 4, 4);
  if (magic != proto::kHelloMagic)
    return {GSYNC_ERR_PROTOCOL, fmt::format("hello has magic {:#x}, expected {:#x}: not a gsync "
                                            "client", magic, proto::kHelloMagic)};
  if (version != proto::kVersion)
    return {GSYNC_ERR_VERSION,
            fmt::format("protocol version mismatch: client speaks version {}, daemon speaks "
                        "version {}",
                        version, proto::kVersion)};
  if (n != sizeof *hello)
    return {GSYNC_ERR_PROTOCOL, fmt::format("hello of {} bytes, expected {} for version {}", n,
                                            sizeof *hello, version)};
  std::memcpy(hello, buf, sizeof *hello);
  if (memchr(hello->job_id, 0, sizeof hello->job_id) == nullptr)
    return {GSYNC_ERR_PROTOCOL, "job id is not NUL-terminated within 64 bytes"};
  return Status::ok();
}

JoinRequest join_request(const proto::HelloRequest& hello) {
  JoinRequest join;
  // parse_hello found the NUL within the field.
  join.job_id = std::string(hello.job_id, strnlen(hello.job_id, sizeof hello.job_id));
  join.world_size = hello.world_size;
  join.rank = hello.rank;
  join.local_rank = hello.local_rank;
  join.local_size = hello.local_size;
  join.sync = hello.sync;
  join.guard = hello.guard;
  join.plan = hello.plan;
  join.min_hosts = hello.min_hosts;
  join.max_hosts = hello.max_hosts;
  return join;
}

bool send_reply(int fd, const proto::HelloReply& reply, const std::vector<int>& fds) {
  iovec iov{const_cast<proto::HelloReply*>(&reply), sizeof reply};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return sendmsg(fd, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof reply);
}

proto::HelloReply refusal(const Status& st) {
  proto::HelloReply r{};
  r.magic = proto::kHelloMagic;
  r.version = proto::kVersion;
  r.status = st.code();
  // The message may quote what the client sent (its job id): printable,
  // and cut at a character boundary, always NUL-terminated (r is zeroed).
  std::string text = printable(st.message(), sizeof r.message - 1);
  std::memcpy(r.message, text.data(), text.size());
  return r;
}

}  // namespace gsync
