// SPDX-License-Identifier: Apache-2.0
#include "tools/testbed/testbed.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "daemon/cluster/cluster_key.h"
#include "tools/common/procs.h"
#include "tools/testbed/commands.h"
#include "tools/testbed/etcd.h"
#include "tools/testbed/probes.h"

namespace gsync::testbed {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Every name a bed makes starts with kPrefix-<owner pid>-<seq>; cleanup_stale
// reads the owner pid back out of it.
constexpr const char* kPrefix = "gtb";
constexpr const char* kSubnet = "10.77";
constexpr int kStopGraceMs = 5000;
// A loaded machine may drop a SYN or two: the probe tries again until this.
constexpr int kProbeTimeoutMs = 20000;
constexpr size_t kLogTail = 4000;
constexpr int kPortReleaseS = 5;

std::atomic<int> g_seq{0};

// ---------------------------------------------------------------------------
// Small helpers.

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "[...]" + s.substr(s.size() - n);
}

// The daemons are exec'd with execv (no PATH search after fork), so the path
// is resolved here, and a missing binary fails before any network is built.
std::string resolve_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string c = (dir.empty() ? "." : dir) + "/" + name;
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

bool pid_exists(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

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

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "stopped";
}

// Beds alive in this process, torn down at exit() if their owners did not.
std::mutex g_live_mu;
std::set<Testbed*>* g_live = nullptr;

void teardown_live_beds() {
  std::vector<Testbed*> beds;
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    if (g_live) beds.assign(g_live->begin(), g_live->end());
  }
  for (Testbed* b : beds) b->teardown();
}

void register_bed(Testbed* b) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  if (!g_live) {
    g_live = new std::set<Testbed*>();  // never freed: atexit may run after statics die
    std::atexit(teardown_live_beds);
  }
  g_live->insert(b);
}

void unregister_bed(Testbed* b) {
  std::lock_guard<std::mutex> lock(g_live_mu);
  if (g_live) g_live->erase(b);
}

}  // namespace

// ---------------------------------------------------------------------------

bool gsyncd_has_cluster_flag(const std::string& gsyncd) {
  CommandResult r = run_command({gsyncd, "--help"});
  return (r.out + r.err).find("--cluster") != std::string::npos;
}

Status Testbed::create(const Options& options, std::unique_ptr<Testbed>* out) {
  std::unique_ptr<Testbed> bed(new Testbed());
  bed->owner_pid_ = getpid();
  register_bed(bed.get());
  Status st = bed->build(options);
  if (!st) return st;  // ~Testbed() removes whatever build() made
  *out = std::move(bed);
  return Status::ok();
}

Testbed::~Testbed() { teardown(); }

Status Testbed::build(const Options& options) {
  options_ = options;
  if (Status st = plan(options); !st) return st;
  if (namespaces()) {
    if (Status st = fit_neighbour_table(); !st) return st;
    if (Status st = build_network(); !st) return st;
    if (Status st = verify_network(); !st) return st;
  }
  if (Status st = write_cluster_file(); !st) return st;
  if (options_.etcd)
    if (Status st = start_etcd(); !st) return st;
  // A key per bed, as a real cluster has one: every daemon proves it to
  // its peers, and a bed's daemons never accept another bed's.
  if (Status st = create_cluster_key(key_file_); !st)
    return {st.code(), "testbed: " + st.message()};
  if (!options_.start_daemons) return Status::ok();
  std::vector<int> all, later;
  for (int h = 0; h < hosts(); h++) {
    // A memif client connects only when it starts (DPDK 22.11 does not try
    // again): the server of each rack first, up, then the clients.
    if (memif_client(h)) {
      later.push_back(h);
      continue;
    }
    if (Status st = launch_daemon(h); !st) return st;
    all.push_back(h);
  }
  if (!later.empty()) {
    if (Status st = wait_ready(all); !st) return st;
    for (int h : later)
      if (Status st = launch_daemon(h); !st) return st;
    if (Status st = wait_ready(later); !st) return st;
    all.insert(all.end(), later.begin(), later.end());
    return wait_links(all);
  }
  if (Status st = wait_ready(all); !st) return st;
  return wait_links(all);
}

bool Testbed::memif_client(int h) const {
  return options_.dpdk == "memif" && h > 0 &&
         hosts_.at(size_t(h - 1)).rack_index == hosts_.at(size_t(h)).rack_index;
}

