// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/device.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gsync::transport::tcp {

namespace {

// Submission queue depth. Each connection has at most a recv, a send and a
// cancel in flight (a connect and its timeout while connecting), so 256
// covers dozens of peers; a full queue is submitted and reused, not an error.
constexpr unsigned kSqEntries = 256;
// Completions can outnumber submissions in one batch (linked timeouts); the
// kernel keeps overflow (IORING_FEAT_NODROP) but a roomy CQ avoids the slow
// path.
constexpr unsigned kCqEntries = 4096;

// Keepalive only backs up the heartbeats, for a peer whose host vanished
// while our side had nothing to send: probes after 10 s idle, every 5 s.
constexpr int kKeepIdleS = 10, kKeepIntvlS = 5, kKeepCnt = 3;

}  // namespace

Status resolve(const std::string& address, uint16_t port, Endpoint* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(address.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return {GSYNC_ERR_INVALID, fmt::format("cannot resolve '{}': {}", address,
                                           rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc))};
  }
  std::memcpy(&out->addr, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  out->text = endpoint_text(res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return Status::ok();
}

std::string endpoint_text(const sockaddr* sa, socklen_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(in6->sin6_port));
  }
  return fmt::format("(address family {})", sa->sa_family);
}

Status tune_socket(int fd, int buffer_bytes) {
  int one = 1, bytes = buffer_bytes;
  struct Opt {
    int level, name;
    int value;
    const char* what;
  };
  const Opt opts[] = {
      {IPPROTO_TCP, TCP_NODELAY, one, "TCP_NODELAY"},
      {SOL_SOCKET, SO_KEEPALIVE, one, "SO_KEEPALIVE"},
      {IPPROTO_TCP, TCP_KEEPIDLE, kKeepIdleS, "TCP_KEEPIDLE"},
      {IPPROTO_TCP, TCP_KEEPINTVL, kKeepIntvlS, "TCP_KEEPINTVL"},
      {IPPROTO_TCP, TCP_KEEPCNT, kKeepCnt, "TCP_KEEPCNT"},
      // Set before connect()/listen(): the window scale is fixed by the SYN.
      {SOL_SOCKET, SO_SNDBUF, bytes, "SO_SNDBUF"},
      {SOL_SOCKET, SO_RCVBUF, bytes, "SO_RCVBUF"},
  };
  for (const Opt& o : opts) {
    if (bytes == 0 && o.level == SOL_SOCKET && (o.name == SO_SNDBUF || o.name == SO_RCVBUF))
      continue;  // autotuning, which setting either would turn off
    if (setsockopt(fd, o.level, o.name, &o.value, sizeof o.value) != 0)
      return {GSYNC_ERR_INTERNAL, fmt::format("setsockopt({}): {}", o.what, strerror(errno))};
  }
  return Status::ok();
}

