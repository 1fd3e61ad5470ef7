// SPDX-License-Identifier: Apache-2.0
//
// Real processes for the benchmark and the tests: a private gsyncd on
// sockets in a temporary directory, and one forked client process per rank
// that reports back to the parent through a pipe.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace gsync::tools {

// The gsyncd binary: $GSYNCD, else gsyncd beside this program or in the
// build tree's daemon/ folder, else "gsyncd" on PATH.
std::string gsyncd_path();

class DaemonProcess {
 public:
  // Starts gsyncd with extra_args and an optional TOML config text, and waits
  // until its client socket accepts connections.
  // run_as_uid != 0: the daemon runs as that uid (and gid), its directory
  // handed to it; the caller must be root.
  explicit DaemonProcess(std::vector<std::string> extra_args = {}, const std::string& toml = "",
                         const std::string& log_level = "debug", uid_t run_as_uid = 0,
                         gid_t run_as_gid = 0);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;

  const std::string& socket() const { return socket_; }
  const std::string& admin_socket() const { return admin_socket_; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  bool alive() const;
  // The daemon's log so far.
  std::string log() const;
  // SIGTERM and wait; returns the exit status (or -signal).
  int stop();

 private:
  std::string dir_, socket_, admin_socket_, log_path_;
  pid_t pid_ = -1;
};

// What a child rank returns to the parent: an exit code and free text.
struct ChildResult {
  int code = -1;        // exit code, or -signal when killed
  std::string output;   // everything the child wrote with report()
  pid_t pid = 0;
};

// In a child: text for the parent (ChildResult::output).
void report(const std::string& text);

// Forks one process per rank running fn(rank); fn's return value is the exit
// code. Waits for all, killing any still alive after timeout_s.
std::vector<ChildResult> run_ranks(int n, const std::function<int(int rank)>& fn,
                                   int timeout_s = 120);

// Forks one process running fn without waiting; for tests that kill it.
pid_t spawn(const std::function<int()>& fn);

// CPU shares, for test beds whose hosts should not run on each other's
// CPUs. The CPUs this process may run on, in order.
std::vector<int> allowed_cpus();
// Host h's share when `hosts` hosts split `cpus`: a contiguous block each
// when there are at least as many CPUs as hosts, else CPU h mod n alone.
std::vector<int> cpu_share(const std::vector<int>& cpus, int hosts, int h);
// Confines the calling thread, and what it forks or execs after, to cpus.
// Empty: no change. Only a system call, so fit for a child between fork
// and exec. False when the kernel refuses.
bool pin_to(const std::vector<int>& cpus);
// "0-3", "0,2", "" for none.
std::string cpu_list(const std::vector<int>& cpus);

// Every fd read to its end, all at once (poll), so a writer blocked on one
// full pipe cannot stall the others; the fds stay open. Output i is fds[i]'s.
std::vector<std::string> read_all_of(const std::vector<int>& fds);

// What a shell command prints on stdout ("" if it cannot run).
std::string run_command(const std::string& cmd);

// The admin socket's reply to one command.
std::string admin_query(const std::string& admin_socket, const std::string& command);

// The tests' one way to wait: on a condition, with a deadline. Checks pred
// every poll_ms until it holds (true) or timeout_ms has passed (false).
bool wait_until(const std::function<bool()>& pred, int timeout_ms = 10000, int poll_ms = 5);
// One byte from fd within timeout_ms; false on timeout, EOF or error. For a
// child's "I am ready" on a pipe: the parent closes its own write end
// first, so a child that dies says so (EOF) instead of hanging the test.
bool read_byte(int fd, int timeout_ms = 20000);

}  // namespace gsync::tools
