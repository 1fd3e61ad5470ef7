// SPDX-License-Identifier: Apache-2.0
//
// A test bed's daemons (testbed.h): each host's gsyncd command line,
// started inside its namespace and on its CPUs, waited for until it
// listens, killed and started again; and other programs started in a host.
// The network they run on is made in testbed.cc.
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "tools/common/procs.h"
#include "tools/testbed/commands.h"
#include "tools/testbed/probes.h"
#include "tools/testbed/testbed.h"

namespace gsync::testbed {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kLogTail = 4000;
constexpr int kPortReleaseS = 5;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "[...]" + s.substr(s.size() - n);
}

// Whether pid runs (exists and is not a zombie), for a process that is not
// our child: a forked rank or test child holds a copy of the bed, and
// waitpid() on the daemons fails there with ECHILD.
bool running_not_child(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

std::vector<std::string> Testbed::daemon_command(int h) const {
  const Host& host = hosts_.at(static_cast<size_t>(h));
  std::vector<std::string> argv = {gsyncd_, "--socket", host.socket, "--admin-socket",
                                   host.admin_socket};
  std::vector<std::string> m = membership_args(h);
  argv.insert(argv.end(), m.begin(), m.end());
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--host-id", host.id},
                                    {"--log-level", options_.log_level},
                                    {"--cluster-key", key_file_},
                                    // Each host's state, in its own folder.
                                    {"--tuning-table", host.dir + "/tuning.json"}})
    argv.insert(argv.end(), {flag, value});
  std::vector<std::string> d = dpdk_args(h);
  argv.insert(argv.end(), d.begin(), d.end());
  argv.insert(argv.end(), options_.daemon_args.begin(), options_.daemon_args.end());
  return argv;
}

// DPDK's virtual devices (../shared/research/probe-infra.md, section 2):
// no hugepages, no PCI; af_packet needs 4096 frames per ring or the
// receiver loses most frames; memif: the first host of a rack serves.
std::vector<std::string> Testbed::dpdk_args(int h) const {
  if (options_.dpdk.empty()) return {};
  const Host& host = hosts_.at(static_cast<size_t>(h));
  std::string vdev;
  if (options_.dpdk == "af_packet") {
    vdev = "net_af_packet0,iface=eth0,framecnt=4096,qdisc_bypass=1";
  } else {
    vdev = "net_memif0,role=" + std::string(memif_client(h) ? "client" : "server") + ",socket=" + dir_ +
           "/memif-rack" + std::to_string(host.rack_index) + ".sock";
    // A frame's headers (78 bytes with Ethernet's) and the payload in one
    // buffer, rounded up to a whole KiB (both ends the same).
    if (options_.dpdk_payload > 1440)
      vdev += ",bsize=" + std::to_string((options_.dpdk_payload + 78 + 1023) / 1024 * 1024);
  }
  std::string eal = "--no-huge --no-pci -m 128 --log-level=lib.eal:error";
  if (options_.memif_zero_copy && memif_client(h)) {
    vdev += ",zero-copy=yes";
    eal += " --single-file-segments";
  }
  std::vector<std::string> args{"--transport", "dpdk", "--dpdk-eal-args", eal + " --vdev=" + vdev};
  if (options_.dpdk_payload != 0)
    args.insert(args.end(), {"--dpdk-payload", std::to_string(options_.dpdk_payload)});
  return args;
}

// fork + setns + execv rather than `ip netns exec`: the pid we get is the
// daemon's, and the daemon keeps our mount namespace (ip netns exec would
// remount /sys, which a daemon that only uses sockets does not need).
Status Testbed::launch_daemon(int h) {
  Host& host = hosts_.at(static_cast<size_t>(h));
  std::vector<std::string> args = daemon_command(h);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (host.started_once ? O_APPEND : O_TRUNC);
  int log_fd = open(host.log_path.c_str(), flags, 0644);
  if (log_fd < 0) return {GSYNC_ERR_INTERNAL, "open " + host.log_path + ": " + strerror(errno)};
  if (host.started_once) {
    std::string mark = "--- testbed: restarting " + host.id + " ---\n";
    [[maybe_unused]] ssize_t n = write(log_fd, mark.data(), mark.size());
  }
  int ns_fd = -1;
  if (!host.netns.empty()) {
    std::string path = "/run/netns/" + host.netns;
    ns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0) {
      close(log_fd);
      return {GSYNC_ERR_INTERNAL, "open " + path + ": " + strerror(errno)};
    }
  }
  pid_t parent = getpid();
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec: the parent may have threads.
    // Own process group: a Ctrl-C meant for gsync-testbed must not reach the
    // daemons before it tears them down in order. PDEATHSIG: a crashed owner
    // leaves no daemons behind.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (!tools::pin_to(host.cpus)) {
      const char msg[] = "testbed: sched_setaffinity to the host's CPUs failed\n";
      [[maybe_unused]] ssize_t n = write(log_fd, msg, sizeof msg - 1);
      _exit(126);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (ns_fd >= 0 && setns(ns_fd, CLONE_NEWNET) != 0) {
      const char msg[] = "testbed: setns into the host's network namespace failed\n";
      [[maybe_unused]] ssize_t n = write(2, msg, sizeof msg - 1);
      _exit(126);
    }
    execv(argv[0], argv.data());
    const char msg[] = "testbed: execv of gsyncd failed\n";
    [[maybe_unused]] ssize_t n = write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  int fork_errno = errno;
  close(log_fd);
  if (ns_fd >= 0) close(ns_fd);
  if (pid < 0) return {GSYNC_ERR_INTERNAL, std::string("fork: ") + strerror(fork_errno)};
  host.pid = pid;
  host.started_once = true;
  return Status::ok();
}