Status Device::create(const std::string& listen_address, uint16_t port, int buffer_bytes,
                      std::unique_ptr<Device>* out) {
  std::unique_ptr<Device> d(new Device());

  io_uring_params p{};
  // A plain ring, on purpose: a recv that completes while the event loop
  // sleeps posts its completion from task work that interrupts epoll_wait,
  // and the eventfd wakes the loop. IORING_SETUP_DEFER_TASKRUN saved that
  // interruption, but on Linux 6.18 a frame received while the loop slept
  // signalled the eventfd only 12-24 ms later: every other small op across
  // two hosts waited that long (tests/unit/test_transport_tcp.cc,
  // AnIdleContextsEventFdSaysAMessageArrivedAtOnce; docs/transport.md).
  p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
  p.cq_entries = kCqEntries;
  int rc = io_uring_queue_init_params(kSqEntries, &d->ring_, &p);
  if (rc < 0) {
    return {GSYNC_ERR_INTERNAL,
            fmt::format("io_uring_queue_init ({} entries): {}{}", kSqEntries, strerror(-rc),
                        rc == -EPERM ? " (is kernel.io_uring_disabled set?)" : "")};
  }
  d->ring_ok_ = true;
  if (!(p.features & IORING_FEAT_NODROP)) {
    // Without it a burst of completions could be dropped, and a dropped recv
    // completion would hang its connection for good.
    return {GSYNC_ERR_UNSUPPORTED, "io_uring lacks IORING_FEAT_NODROP (kernel older than 5.5)"};
  }

  d->event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (d->event_fd_ < 0) return {GSYNC_ERR_INTERNAL, fmt::format("eventfd: {}", strerror(errno))};
  rc = io_uring_register_eventfd(&d->ring_, d->event_fd_);
  if (rc < 0)
    return {GSYNC_ERR_INTERNAL, fmt::format("io_uring_register_eventfd: {}", strerror(-rc))};

  Status st = resolve(listen_address, port, &d->listen_);
  if (!st) return {st.code(), "listen address: " + st.message()};
  d->listen_fd_ = socket(d->listen_.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (d->listen_fd_ < 0)
    return {GSYNC_ERR_INTERNAL, fmt::format("socket for {}: {}", d->listen_.text, strerror(errno))};
  int one = 1;
  // A restarted daemon must get its port back while the old connections sit
  // in TIME_WAIT.
  setsockopt(d->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // Accepted sockets inherit the listener's buffer sizes, and the window
  // scale they announce is fixed before accept() returns.
  st = tune_socket(d->listen_fd_, buffer_bytes);
  if (!st) return st;
  // A daemon restarted at once (systemd Restart=, a test) can find its port
  // still held for a few ms by the old process's io_uring teardown, which
  // finishes in the kernel after the process is gone: retry for a while.
  for (int attempt = 0;; attempt++) {
    if (bind(d->listen_fd_, reinterpret_cast<sockaddr*>(&d->listen_.addr), d->listen_.len) == 0)
      break;
    if (errno != EADDRINUSE || attempt >= 100)
      return {GSYNC_ERR_CONNECT, fmt::format("bind {}: {}", d->listen_.text, strerror(errno))};
    usleep(20000);
  }
  if (listen(d->listen_fd_, 128) != 0)
    return {GSYNC_ERR_CONNECT, fmt::format("listen {}: {}", d->listen_.text, strerror(errno))};
  // Port 0 asks the kernel for one; report the real one.
  socklen_t len = sizeof d->listen_.addr;
  getsockname(d->listen_fd_, reinterpret_cast<sockaddr*>(&d->listen_.addr), &len);
  d->listen_.len = len;
  d->listen_.text = endpoint_text(reinterpret_cast<sockaddr*>(&d->listen_.addr), len);

  socklen_t ol = sizeof(int);
  getsockopt(d->listen_fd_, SOL_SOCKET, SO_SNDBUF, &d->granted_sndbuf_, &ol);
  ol = sizeof(int);
  getsockopt(d->listen_fd_, SOL_SOCKET, SO_RCVBUF, &d->granted_rcvbuf_, &ol);
  *out = std::move(d);
  return Status::ok();
}

Device::~Device() {
  if (listen_fd_ >= 0) close(listen_fd_);
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (event_fd_ >= 0) close(event_fd_);
}

io_uring_sqe* Device::sqe(uint64_t tag) {
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  while (s == nullptr) {
    submit();
    s = io_uring_get_sqe(&ring_);
  }
  // Callers fill the SQE with io_uring_prep_*, which leaves user_data alone.
  io_uring_sqe_set_data64(s, tag);
  if (tag_op(tag) != Op::kIgnore) outstanding_++;
  return s;
}

void Device::reserve(unsigned n) {
  if (io_uring_sq_space_left(&ring_) < n) submit();
}

void Device::submit() {
  for (;;) {
    int rc = io_uring_submit(&ring_);
    if (rc >= 0 || rc == -EINTR) {
      if (rc >= 0) return;
      continue;
    }
    if (rc == -EAGAIN || rc == -EBUSY) {
      // The completion queue is backed up; making room is the caller's next
      // poll(). Keep the SQEs queued: they go with the next submit.
      notify();
      return;
    }
    spdlog::error("tcp transport: io_uring_submit: {}", strerror(-rc));
    return;
  }
}

void Device::account(uint64_t tag) {
  if (tag_op(tag) != Op::kIgnore) outstanding_--;
}

bool Device::next(Completion* c) {
  io_uring_cqe* cqe = nullptr;
  if (io_uring_peek_cqe(&ring_, &cqe) != 0 || cqe == nullptr) return false;
  *c = Completion{cqe->user_data, cqe->res, cqe->flags};
  io_uring_cqe_seen(&ring_, cqe);
  account(c->tag);
  return true;
}

void Device::wait_any(int timeout_ms) {
  submit();
  __kernel_timespec ts{};
  ts.tv_sec = timeout_ms / 1000;
  ts.tv_nsec = (timeout_ms % 1000) * 1000000L;
  io_uring_cqe* cqe = nullptr;
  io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
}

void Device::drain_event_fd() {
  // Read even while quiet: the kernel may have signalled just before the
  // flag took (or, before Linux 5.8, ignores the flag), and an eventfd left
  // readable would keep the polling loop from ever going to sleep.
  uint64_t v;
  [[maybe_unused]] ssize_t n = read(event_fd_, &v, sizeof v);
}

void Device::quiet(bool on) {
  if (on == quiet_) return;
  io_uring_cq_eventfd_toggle(&ring_, !on);
  quiet_ = on;
  if (on) return;
  // The kernel posts a completion, then reads the flag; we store the flag,
  // then read the tail. A full fence keeps our store ahead of our load, so
  // a completion is either seen here or signalled there.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (io_uring_cq_ready(&ring_) > 0) notify();
}

bool Device::ready() const { return io_uring_cq_ready(&ring_) > 0; }

void Device::notify() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof one);
}

}  // namespace gsync::transport::tcp
