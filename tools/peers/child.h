// SPDX-License-Identifier: Apache-2.0
//
// The programs a peer run starts (launch.h): each forked into its slot's
// network namespace, its output captured, its runtime bounded, and killed
// and reaped before the run returns. Internal to gsync_peers.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace gsync::peers {

using Clock = std::chrono::steady_clock;

std::string errno_text(int e);
// "exit 1", "signal 14 (Alarm clock: its --timeout ran out)".
std::string describe_status(int status);

// A /var/run/netns file, open across fork: the child enters it with
// setns(2) before exec, the parent closes its copy afterwards.
class NetnsFd {
 public:
  NetnsFd() = default;
  NetnsFd(const NetnsFd&) = delete;
  NetnsFd& operator=(const NetnsFd&) = delete;
  ~NetnsFd();
  // "" = stay in the caller's namespace (fd -1).
  bool open(const std::string& name, std::string* error);
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// One child program: its own process group (so that mpirun's ranks can be
// signalled with it), stdin from /dev/null, stdout and stderr captured. The
// destructor kills and reaps whatever is still there, so no early return
// leaves a process behind.
class Child {
 public:
  Child(std::string label, std::vector<std::string> argv)
      : label_(std::move(label)), argv_(std::move(argv)) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  // Forks and execs argv[0], inside the namespace netns_fd (-1 = the
  // caller's), confined to cpus (empty: any). Only async-signal-safe calls
  // between fork and exec: the caller may have threads.
  bool start(int netns_fd, std::string* error, const std::vector<int>& cpus = {});

  // Signals the child's whole process group; the leader is not reaped yet,
  // so the group id is still this child's own.
  void kill_group(int sig);
  void reap();

  // Exited, and its pipes drained (or held open only by a leftover
  // grandchild for longer than a grace period).
  bool done() const;
  bool failed() const;

  // Collects its pipe ends for poll(); read_ready consumes what poll found.
  void add_fds(std::vector<pollfd>* fds, std::vector<std::pair<Child*, int*>>* owners);
  void read_ready(int* fd);

  const std::string& label() const { return label_; }
  const std::string& out() const { return out_; }
  const std::vector<std::string>& argv() const { return argv_; }

  // "<label>: exit 1: <last stderr lines>"
  std::string report() const;

 private:
  bool fail(std::string* error, const char* what);

  std::string label_;
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  Clock::time_point reaped_at_;
  std::string out_, err_;
};

// Reads from every child's pipes for up to wait_ms and reaps those that exited.
void pump(const std::vector<Child*>& children, int wait_ms);
// Asks politely first (mpirun then stops its ranks), then kills.
void stop_all(const std::vector<Child*>& children);
// Runs until every child is done, one has failed (the others then cannot
// finish: a collective needs all ranks), or the deadline. Returns "" or the
// error, naming the failed child or those still running.
std::string wait_all(const std::vector<Child*>& children, Clock::time_point deadline,
                     const std::string& what, int timeout_s);

}  // namespace gsync::peers
