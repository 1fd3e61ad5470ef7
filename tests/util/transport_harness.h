// SPDX-License-Identifier: Apache-2.0
//
// Shared by the transport tests (tcp on the host, verbs in the rxe VM):
// contexts in one process, every handler call recorded, all driven by poll()
// from the test thread. Real sockets and devices; nothing is faked here.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/transport/transport.h"

namespace gsync::transport::testing {

// A cluster key for contexts in one test (every context needs one); fill
// makes another cluster's.
inline std::string test_key(char fill = 'k') { return std::string(kClusterKeyBytes, fill); }

// Ports nobody listens on right now: bound to port 0 together (so they
// differ), then released for the contexts to take.
inline std::vector<uint16_t> free_ports(int n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (int i = 0; i < n; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

// Memory from mmap, as the daemon's arenas and scratch are (buffer.h).
struct Mem {
  explicit Mem(size_t n) : bytes(n) {
    p = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  }
  ~Mem() { munmap(p, bytes); }
  uint8_t* p;
  size_t bytes;
};

struct Landed {
  int peer;
  uint32_t region;
  uint64_t offset, len, imm;
};

struct Done {
  int peer;
  uint64_t cookie;
  Status st;
};

// One context and everything its handlers reported.
struct Node {
  std::unique_ptr<Context> ctx;
  std::vector<int> ups;
  std::vector<std::pair<int, Status>> downs;
  std::vector<Landed> landed;
  std::vector<Done> dones;
  std::vector<std::pair<int, std::string>> controls;
  std::function<void(const Landed&)> on_write;  // optional extra reaction

  size_t ok_dones() const {
    size_t n = 0;
    for (auto& d : dones) n += d.st.is_ok();
    return n;
  }

  // Handlers that record into this node (which must outlive the context).
  Handlers recorder() {
    Handlers h;
    h.on_peer_up = [this](int p) { ups.push_back(p); };
    h.on_peer_down = [this](int p, const Status& why) { downs.emplace_back(p, why); };
    h.on_write = [this](int p, uint32_t r, uint64_t off, uint64_t len, uint64_t imm) {
      landed.push_back({p, r, off, len, imm});
      if (on_write) on_write(landed.back());
    };
    h.on_write_done = [this](int p, uint64_t cookie, const Status& st) {
      dones.push_back({p, cookie, st});
    };
    h.on_control = [this](int p, std::string_view m) { controls.emplace_back(p, std::string(m)); };
    return h;
  }

  // Starts ctx with the recorder; false (and a test failure) if it fails.
  bool start() {
    Status s = ctx->start(recorder());
    EXPECT_TRUE(s) << s.message();
    return s.is_ok();
  }
};

// The nodes of one test, polled together.
class Nodes {
 public:
  Nodes(int n, int default_timeout_ms, int poll_ms)
      : nodes_(size_t(n)), default_timeout_ms_(default_timeout_ms), poll_ms_(poll_ms) {}

  Node& fresh(int i) {
    nodes_[size_t(i)] = std::make_unique<Node>();
    return *nodes_[size_t(i)];
  }
  void stop(int i) { nodes_[size_t(i)].reset(); }
  // Creates and starts host i's TCP context with o (replacing any earlier one).
  Node& start_tcp(int i, const ContextOptions& o) {
    Node& n = fresh(i);
    Status st;
    n.ctx = make_tcp_context(o, &st);
    EXPECT_TRUE(n.ctx) << st.message();
    if (n.ctx) n.start();
    return n;
  }
  int size() const { return int(nodes_.size()); }
  Node& operator[](int i) { return *nodes_[size_t(i)]; }

  // Polls every live context until pred() holds or the timeout passes.
  bool pump(const std::function<bool()>& pred, int timeout_ms = -1) {
    using Clock = std::chrono::steady_clock;
    auto deadline =
        Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? default_timeout_ms_ : timeout_ms);
    for (;;) {
      if (pred()) return true;
      if (Clock::now() > deadline) return false;
      std::vector<pollfd> fds;
      for (auto& n : nodes_)
        if (n && n->ctx) fds.push_back({n->ctx->event_fd(), POLLIN, 0});
      ::poll(fds.data(), fds.size(), poll_ms_);
      for (auto& n : nodes_)
        if (n && n->ctx) n->ctx->poll();
    }
  }
  // Polls for ms whatever happens.
  void idle(int ms) { pump([] { return false; }, ms); }
  bool all_up() {
    for (size_t i = 0; i < nodes_.size(); i++)
      for (size_t j = 0; j < nodes_.size(); j++)
        if (i != j && (!nodes_[i] || !nodes_[i]->ctx || !nodes_[i]->ctx->peer_up(int(j))))
          return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  int default_timeout_ms_, poll_ms_;
};

}  // namespace gsync::transport::testing
