// SPDX-License-Identifier: Apache-2.0
#include "tools/testbed/etcd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

Status EtcdServer::prepare(const std::string& dir, const std::string& name,
                           std::set<uint16_t>* taken) {
  if (pid_ > 0) return {GSYNC_ERR_INVALID, "etcd: already running, pid " + std::to_string(pid_)};
  dir_ = dir;
  name_ = name;
  // Ports spread by pid and by server, so that parallel tests and several
  // servers in one process do not pick the same ones.
  static std::atomic<unsigned> servers{0};
  std::set<uint16_t> none;
  std::vector<uint16_t> ports;
  unsigned seed = static_cast<unsigned>(getpid()) * 7919u + servers.fetch_add(1) * 104729u;
  if (Status st = pick_loopback_ports(2, seed, taken ? taken : &none, &ports); !st)
    return {st.code(), "etcd: " + st.message()};
  client_port_ = ports[0];
  peer_port_ = ports[1];
  return Status::ok();
}

std::string EtcdServer::peer_url() const {
  return "http://127.0.0.1:" + std::to_string(peer_port_);
}

Status EtcdServer::start(const std::string& dir, std::set<uint16_t>* taken) {
  if (Status st = prepare(dir, "gsync", taken); !st) return st;
  initial_cluster_ = name_ + "=" + peer_url();
  return launch();
}

Status EtcdServer::start_cluster(const std::string& dir, int n, std::set<uint16_t>* taken,
                                 std::vector<std::unique_ptr<EtcdServer>>* out) {
  out->clear();
  std::string initial;
  for (int i = 1; i <= n; i++) {
    auto m = std::make_unique<EtcdServer>();
    const std::string d = dir + "/" + std::to_string(i);
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST)
      return {GSYNC_ERR_INTERNAL, "mkdir " + d + ": " + strerror(errno)};
    if (Status st = m->prepare(d, "m" + std::to_string(i), taken); !st) return st;
    initial += (initial.empty() ? "" : ",") + m->name_ + "=" + m->peer_url();
    out->push_back(std::move(m));
  }
  for (auto& m : *out) {
    m->initial_cluster_ = initial;
    if (Status st = m->spawn(); !st) return st;
  }
  for (auto& m : *out)
    if (Status st = m->wait_healthy(); !st) return st;
  return Status::ok();
}

Status EtcdServer::launch() {
  if (Status st = spawn(); !st) return st;
  return wait_healthy();
}

Status EtcdServer::spawn() {
  const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
  const std::string peer = peer_url();
  const std::vector<std::string> args = {etcd_binary(),
                                         "--name",
                                         name_,
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
                                         initial_cluster_,
                                         "--initial-cluster-token",
                                         "gsync-testbed-" + std::to_string(getpid()),
                                         "--logger",
                                         "zap",
                                         "--log-outputs",
                                         "stderr"};
  const std::string log = dir_ + "/etcd.log";
  const pid_t parent = getpid();
  pid_ = tools::spawn([&]() -> int { exec_etcd(args, log, parent); });
  if (pid_ < 0) return {GSYNC_ERR_INTERNAL, std::string("etcd: fork: ") + strerror(errno)};
  return Status::ok();
}

Status EtcdServer::wait_healthy() {
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
          "etcd " + name_ + " on " + endpoint() + " " + why + "; the end of " + dir_ +
              "/etcd.log:\n" + log_tail()};
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
