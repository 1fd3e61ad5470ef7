// SPDX-License-Identifier: Apache-2.0
#include "tools/testbed/control.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace gsync::testbed {

namespace {

// An answer the asker may no longer wait for: written or dropped, never blocking.
void answer(const std::string& reply, const std::string& line) {
  int fd = ::open(reply.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  std::string text = line + "\n";
  [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
}

std::string run_request(Testbed& bed, const std::string& line, std::string* reply) {
  std::istringstream in(line);
  std::string verb;
  in >> verb;
  if (verb == "add-host") {
    int rack = 0, h = -1;
    in >> rack >> *reply;
    Status st = bed.add_host(rack, &h);
    if (!st) return "error: " + st.message();
    return fmt::format("ok: {} in rack {} at {}:{}, client socket {}, admin socket {}",
                       bed.host_id(h), bed.rack(h), bed.address(h), bed.port(h), bed.socket(h),
                       bed.admin_socket(h));
  }
  if (verb == "remove-host") {
    std::string id, how;
    in >> id >> how >> *reply;
    for (int h = 0; h < bed.hosts(); h++) {
      if (bed.host_id(h) != id) continue;
      if (!bed.daemon_alive(h)) return "error: " + id + " has no daemon running";
      bed.remove_host(h, how == "kill" ? SIGKILL : SIGTERM);
      return fmt::format("ok: {} {}", id,
                         how == "kill" ? "killed (peers see it go when its lease expires)"
                                       : "stopped (its lease revoked: peers see it go now)");
    }
    return "error: no host " + id;
  }
  return "error: unknown request '" + verb + "'";
}

}  // namespace

int open_control(const Testbed& bed, std::string* err) {
  std::string path = bed.dir() + "/control";
  if (mkfifo(path.c_str(), 0600) != 0 && errno != EEXIST) {
    *err = "mkfifo " + path + ": " + strerror(errno);
    return -1;
  }
  // Read-write: the FIFO never reports end-of-file between askers.
  int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) *err = "open " + path + ": " + strerror(errno);
  return fd;
}

void serve_control(Testbed& bed, int fd) {
  static std::string pending;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) pending.append(buf, size_t(n));
  size_t eol;
  while ((eol = pending.find('\n')) != std::string::npos) {
    std::string line = pending.substr(0, eol), reply;
    pending.erase(0, eol + 1);
    std::string result = run_request(bed, line, &reply);
    fmt::print("{}: {}\n", line.substr(0, line.rfind(' ')), result);
    std::fflush(stdout);
    if (!reply.empty()) answer(reply, result);
  }
}

int ask_bed(const std::string& dir_in, const std::string& request) {
  std::string dir = dir_in;
  if (dir.empty()) {
    std::vector<std::string> beds;
    for (const auto& e : std::filesystem::directory_iterator("/tmp"))
      if (e.path().filename().string().rfind("gtb-", 0) == 0 &&
          std::filesystem::exists(e.path() / "control"))
        beds.push_back(e.path().string());
    if (beds.size() != 1) {
      fmt::print(stderr, "gsync-testbed: {} beds with a control FIFO under /tmp; name one with "
                         "--bed DIR\n",
                 beds.size());
      return 2;
    }
    dir = beds[0];
  }
  std::string reply = fmt::format("{}/reply.{}", dir, getpid());
  if (mkfifo(reply.c_str(), 0600) != 0) {
    fmt::print(stderr, "gsync-testbed: mkfifo {}: {}\n", reply, strerror(errno));
    return 1;
  }
  int in = ::open(reply.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  int out = ::open((dir + "/control").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  std::string line = request + " " + reply + "\n";
  bool sent = out >= 0 && ::write(out, line.data(), line.size()) == ssize_t(line.size());
  if (out >= 0) ::close(out);
  std::string answer_text;
  if (sent) {
    // add-host starts a daemon and waits for it: up to a minute.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    pollfd p{in, POLLIN, 0};
    while (answer_text.find('\n') == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      if (::poll(&p, 1, 1000) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(in, buf, sizeof buf);
      if (n > 0) answer_text.append(buf, size_t(n));
      if (n <= 0) break;  // the bed opened the reply and closed it with nothing
    }
  }
  ::close(in);
  ::unlink(reply.c_str());
  if (!sent || answer_text.empty()) {
    fmt::print(stderr, "gsync-testbed: no answer from the bed in {} (is its `up` running?)\n", dir);
    return 1;
  }
  fmt::print("{}", answer_text);
  return answer_text.rfind("ok", 0) == 0 ? 0 : 1;
}

}  // namespace gsync::testbed