Status Testbed::wait_ready(const std::vector<int>& which) {
  auto deadline = Clock::now() + std::chrono::seconds(options_.start_timeout_s);
  std::vector<int> waiting = which;
  while (!waiting.empty()) {
    for (auto it = waiting.begin(); it != waiting.end();) {
      const Host& host = hosts_.at(static_cast<size_t>(*it));
      pid_t pid = host.pid;
      int status = 0;
      if (pid <= 0 || waitpid(pid, &status, WNOHANG) == pid) {
        host.pid = -1;
        return {GSYNC_ERR_CONNECT,
                "gsyncd of " + host.id + " " + describe_status(status) +
                    " before it was ready; command: " + join(daemon_command(*it)) + "; log " +
                    host.log_path + ":\n" + tail(read_file(host.log_path), kLogTail)};
      }
      bool ready = unix_listening(pid, host.socket) && unix_listening(pid, host.admin_socket) &&
                   (!options_.wait_tcp_listen || listens_on(host.netns, host.port));
      it = ready ? waiting.erase(it) : it + 1;
    }
    if (waiting.empty()) break;
    if (Clock::now() >= deadline) {
      const Host& host = hosts_.at(static_cast<size_t>(waiting.front()));
      pid_t pid = host.pid;
      std::string what = !unix_listening(pid, host.socket) ? "its client socket " + host.socket
                         : !unix_listening(pid, host.admin_socket)
                             ? "its admin socket " + host.admin_socket
                             : "TCP " + host.address + ":" + std::to_string(host.port) +
                                   " (no socket listens on the port; see Options::wait_tcp_listen)";
      return {GSYNC_ERR_CONNECT,
              "gsyncd of " + host.id + " (pid " + std::to_string(host.pid) + ") not ready after " +
                  std::to_string(options_.start_timeout_s) + " s: not listening on " + what +
                  "; command: " + join(daemon_command(waiting.front())) + "; log " + host.log_path +
                  ":\n" + tail(read_file(host.log_path), kLogTail)};
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return Status::ok();
}

bool Testbed::daemon_alive(int h) const {
  const Host& host = hosts_.at(static_cast<size_t>(h));
  if (host.pid <= 0) return false;
  int status;
  pid_t r = waitpid(host.pid, &status, WNOHANG);
  if (r == 0) return true;
  if (r < 0 && errno == ECHILD) return running_not_child(host.pid);
  host.pid = -1;
  return false;
}

std::string Testbed::daemon_log(int h) const { return read_file(hosts_.at(h).log_path); }

// A reaped gsyncd can still hold its TCP port for a few milliseconds: its
// io_uring instance is torn down by a kernel worker after the process is
// gone, and requests still in flight keep the listening socket open until
// then (measured here: bind() of the port failed 1-3 ms after waitpid
// returned). A daemon started at once on the same port would fail with
// EADDRINUSE, so wait until nothing listens on it.
bool Testbed::wait_port_released(int h) const {
  const Host& host = hosts_.at(static_cast<size_t>(h));
  auto deadline = Clock::now() + std::chrono::seconds(kPortReleaseS);
  while (listens_on(host.netns, host.port)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

void Testbed::kill_daemon(int h, int sig) {
  Host& host = hosts_.at(static_cast<size_t>(h));
  if (host.pid <= 0) return;
  kill(host.pid, sig);
  if (sig == SIGKILL) {
    int status;
    pid_t r;
    while ((r = waitpid(host.pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (r < 0 && errno == ECHILD) {
      // Called in a forked child: the daemon is a sibling; wait it out.
      auto deadline = Clock::now() + std::chrono::seconds(kPortReleaseS);
      while (running_not_child(host.pid) && Clock::now() < deadline)
        std::this_thread::sleep_for(milliseconds(1));
    }
    host.pid = -1;
    wait_port_released(h);
  }
}

Status Testbed::start_daemon(int h) {
  if (h < 0 || h >= hosts()) return {GSYNC_ERR_INVALID, "testbed: no host " + std::to_string(h)};
  if (gsyncd_.empty())
    return {GSYNC_ERR_INVALID, "testbed: created with start_daemons=false, no gsyncd configured"};
  if (daemon_alive(h))
    return {GSYNC_ERR_INVALID, "testbed: gsyncd of " + host_id(h) + " is already running (pid " +
                                   std::to_string(daemon_pid(h)) + ")"};
  if (!wait_port_released(h))
    return {GSYNC_ERR_CONNECT, "testbed: port " + address(h) + ":" + std::to_string(port(h)) +
                                   " of " + host_id(h) + " is still listened on " +
                                   std::to_string(kPortReleaseS) + " s after its daemon exited"};
  if (Status st = launch_daemon(h); !st) return st;
  return wait_ready({h});
}

pid_t Testbed::spawn_in_host(int h, std::function<int()> fn) {
  int ns_fd = -1;
  if (namespaces()) {
    std::string path = "/run/netns/" + netns(h);
    ns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0) return -1;
  }
  pid_t parent = getpid();
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (!tools::pin_to(cpus(h))) {
      std::fprintf(stderr, "testbed: pin to CPUs %s: %s\n", tools::cpu_list(cpus(h)).c_str(),
                   strerror(errno));
      _exit(126);
    }
    if (ns_fd >= 0 && setns(ns_fd, CLONE_NEWNET) != 0) {
      std::fprintf(stderr, "testbed: setns into %s: %s\n", netns(h).c_str(), strerror(errno));
      _exit(126);
    }
    if (ns_fd >= 0) close(ns_fd);
    _exit(fn());
  }
  if (ns_fd >= 0) close(ns_fd);
  return pid;
}

}  // namespace gsync::testbed
