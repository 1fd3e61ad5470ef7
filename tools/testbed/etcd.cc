// SPDX-License-Identifier: Apache-2.0
#include "tools/testbed/etcd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "tools/common/procs.h"
#include "tools/testbed/probes.h"

namespace gsync::testbed {

namespace {

constexpr int kStartMs = 20000;
constexpr int kStopMs = 10000;

std::string etcd_binary() {
  const char* p = std::getenv("GSYNC_ETCD");
  return p && *p ? p : "etcd";
}

// Whether etcd on 127.0.0.1:port answers GET /health with "true": a plain
// HTTP/1.0 exchange, each step bounded by a 1 s socket timeout.
bool healthy(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const char req[] = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req, sizeof req - 1) == static_cast<ssize_t>(sizeof req - 1)) {
      char buf[1024];
      ssize_t n;
      while (reply.size() < 16384 && (n = read(fd, buf, sizeof buf)) > 0)
        reply.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return reply.find("\"health\":\"true\"") != std::string::npos;
}

// In the child, between fork and exec: only system calls.
[[noreturn]] void exec_etcd(const std::vector<std::string>& args, const std::string& log,
                            pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);  // the parent died before prctl
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

}  // namespace

EtcdServer::~EtcdServer() { stop(); }

std::string EtcdServer::endpoint() const {
  return client_port_ ? "http://127.0.0.1:" + std::to_string(client_port_) : "";
}

std::string EtcdServer::log_tail(size_t bytes) const {
  std::ifstream in(dir_ + "/etcd.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > bytes ? "..." + all.substr(all.size() - bytes) : all;
}

Status EtcdServer::start(const std::string& dir) {
  if (pid_ > 0) return {GSYNC_ERR_INVALID, "etcd: already running, pid " + std::to_string(pid_)};
  dir_ = dir;
  // Ports spread by pid and by server, so that parallel tests and several
  // servers in one process do not pick the same ones.
  static std::atomic<unsigned> servers{0};
  std::set<uint16_t> taken;
  std::vector<uint16_t> ports;
  unsigned seed = static_cast<unsigned>(getpid()) * 7919u + servers.fetch_add(1) * 104729u;
  if (Status st = pick_loopback_ports(2, seed, &taken, &ports); !st)
    return {st.code(), "etcd: " + st.message()};
  client_port_ = ports[0];
  peer_port_ = ports[1];
  return launch();
}

Status EtcdServer::launch() {
  const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
  const std::vector<std::string> args = {etcd_binary(),
                                         "--name",
                                         "gsync",
                                         "--data-dir",
                                         dir_ + "/data",
                                         "--listen-client-urls",
                                         client,
                                         "--advertise-client-urls",
                                         client,
                                         "--listen-peer-urls",
                                         peer,
                                         "--initial-advertise-peer-urls",
                                         peer,
                                         "--initial-cluster",
                                         "gsync=" + peer,
                                         "--logger",
                                         "zap",
                                         "--log-outputs",
                                         "stderr"};
  const std::string log = dir_ + "/etcd.log";
  const pid_t parent = getpid();
  pid_ = tools::spawn([&]() -> int { exec_etcd(args, log, parent); });
  if (pid_ < 0) return {GSYNC_ERR_INTERNAL, std::string("etcd: fork: ") + strerror(errno)};
  int status = 0;
  bool exited = false;
  bool up = tools::wait_until(
      [&] {
        exited = waitpid(pid_, &status, WNOHANG) == pid_;
        return exited || healthy(client_port_);
      },
      kStartMs, 50);
  if (up && !exited) return Status::ok();
  std::string why = exited
                        ? "exited (status " + std::to_string(status) + ")"
                        : "did not answer /health within " + std::to_string(kStartMs / 1000) + " s";
  if (exited) pid_ = -1;
  stop();
  return {exited ? GSYNC_ERR_INTERNAL : GSYNC_ERR_TIMEOUT,
          "etcd on " + client + " " + why + "; the end of " + log + ":\n" + log_tail()};
}

void EtcdServer::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  bool gone =
      tools::wait_until([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, kStopMs, 10);
  if (!gone) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

Status EtcdServer::restart() {
  if (client_port_ == 0) return {GSYNC_ERR_INVALID, "etcd: restart before start"};
  stop();
  return launch();
}

}  // namespace gsync::testbed
