// SPDX-License-Identifier: Apache-2.0
#include "tools/peers/child.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tools/common/procs.h"

namespace gsync::peers {

namespace {

constexpr size_t kStderrKeep = 16 << 10;  // tail of a child's stderr kept for errors
constexpr auto kReapGrace = std::chrono::seconds(1);
constexpr auto kTermGrace = std::chrono::seconds(2);

}  // namespace

std::string errno_text(int e) { return std::strerror(e); }

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    // The drivers arm alarm(--timeout) as their kill switch.
    return "signal " + std::to_string(sig) + " (" + strsignal(sig) +
           (sig == SIGALRM ? ": its --timeout ran out)" : ")");
  }
  return "status " + std::to_string(status);
}

NetnsFd::~NetnsFd() {
  if (fd_ >= 0) close(fd_);
}

bool NetnsFd::open(const std::string& name, std::string* error) {
  if (name.empty()) return true;
  const std::string path = "/var/run/netns/" + name;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) *error = "network namespace " + path + ": " + errno_text(errno);
  return fd_ >= 0;
}

Child::~Child() {
  // pid_ stays -1 if never started, and waitpid(-1) would reap someone else's child.
  if (pid_ > 0 && !reaped_) {
    kill_group(SIGKILL);
    int st;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  for (int fd : {out_fd_, err_fd_})
    if (fd >= 0) close(fd);
}

bool Child::start(int netns_fd, std::string* error, const std::vector<int>& cpus) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return fail(error, "pipe");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return fail(error, "pipe");
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<char*> cargv;
  for (auto& a : argv_) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::string setns_msg = label_ + ": setns(CLONE_NEWNET) failed\n";
  const std::string pin_msg = label_ + ": sched_setaffinity failed\n";
  const std::string exec_msg = label_ + ": cannot execute " + argv_[0] + "\n";
  const pid_t parent = getpid();

  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    // Ranks must not outlive the benchmark that started them. (This ties
    // them to the forking thread, which waits for them in this call.)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (!tools::pin_to(cpus)) {
      (void)!write(err[1], pin_msg.data(), pin_msg.size());
      _exit(126);
    }
    if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) {
      (void)!write(err[1], setns_msg.data(), setns_msg.size());
      _exit(126);
    }
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execv(cargv[0], cargv.data());
    (void)!write(2, exec_msg.data(), exec_msg.size());
    _exit(127);
  }
  const int fork_errno = errno;
  close(out[1]);
  close(err[1]);
  if (devnull >= 0) close(devnull);
  if (pid_ < 0) {
    close(out[0]);
    close(err[0]);
    reaped_ = true;
    errno = fork_errno;
    return fail(error, "fork");
  }
  setpgid(pid_, pid_);  // also here: kill_group may run before the child's own call
  out_fd_ = out[0];
  err_fd_ = err[0];
  return true;
}

void Child::kill_group(int sig) {
  if (pid_ <= 0 || reaped_) return;
  if (kill(-pid_, sig) != 0) kill(pid_, sig);
}

void Child::reap() {
  if (reaped_ || pid_ <= 0) return;
  if (waitpid(pid_, &status_, WNOHANG) == pid_) {
    reaped_ = true;
    reaped_at_ = Clock::now();
  }
}

bool Child::done() const {
  return reaped_ && ((out_fd_ < 0 && err_fd_ < 0) || Clock::now() > reaped_at_ + kReapGrace);
}

bool Child::failed() const { return reaped_ && !(WIFEXITED(status_) && WEXITSTATUS(status_) == 0); }

void Child::add_fds(std::vector<pollfd>* fds, std::vector<std::pair<Child*, int*>>* owners) {
  for (int* fd : {&out_fd_, &err_fd_}) {
    if (*fd < 0) continue;
    fds->push_back(pollfd{*fd, POLLIN, 0});
    owners->push_back({this, fd});
  }
}

void Child::read_ready(int* fd) {
  char buf[65536];
  ssize_t n = read(*fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    close(*fd);
    *fd = -1;
    return;
  }
  std::string& dst = fd == &out_fd_ ? out_ : err_;
  dst.append(buf, static_cast<size_t>(n));
  if (fd == &err_fd_ && err_.size() > 2 * kStderrKeep) err_.erase(0, err_.size() - kStderrKeep);
}

std::string Child::report() const {
  std::string s = label_ + ": " + (reaped_ ? describe_status(status_) : "still running");
  std::string tail = err_.size() > 2000 ? "..." + err_.substr(err_.size() - 2000) : err_;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  if (!tail.empty()) s += ": " + tail;
  return s;
}

bool Child::fail(std::string* error, const char* what) {
  *error = label_ + ": " + what + ": " + errno_text(errno);
  return false;
}

void pump(const std::vector<Child*>& children, int wait_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, int*>> owners;
  for (Child* c : children) c->add_fds(&fds, &owners);
  if (poll(fds.data(), fds.size(), wait_ms) > 0) {
    for (size_t i = 0; i < fds.size(); i++) {
      if (fds[i].revents) owners[i].first->read_ready(owners[i].second);
    }
  }
  for (Child* c : children) c->reap();
}

void stop_all(const std::vector<Child*>& children) {
  for (Child* c : children) c->kill_group(SIGTERM);
  for (auto t = Clock::now() + kTermGrace; Clock::now() < t;) {
    pump(children, 50);
    if (std::all_of(children.begin(), children.end(), [](Child* c) { return c->done(); })) break;
  }
  for (Child* c : children) c->kill_group(SIGKILL);
}

std::string wait_all(const std::vector<Child*>& children, Clock::time_point deadline,
                     const std::string& what, int timeout_s) {
  for (;;) {
    pump(children, 50);
    bool all_done = true;
    for (Child* c : children) {
      if (c->failed()) {
        // Give the others a moment to print their side of the failure.
        for (auto t = Clock::now() + std::chrono::milliseconds(300); Clock::now() < t;)
          pump(children, 50);
        std::string e = what + " failed: " + c->report();
        for (Child* o : children) {
          if (o != c && o->failed()) e += "; " + o->report();
        }
        // The rest would only wait for the failed one until their timeout.
        for (Child* o : children) o->kill_group(SIGKILL);
        for (auto t = Clock::now() + kTermGrace; Clock::now() < t;) {
          pump(children, 50);
          if (std::all_of(children.begin(), children.end(), [](Child* o) { return o->done(); }))
            break;
        }
        return e;
      }
      all_done = all_done && c->done();
    }
    if (all_done) return "";
    if (Clock::now() > deadline) break;
  }
  std::string e = what + " timed out after " + std::to_string(timeout_s) + " s";
  for (Child* c : children) {
    if (!c->done()) e += "; " + c->report();
  }
  stop_all(children);
  return e;
}

}  // namespace gsync::peers
