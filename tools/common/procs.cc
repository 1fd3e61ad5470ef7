// SPDX-License-Identifier: Apache-2.0
#include "tools/common/procs.h"

#include <algorithm>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace gsync::tools {

namespace {

int g_report_fd = -1;

// A forked child starts with no signal blocked: a tool may block SIGINT and
// SIGTERM to take them with sigwait (gsync-perf tears its test bed down).
void unblock_signals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

bool can_connect(const std::string& path, int type) {
  int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace

// One at a time would deadlock: a rank whose report outgrows the pipe
// (64 KiB: a long sweep's timings) blocks in write() while the parent waits
// for another rank's end of file, and that rank may be waiting, in an
// allreduce, for the blocked one.
std::vector<std::string> read_all_of(const std::vector<int>& fds) {
  std::vector<std::string> out(fds.size());
  std::vector<pollfd> polls;
  for (int fd : fds) polls.push_back({fd, POLLIN, 0});
  size_t open = polls.size();
  char buf[4096];
  while (open > 0) {
    if (poll(polls.data(), polls.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t i = 0; i < polls.size(); i++) {
      if (polls[i].fd < 0 || !polls[i].revents) continue;
      ssize_t n = read(polls[i].fd, buf, sizeof buf);
      if (n > 0) {
        out[i].append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        polls[i].fd = -1;  // at its end (or broken): poll(2) skips negative fds
        open--;
      }
    }
  }
  return out;
}

std::string gsyncd_path() {
  const char* p = std::getenv("GSYNCD");
  if (p && *p) return p;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const char* rel : {"/gsyncd", "/../sbin/gsyncd", "/../daemon/gsyncd", "/../../daemon/gsyncd"}) {
      std::string c = dir + rel;
      if (access(c.c_str(), X_OK) == 0) return c;
    }
  }
  return "gsyncd";
}

DaemonProcess::DaemonProcess(std::vector<std::string> extra_args, const std::string& toml,
                             const std::string& log_level, uid_t run_as_uid, gid_t run_as_gid) {
  char tmpl[] = "/tmp/gsync.XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  chmod(dir_.c_str(), 0755);  // tests connect as other users too
  socket_ = dir_ + "/gsyncd.sock";
  admin_socket_ = dir_ + "/admin.sock";
  log_path_ = dir_ + "/gsyncd.log";
  std::vector<std::string> args = {gsyncd_path(), "--socket", socket_, "--admin-socket",
                                   admin_socket_, "--log-level", log_level};
  if (!toml.empty()) {
    std::string cfg = dir_ + "/gsyncd.toml";
    std::ofstream(cfg) << toml;
    args.push_back("--config");
    args.push_back(cfg);
  }
  // Its own tuning table, not the machine's (/var/lib/gsync).
  if (std::find(extra_args.begin(), extra_args.end(), "--tuning-table") == extra_args.end())
    args.insert(args.end(), {"--tuning-table", dir_ + "/tuning.json"});
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  if (run_as_uid != 0 && chown(dir_.c_str(), run_as_uid, run_as_gid) != 0)
    throw std::runtime_error("chown " + dir_ + ": " + strerror(errno));
  pid_ = fork();
  if (pid_ == 0) {
    unblock_signals();
    int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    if (run_as_uid != 0 && (setgroups(0, nullptr) != 0 || setgid(run_as_gid) != 0 ||
                            setuid(run_as_uid) != 0)) {
      std::fprintf(stderr, "running as uid %u: %s\n", run_as_uid, strerror(errno));
      _exit(126);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (can_connect(socket_, SOCK_SEQPACKET) && can_connect(admin_socket_, SOCK_STREAM)) return;
    if (!alive()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("gsyncd did not come up; its log:\n" + log());
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) stop();
  std::string cmd = "rm -rf '" + dir_ + "'";
  [[maybe_unused]] int rc = std::system(cmd.c_str());
}

bool DaemonProcess::alive() const {
  int status;
  return pid_ > 0 && waitpid(pid_, &status, WNOHANG) == 0;
}

std::string DaemonProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int DaemonProcess::stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 1000; i++) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -SIGKILL;
}

void report(const std::string& text) {
  if (g_report_fd >= 0) {
    [[maybe_unused]] ssize_t n = write(g_report_fd, text.data(), text.size());
  } else {
    std::fputs(text.c_str(), stderr);
  }
}

pid_t spawn(const std::function<int()>& fn) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    unblock_signals();
    _exit(fn());
  }
  return pid;
}

std::vector<ChildResult> run_ranks(int n, const std::function<int(int)>& fn, int timeout_s) {
  std::vector<ChildResult> results(static_cast<size_t>(n));
  std::vector<int> pipes(static_cast<size_t>(n), -1);
  std::fflush(nullptr);
  for (int r = 0; r < n; r++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_t pid = fork();
    if (pid == 0) {
      unblock_signals();
      close(p[0]);
      g_report_fd = p[1];
      int code = fn(r);
      _exit(code);
    }
    close(p[1]);
    pipes[static_cast<size_t>(r)] = p[0];
    results[static_cast<size_t>(r)].pid = pid;
  }
  // A watchdog thread kills stragglers so a hung rank fails the test, not CI.
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!done && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!done)
      for (auto& r : results) kill(r.pid, SIGKILL);
  });
  std::vector<std::string> outputs = read_all_of(pipes);
  for (int r = 0; r < n; r++) {
    auto& res = results[static_cast<size_t>(r)];
    res.output = std::move(outputs[static_cast<size_t>(r)]);
    close(pipes[static_cast<size_t>(r)]);
    int status = 0;
    waitpid(res.pid, &status, 0);
    res.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  done = true;
  watchdog.join();
  return results;
}

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

std::string admin_query(const std::string& admin_socket, const std::string& command) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", admin_socket.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  std::string line = command + "\n";
  [[maybe_unused]] ssize_t n = write(fd, line.data(), line.size());
  std::string out = read_all(fd);
  close(fd);
  return out;
}

bool wait_until(const std::function<bool()>& pred, int timeout_ms, int poll_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

bool read_byte(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return false;
  char c;
  return read(fd, &c, 1) == 1;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> cpu_share(const std::vector<int>& cpus, int hosts, int h) {
  if (cpus.empty() || hosts <= 0 || h < 0) return {};
  const size_t n = cpus.size(), k = static_cast<size_t>(hosts), i = static_cast<size_t>(h);
  if (n < k) return {cpus[i % n]};
  return std::vector<int>(cpus.begin() + long(i * n / k), cpus.begin() + long((i + 1) * n / k));
}

bool pin_to(const std::vector<int>& cpus) {
  if (cpus.empty()) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) j++;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace gsync::tools
