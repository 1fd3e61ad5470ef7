// SPDX-License-Identifier: Apache-2.0
#include "tests/util/raw_client.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "libclient/send_fd.h"

namespace gsync::test {

RawClient::~RawClient() {
  if (base_) munmap(base_, bytes_);
  for (int fd : {sock_, memfd_, sq_efd_, cq_efd_})
    if (fd >= 0) close(fd);
}

proto::HelloRequest RawClient::hello(const std::string& job, int world, int rank) {
  proto::HelloRequest h{};
  h.magic = proto::kHelloMagic;
  h.version = proto::kVersion;
  std::snprintf(h.job_id, sizeof h.job_id, "%s", job.c_str());
  h.world_size = world;
  h.rank = rank;
  h.local_rank = rank;
  h.local_size = world;
  h.arena_bytes = 8 << 20;
  return h;
}

bool RawClient::connect_raw(const std::string& socket_path, const void* hello, size_t len,
                            proto::HelloReply* reply) {
  sock_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_path.c_str());
  if (::connect(sock_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
  if (send(sock_, hello, len, MSG_NOSIGNAL) != static_cast<ssize_t>(len)) return false;
  iovec iov{reply, sizeof *reply};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(sock_, &msg, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof *reply)) return false;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c && c->cmsg_type == SCM_RIGHTS) {
    int fds[3];
    std::memcpy(fds, CMSG_DATA(c), sizeof fds);
    memfd_ = fds[0];
    sq_efd_ = fds[1];
    cq_efd_ = fds[2];
  }
  return true;
}

bool RawClient::connect(const std::string& socket_path, const std::string& job, int world,
                        int rank, proto::HelloReply* reply) {
  proto::HelloRequest h = hello(job, world, rank);
  if (!connect_raw(socket_path, &h, sizeof h, reply) || reply->status != 0) return false;
  bytes_ = reply->shm_bytes;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) return false;
  base_ = static_cast<uint8_t*>(p);
  return true;
}

void RawClient::ring_doorbell() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(sq_efd_, &one, sizeof one);
}

void RawClient::submit(const proto::SubmitEntry& e) {
  auto* h = header();
  uint32_t tail = h->sq_tail.load();
  auto* ring = reinterpret_cast<proto::SubmitEntry*>(base_ + h->sq_offset);
  ring[tail & (h->sq_entries - 1)] = e;
  h->sq_tail.store(tail + 1, std::memory_order_release);
  ring_doorbell();
}

bool RawClient::next_completion(proto::CompleteEntry* out, int timeout_ms) {
  auto* h = header();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    uint32_t head = h->cq_head.load();
    if (h->cq_tail.load(std::memory_order_acquire) != head) {
      auto* ring = reinterpret_cast<proto::CompleteEntry*>(base_ + h->cq_offset);
      *out = ring[head & (h->cq_entries - 1)];
      h->cq_head.store(head + 1, std::memory_order_release);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool RawClient::closed_by_daemon(int timeout_ms) {
  pollfd p{sock_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  char c;
  return (p.revents & (POLLHUP | POLLRDHUP)) || recv(sock_, &c, 1, MSG_DONTWAIT) == 0;
}

bool RawClient::device_request(const void* msg, size_t len, const std::vector<int>& fds,
                               proto::DeviceReply* reply, int timeout_ms) {
  return send_device_request(msg, len, fds) && device_reply(reply, timeout_ms);
}

bool RawClient::send_device_request(const void* msg, size_t len, const std::vector<int>& fds) {
  return client::send_with_fds(sock_, msg, len, fds.data(), fds.size()) ==
         static_cast<ssize_t>(len);
}

bool RawClient::device_reply(proto::DeviceReply* reply, int timeout_ms) {
  pollfd p{sock_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  return recv(sock_, reply, sizeof *reply, 0) == static_cast<ssize_t>(sizeof *reply);
}

}  // namespace gsync::test
