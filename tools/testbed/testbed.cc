// SPDX-License-Identifier: Apache-2.0
#include "tools/testbed/testbed.h"

#include <fcntl.h>
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

std::atomic<int> g_seq{0};

// ---------------------------------------------------------------------------
// Small helpers.

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

  if (Status st = choose_mode(o, sizes); !st) return st;
  return plan_hosts(o, sizes, total);
}

// Namespaces when we can make them, else loopback; and what needs
// namespaces (af_packet, shaped uplinks) refused without them.
Status Testbed::choose_mode(const Options& o, const std::vector<int>& sizes) {
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
  return Status::ok();
}

// Every host's identity: id, rack, address and port, folder and sockets,
// CPUs.
Status Testbed::plan_hosts(const Options& o, const std::vector<int>& sizes, int total) {
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
