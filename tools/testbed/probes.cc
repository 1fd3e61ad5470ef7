// SPDX-License-Identifier: Apache-2.0
#include "tools/testbed/probes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "tools/testbed/commands.h"

namespace gsync::testbed {

namespace {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
}  // namespace

// Whether a unix socket bound to path is listening in pid's network
// namespace, from /proc/<pid>/net/unix. Read rather than connect()ed: a probe
// connection is a client that never says hello, and gsyncd logs a warning for
// each one; a socket in the listening state accepts the next connect().
bool unix_listening(pid_t pid, const std::string& path) {
  constexpr unsigned long kAcceptCon = 0x10000;  // __SO_ACCEPTCON: listen() was called
  std::ifstream in("/proc/" + std::to_string(pid) + "/net/unix");
  std::string line;
  std::getline(in, line);  // "Num RefCount Protocol Flags Type St Inode Path"
  while (std::getline(in, line)) {
    if (line.size() <= path.size() ||
        line.compare(line.size() - path.size(), path.size(), path) != 0 ||
        line[line.size() - path.size() - 1] != ' ')
      continue;
    std::istringstream ls(line);
    std::string num, refs, proto, flags;
    ls >> num >> refs >> proto >> flags;
    if (std::stoul(flags, nullptr, 16) & kAcceptCon) return true;
  }
  return false;
}

namespace {

// A sock_diag netlink socket in netns ("" = ours). A thread enters the
// namespace, makes the socket and ends: a socket stays in the namespace it
// was made in, and no thread of the caller ever changes namespace.
int open_diag_socket(const std::string& netns) {
  int fd = -1;
  auto make = [&] { fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG); };
  if (netns.empty()) {
    make();
    return fd;
  }
  int ns_fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0) return -1;
  std::thread([&] {
    if (setns(ns_fd, CLONE_NEWNET) == 0) make();
  }).join();
  close(ns_fd);
  return fd;
}

}  // namespace

// Whether a TCP socket listens on port in netns. Asked through sock_diag for
// listeners only, which walks just the listening hash: reading
// /proc/<pid>/net/tcp walks every established bucket too and cost 11 ms a
// read here, too much to poll.
bool listens_on(const std::string& netns, uint16_t port) {
  int fd = open_diag_socket(netns);
  if (fd < 0) return false;
  bool found = false;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    struct {
      nlmsghdr nlh;
      inet_diag_req_v2 req;
    } msg{};
    msg.nlh.nlmsg_len = sizeof msg;
    msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    msg.req.sdiag_family = family;
    msg.req.sdiag_protocol = IPPROTO_TCP;
    msg.req.idiag_states = 1u << TCP_LISTEN;
    if (send(fd, &msg, sizeof msg, 0) != static_cast<ssize_t>(sizeof msg)) break;
    bool done = false;
    while (!done) {
      alignas(nlmsghdr) char buf[16384];
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        done = true;
        break;
      }
      int len = static_cast<int>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
          done = true;
          break;
        }
        auto* d = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
        if (ntohs(d->id.idiag_sport) == port) found = true;
      }
    }
  }
  close(fd);
  return found;
}

// "" when addr:port answers (connected or refused: either way the host's
// kernel replied, which is all a reachability probe needs), else why not.
std::string tcp_probe(const std::string& addr, uint16_t port, int timeout_ms) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) return "bad address " + addr;
  auto deadline = Clock::now() + milliseconds(timeout_ms);
  std::string last = "timed out";
  while (Clock::now() < deadline) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return std::string("socket: ") + strerror(errno);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      // An attempt waits a second at most: a dropped SYN is tried again
      // on a new socket rather than waited out by the kernel's backoff.
      auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(std::clamp<long>(left, 1, 1000))) == 1) {
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    close(fd);
    if (err == 0 || err == ECONNREFUSED) return "";
    last = strerror(err);
    std::this_thread::sleep_for(milliseconds(50));
  }
  return last;
}

namespace {

bool port_free(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  close(fd);
  return ok;
}

}  // namespace

// Loopback ports come from below the ephemeral range: a port the kernel hands
// out for bind(0) may be taken as the source port of some outgoing
// connection (one daemon dialling another) before the daemon meant to listen
// on it has started.
Status pick_loopback_ports(int n, unsigned seed, std::set<uint16_t>* taken,
                           std::vector<uint16_t>* out) {
  int low = 32768, high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  const int first = 10000;
  const int span = low - first;
  if (span < n) return {GSYNC_ERR_INTERNAL, "no room for ports below the ephemeral range"};
  int start = static_cast<int>(seed % static_cast<unsigned>(span));
  for (int i = 0; i < span && static_cast<int>(out->size()) < n; i++) {
    auto p = static_cast<uint16_t>(first + (start + i) % span);
    if (taken->count(p) || !port_free(p)) continue;
    taken->insert(p);
    out->push_back(p);
  }
  if (static_cast<int>(out->size()) < n)
    return {GSYNC_ERR_INTERNAL, "fewer than " + std::to_string(n) + " free loopback ports in " +
                                    std::to_string(first) + ".." + std::to_string(low - 1)};
  return Status::ok();
}

std::vector<pid_t> netns_pids(const std::string& ns) {
  std::vector<pid_t> pids;
  CommandResult r = run_command({"ip", "netns", "pids", ns});
  std::istringstream in(r.out);
  long p;
  while (in >> p) pids.push_back(static_cast<pid_t>(p));
  return pids;
}

// Deletes a namespace after SIGKILLing what still runs in it: a namespace
// lives on, unnamed and with its veth, as long as one process is inside.
Status delete_netns(const std::string& ns) {
  for (pid_t p : netns_pids(ns))
    if (p != getpid()) kill(p, SIGKILL);
  return must_run({"ip", "netns", "del", ns});
}

}  // namespace gsync::testbed
