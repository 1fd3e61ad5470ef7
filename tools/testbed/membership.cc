// SPDX-License-Identifier: Apache-2.0
//
// The bed's membership: a cluster file, or a real etcd that the daemons
// register in (Options::etcd), and hosts that join and leave while the bed
// runs (add_host, remove_host).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "tools/testbed/etcd.h"
#include "tools/testbed/probes.h"
#include "tools/testbed/testbed.h"

namespace gsync::testbed {

std::vector<std::string> Testbed::membership_args(int h) const {
  if (!options_.etcd) return {"--cluster", cluster_file_};
  const auto& host = hosts_.at(size_t(h));
  return {"--etcd",         etcd_endpoint(),
          "--cluster-name", name_,
          "--address",      host.address,
          "--port",         std::to_string(host.port),
          "--rack",         host.rack,
          "--etcd-lease-ttl-s", std::to_string(options_.etcd_lease_ttl_s)};
}

Status Testbed::start_etcd() {
  const int n = options_.etcd_members;
  if (n != 1 && n != 3 && n != 5)
    return {GSYNC_ERR_INVALID, "testbed: etcd_members " + std::to_string(n) +
                                   ": 1, or a cluster of 3 or 5"};
  std::string dir = dir_ + "/etcd";
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return {GSYNC_ERR_INTERNAL, "mkdir " + dir + ": " + strerror(errno)};
  // Not the hosts' ports (picked free before, not yet bound).
  std::set<uint16_t> taken;
  for (const Host& x : hosts_) taken.insert(x.port);
  Status st;
  if (n == 1) {
    etcd_.push_back(std::make_unique<EtcdServer>());
    st = etcd_[0]->start(dir, &taken);
  } else {
    st = EtcdServer::start_cluster(dir, n, &taken, &etcd_);
  }
  if (!st) return {st.code(), "testbed: etcd: " + st.message()};
  return Status::ok();
}

std::string Testbed::etcd_endpoint() const {
  std::string out;
  for (const auto& m : etcd_) out += (out.empty() ? "" : ",") + m->endpoint();
  return out;
}

Status Testbed::add_host(int rack, int* h) {
  if (!options_.etcd)
    return {GSYNC_ERR_INVALID, "testbed: add_host needs membership on etcd (Options::etcd); a "
                               "cluster file is fixed when the daemons start"};
  if (rack < 1 || rack > racks_ + 1)
    return {GSYNC_ERR_INVALID, "testbed: rack " + std::to_string(rack) + " is neither one of the " +
                                   std::to_string(racks_) + " racks nor the next"};
  std::set<uint16_t> taken;
  for (const Host& x : hosts_) taken.insert(x.port);
  for (const auto& m : etcd_) taken.insert({m->client_port(), m->peer_port()});
  std::vector<uint16_t> port;
  unsigned seed = static_cast<unsigned>(getpid()) * 31u + static_cast<unsigned>(hosts_.size());
  if (Status st = pick_loopback_ports(1, seed, &taken, &port); !st) return st;
  Host x;
  x.id = "h" + std::to_string(hosts_.size() + 1);
  x.rack = "r" + std::to_string(rack);
  x.rack_index = rack;
  x.address = "127.0.0.1";
  x.port = port[0];
  x.dir = dir_ + "/" + x.id;
  x.socket = x.dir + "/gsyncd.sock";
  x.admin_socket = x.dir + "/admin.sock";
  x.log_path = x.dir + "/gsyncd.log";
  if (mkdir(x.dir.c_str(), 0755) != 0)
    return {GSYNC_ERR_INTERNAL, "mkdir " + x.dir + ": " + strerror(errno)};
  racks_ = std::max(racks_, rack);
  hosts_.push_back(std::move(x));
  *h = hosts() - 1;
  if (Status st = launch_daemon(*h); !st) return st;
  return wait_ready({*h});
}

void Testbed::remove_host(int h, int sig) {
  Host& host = hosts_.at(size_t(h));
  if (sig == SIGKILL || host.pid <= 0) {
    kill_daemon(h, SIGKILL);
    return;
  }
  // A clean stop: the daemon revokes its lease on the way out. Bounded:
  // one that does not stop is killed.
  ::kill(host.pid, sig);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int status;
  while (waitpid(host.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill_daemon(h, SIGKILL);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  host.pid = -1;
  wait_port_released(h);
}

}  // namespace gsync::testbed