// Sizes, names, the directory, the mode, and every host's identity.
Status Testbed::plan(const Options& o) {
  std::vector<int> sizes = o.rack_sizes;
  if (sizes.empty()) {
    if (o.hosts < 1 || o.racks < 1 || o.racks > o.hosts)
      return {GSYNC_ERR_INVALID, "testbed: need 1 <= racks <= hosts, got hosts=" +
                                     std::to_string(o.hosts) + " racks=" + std::to_string(o.racks)};
    for (int r = 0; r < o.racks; r++) sizes.push_back(o.hosts / o.racks + (r < o.hosts % o.racks));
  }
  int total = 0;
  for (int s : sizes) {
    if (s < 1) return {GSYNC_ERR_INVALID, "testbed: every rack needs at least one host"};
    total += s;
  }
  // Addresses are 10.77.<rack>.<host>, so both fit in one byte.
  if (total > 254 || sizes.size() > 254)
    return {GSYNC_ERR_INVALID, "testbed: at most 254 hosts and 254 racks"};
  racks_ = static_cast<int>(sizes.size());

  int seq = ++g_seq;
  name_ = std::string(kPrefix) + "-" + std::to_string(getpid()) + "-" + std::to_string(seq);
  std::string tmpl = "/tmp/" + name_ + ".XXXXXX";
  if (!mkdtemp(tmpl.data()))
    return {GSYNC_ERR_INTERNAL, "mkdtemp " + tmpl + ": " + strerror(errno)};
  dir_ = tmpl;
  chmod(dir_.c_str(), 0755);  // clients of other uids reach the sockets inside
  cluster_file_ = dir_ + "/cluster.toml";
  key_file_ = dir_ + "/cluster.key";

  if (o.start_daemons) {
    std::string want = o.gsyncd.empty() ? tools::gsyncd_path() : o.gsyncd;
    gsyncd_ = resolve_executable(want);
    if (gsyncd_.empty())
      return {GSYNC_ERR_INVALID, "testbed: gsyncd '" + want + "' not found or not executable"};
  }

  // The mode: namespaces when we can make them, else loopback.
  if (o.loopback || o.etcd) {
    loopback_reason_ = o.loopback ? "loopback asked for" : "an etcd bed runs on loopback";
  } else if (geteuid() != 0) {
    loopback_reason_ = "not root (euid " + std::to_string(geteuid()) + ")";
  } else {
    std::string fab = name_ + "-fab";
    Status st = must_run({"ip", "netns", "add", fab});
    if (st) {
      fabric_netns_ = fab;
      made_netns_.push_back(fab);
    } else {
      loopback_reason_ = "network namespaces unavailable: " + st.message();
    }
  }
  if (!o.dpdk.empty()) {
    if (o.dpdk != "af_packet" && o.dpdk != "memif")
      return {GSYNC_ERR_INVALID, "testbed: dpdk must be af_packet or memif, got " + o.dpdk};
    if (o.dpdk == "af_packet" && !namespaces())
      return {GSYNC_ERR_INVALID, "testbed: dpdk=af_packet needs network namespaces (" +
                                     loopback_reason_ + "); memif runs without"};
    if (o.dpdk == "memif")
      for (size_t r = 0; r < sizes.size(); r++)
        if (sizes[r] != 2)
          return {GSYNC_ERR_INVALID, "testbed: dpdk=memif links the two hosts of each rack; rack " +
                                         std::to_string(r + 1) + " has " + std::to_string(sizes[r])};
  }
  uplink_mbit_ = o.uplink_mbit;
  if (uplink_mbit_ > 0 && !namespaces())
    return {GSYNC_ERR_INVALID, "testbed: uplink_mbit=" + std::to_string(uplink_mbit_) +
                                   " needs network namespaces, but the bed would be loopback (" +
                                   loopback_reason_ + ")"};

  std::vector<uint16_t> ports;
  if (!namespaces()) {
    std::set<uint16_t> taken;
    // A pid- and bed-dependent start, so concurrent beds rarely probe the same ports.
    unsigned seed =
        static_cast<unsigned>(getpid()) * 7919u + static_cast<unsigned>(g_seq.load()) * 104729u;
    if (Status st = pick_loopback_ports(total, seed, &taken, &ports); !st) return st;
  }
  const std::vector<int> cpus = o.pin ? tools::allowed_cpus() : std::vector<int>{};
  int i = 0;
  for (int r = 0; r < racks_; r++) {
    for (int k = 0; k < sizes[static_cast<size_t>(r)]; k++, i++) {
      Host h;
      h.id = "h" + std::to_string(i + 1);
      h.rack = "r" + std::to_string(r + 1);
      h.rack_index = r + 1;
      if (namespaces()) {
        h.address =
            std::string(kSubnet) + "." + std::to_string(r + 1) + "." + std::to_string(i + 1);
        h.port = o.port;
        h.netns = name_ + "-" + h.id;
      } else {
        h.address = "127.0.0.1";
        h.port = ports[static_cast<size_t>(i)];
      }
      h.dir = dir_ + "/" + h.id;
      h.socket = h.dir + "/gsyncd.sock";
      h.admin_socket = h.dir + "/admin.sock";
      h.log_path = h.dir + "/gsyncd.log";
      if (o.pin) h.cpus = tools::cpu_share(cpus, total, i);
      if (mkdir(h.dir.c_str(), 0755) != 0)
        return {GSYNC_ERR_INTERNAL, "mkdir " + h.dir + ": " + strerror(errno)};
      hosts_.push_back(std::move(h));
    }
  }
  return Status::ok();
}

// The commands of docs/testbed.md. Interface names need no bed prefix: every
// link is created directly inside the bed's own namespaces (ip link add ...
// netns X ... peer ... netns Y), so nothing ever appears in the root
// namespace and two beds cannot collide.
Status Testbed::build_network() {
  const std::string& fab = fabric_netns_;
  std::vector<std::vector<std::string>> cmds;
  auto in_fab = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"ip", "-n", fab});
    cmds.push_back(std::move(args));
  };
  in_fab({"link", "set", "lo", "up"});
  in_fab({"link", "add", "core", "up", "type", "bridge"});
  for (int r = 1; r <= racks_; r++) {
    std::string br = "br" + std::to_string(r), up = "up" + std::to_string(r),
                upc = "upc" + std::to_string(r);
    in_fab({"link", "add", br, "up", "type", "bridge"});
    in_fab({"link", "add", up, "type", "veth", "peer", "name", upc});
    in_fab({"link", "set", up, "master", br, "up"});
    in_fab({"link", "set", upc, "master", "core", "up"});
    if (uplink_mbit_ > 0) {
      // tbf on the egress of both ends: rack->core and core->rack each get
      // the rate (shared/research/probe-infra.md section 4: 957 Mbit/s
      // measured through a 1 Gbit/s tbf with these burst/latency values).
      for (const std::string& dev : {up, upc})
        cmds.push_back({"tc", "-n", fab, "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                        std::to_string(uplink_mbit_) + "mbit", "burst", "256kb", "latency",
                        "10ms"});
    }
  }
  for (auto& c : cmds)
    if (Status st = must_run(c); !st) return st;

  for (int i = 0; i < hosts(); i++) {
    const Host& h = hosts_[static_cast<size_t>(i)];
    if (Status st = must_run({"ip", "netns", "add", h.netns}); !st) return st;
    made_netns_.push_back(h.netns);
    std::string port = "p" + std::to_string(i + 1);
    std::vector<std::vector<std::string>> host_cmds = {
        {"ip", "-n", h.netns, "link", "set", "lo", "up"},
        {"ip", "link", "add", "eth0", "netns", h.netns, "type", "veth", "peer", "name", port,
         "netns", fab},
        {"ip", "-n", fab, "link", "set", port, "master", "br" + std::to_string(h.rack_index), "up"},
        {"ip", "-n", h.netns, "addr", "add", h.address + "/16", "dev", "eth0"},
        {"ip", "-n", h.netns, "link", "set", "eth0", "up"},
    };
    for (auto& c : host_cmds)
      if (Status st = must_run(c); !st) return st;
  }
  return Status::ok();
}

// A TCP probe from host 1 to every other host, before any daemon runs: a
// refused connection proves the path (bridges, uplinks, addresses) works.
// Host 1 to all others crosses every host link and every rack's uplink.
Status Testbed::verify_network() {
  if (hosts() < 2) return Status::ok();
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0)
    return {GSYNC_ERR_INTERNAL, std::string("pipe: ") + strerror(errno)};
  pid_t child = spawn_in_host(0, [&] {
    close(p[0]);
    std::string report;
    for (int j = 1; j < hosts(); j++) {
      std::string why = tcp_probe(address(j), port(j), kProbeTimeoutMs);
      if (!why.empty())
        report += "TCP probe from " + host_id(0) + " (netns " + netns(0) + ") to " + host_id(j) +
                  " at " + address(j) + ":" + std::to_string(port(j)) + " failed: " + why + "\n";
    }
    [[maybe_unused]] ssize_t n = write(p[1], report.data(), report.size());
    return report.empty() ? 0 : 1;
  });
  close(p[1]);
  if (child < 0) {
    close(p[0]);
    return {GSYNC_ERR_INTERNAL, std::string("fork: ") + strerror(errno)};
  }
  std::string report;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) report.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
  if (report.empty()) report = "the probe process " + describe_status(status);
  return {GSYNC_ERR_CONNECT, trim(report)};
}

Status Testbed::write_cluster_file() {
  std::ostringstream t;
  t << "# Written by gsync-testbed (bed " << name_ << "); one [[hosts]] per host, in order.\n";
  t << "name = \"" << name_ << "\"\n";
  for (const Host& h : hosts_) {
    t << "\n[[hosts]]\n";
    t << "id = \"" << h.id << "\"\n";
    t << "address = \"" << h.address << "\"\n";
    t << "port = " << h.port << "\n";
    t << "rack = \"" << h.rack << "\"\n";
  }
  std::ofstream out(cluster_file_);
  out << t.str();
  out.close();
  if (!out) return {GSYNC_ERR_INTERNAL, "cannot write " + cluster_file_};
  return Status::ok();
}

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

void Testbed::teardown() {
  // A forked child (spawn_in_host, run_ranks) inherits the bed; only the
  // process that made it may take it down.
  if (torn_down_ || getpid() != owner_pid_) return;
  torn_down_ = true;
  unregister_bed(this);

  // SIGTERM all at once so they shut down in parallel, then SIGKILL stragglers.
  std::vector<Host*> running;
  for (Host& h : hosts_)
    if (h.pid > 0 && kill(h.pid, SIGTERM) == 0) running.push_back(&h);
  auto deadline = Clock::now() + milliseconds(kStopGraceMs);
  while (!running.empty()) {
    for (auto it = running.begin(); it != running.end();) {
      int status;
      if (waitpid((*it)->pid, &status, WNOHANG) != 0) {
        (*it)->pid = -1;
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    if (running.empty()) break;
    if (Clock::now() >= deadline) {
      for (Host* h : running) {
        std::fprintf(stderr, "testbed: gsyncd of %s (pid %d) ignored SIGTERM for %d ms; SIGKILL\n",
                     h->id.c_str(), h->pid, kStopGraceMs);
        kill(h->pid, SIGKILL);
        int status;
        waitpid(h->pid, &status, 0);
        h->pid = -1;
      }
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }

  etcd_.clear();  // after the daemons: they revoke their leases on the way out
  // Hosts first, the fabric last: the reverse of creation.
  for (auto it = made_netns_.rbegin(); it != made_netns_.rend(); ++it)
    if (Status st = delete_netns(*it); !st)
      std::fprintf(stderr, "testbed: teardown: %s\n", st.message().c_str());
  made_netns_.clear();
  restore_neighbour_table();

  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    if (ec)
      std::fprintf(stderr, "testbed: teardown: rm -rf %s: %s\n", dir_.c_str(),
                   ec.message().c_str());
  }
}

Status Testbed::cleanup_stale(std::string* report) {
  static const std::regex kNetnsName(std::string("^") + kPrefix +
                                     "-([0-9]+)-[0-9]+-(fab|h[0-9]+)$");
  static const std::regex kDirName(std::string("^") + kPrefix + "-([0-9]+)-[0-9]+\\..+$");
  auto note = [&](const std::string& line) {
    if (report) *report += line + "\n";
  };
  auto owner_gone = [](const std::smatch& m) {
    pid_t pid = static_cast<pid_t>(std::stol(m[1].str()));
    return pid != getpid() && !pid_exists(pid);
  };
  Status result = Status::ok();
  if (geteuid() == 0) {
    CommandResult r = run_command({"ip", "netns", "list"});
    if (!r.spawn_error.empty() || r.exit_code != 0)
      return {GSYNC_ERR_INTERNAL, "ip netns list failed: " + trim(r.err + r.spawn_error)};
    // "name (id: 3)" per line; hosts before fabrics so each fabric goes last.
    std::vector<std::string> stale;
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line)) {
      std::string name = line.substr(0, line.find(' '));
      std::smatch m;
      if (std::regex_match(name, m, kNetnsName) && owner_gone(m)) stale.push_back(name);
    }
    std::stable_partition(stale.begin(), stale.end(), [](const std::string& n) {
      return n.size() < 4 || n.compare(n.size() - 4, 4, "-fab") != 0;
    });
    for (const auto& ns : stale) {
      Status st = delete_netns(ns);
      if (st) {
        note("deleted netns " + ns);
      } else {
        note("could not delete netns " + ns + ": " + st.message());
        result = st;
      }
    }
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/tmp", ec)) {
    std::string name = entry.path().filename().string();
    std::smatch m;
    if (!entry.is_directory(ec) || !std::regex_match(name, m, kDirName) || !owner_gone(m)) continue;
    std::error_code rm_ec;
    std::filesystem::remove_all(entry.path(), rm_ec);
    note(rm_ec ? "could not remove " + entry.path().string() + ": " + rm_ec.message()
               : "removed " + entry.path().string());
  }
  return result;
}

}  // namespace gsync::testbed
