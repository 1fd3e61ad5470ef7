// SPDX-License-Identifier: Apache-2.0
//
// A multi-host test bed on one machine, for gsync-perf and the integration
// tests: N "hosts" in R "racks", each host a network namespace with its own
// address, the racks joined by uplinks that can be rate-limited with tbf, and
// one gsyncd per host started with a shared cluster file. Without root (or
// when namespaces cannot be made) it degrades to loopback: every host on
// 127.0.0.1 with its own port, no shaping.
//
// Topology in namespace mode (docs/testbed.md has the commands):
//
//   ns <bed>-h1: eth0 10.77.1.1/16 ==veth== p1 -+
//   ns <bed>-h2: eth0 10.77.1.2/16 ==veth== p2 -+- br1 - up1 ==veth== upc1 -+
//   ns <bed>-h3: eth0 10.77.2.3/16 ==veth== p3 -+                           +- core
//   ns <bed>-h4: eth0 10.77.2.4/16 ==veth== p4 -+- br2 - up2 ==veth== upc2 -+
//   (the bridges br*, core and the ports p*, up*, upc* live in ns <bed>-fab)
//
// One L2 subnet (10.77.0.0/16); with uplink_mbit > 0 both ends of every
// uplink veth get a tbf, so inter-rack traffic is capped in each direction
// and intra-rack traffic never touches a tbf.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::testbed {

struct Options {
  // Hosts spread over racks as evenly as possible (earlier racks get the
  // extra host). rack_sizes, when not empty, gives the hosts of each rack
  // instead and hosts/racks are ignored: {3, 1} is 4 hosts in 2 racks.
  int hosts = 4;
  int racks = 2;
  std::vector<int> rack_sizes;
  // Force loopback mode. It is also chosen when not root or when
  // `ip netns add` fails; loopback_reason() says why.
  bool loopback = false;
  // Rate of every rack's uplink in each direction (tbf), 0 = unshaped.
  // An error in loopback mode: there is no link to shape.
  uint32_t uplink_mbit = 0;
  // The gsyncd binary; empty = tools::gsyncd_path().
  std::string gsyncd;
  // Extra arguments for every daemon, after the testbed's own.
  std::vector<std::string> daemon_args;
  std::string log_level = "info";
  // false: build the network and write cluster.toml only (no daemons).
  bool start_daemons = true;
  // Also wait until each daemon listens on its TCP address:port (read from
  // /proc/<pid>/net/tcp{,6}, so nothing connects to the daemon to find out).
  bool wait_tcp_listen = true;
  // Also wait until every daemon's link to every other host is up
  // (gsyncctl peers); create() fails naming the links that are not.
  bool wait_links = true;
  // TCP port of every host in namespace mode (each has its own address).
  // Loopback mode picks distinct free ports below the ephemeral range.
  uint16_t port = 7700;
  // Bound on how long create()/start_daemon() wait for daemons to come up.
  int start_timeout_s = 20;
  // Give each host its own share of the CPUs this process may use (as
  // separate machines would have): its daemon, spawn_in_host children and
  // whatever calls tools::pin_to(cpus(h)) run only there. With fewer CPUs
  // than hosts, host h gets CPU h mod n alone. docs/testbed.md says what it
  // changes in the figures.
  bool pin = false;
  // The links inside a rack over DPDK ([cluster] transport = "dpdk",
  // docs/transport.md "The DPDK provider"), on virtual devices that need no
  // hugepages or NIC: "af_packet" (each host's eth0 in its namespace;
  // namespace mode only) or "memif" (a shared-memory link per rack between
  // its two hosts: every rack must have exactly two). "": the daemons'
  // default transport.
  std::string dpdk;
  // With dpdk: bytes of payload per frame ([dpdk] payload; 0: the port's
  // MTU's). Over memif, more than 1440 (jumbo frames) also sizes memif's
  // buffers to hold such a frame whole (its vdev's bsize).
  uint32_t dpdk_payload = 0;
  // With dpdk "memif": each rack's client in memif's zero-copy mode (its
  // packet buffers are the shared memory; the EAL then needs
  // --single-file-segments).
  bool memif_zero_copy = false;
  // Membership on etcd instead of a cluster file (docs/membership.md): the
  // bed starts a real etcd (one member, its own data dir and ports) and
  // every daemon registers there with a lease of this many seconds. Such a
  // bed runs on loopback (etcd listens on 127.0.0.1, out of reach of the
  // hosts' namespaces), and add_host / remove_host change it while it runs.
  bool etcd = false;
  uint32_t etcd_lease_ttl_s = 2;
  // etcd's members: 1, or a cluster of 3 or 5 (each its own data dir and
  // ports on loopback); every daemon is given all their endpoints.
  int etcd_members = 1;
};

class EtcdServer;

// Errors (Status): GSYNC_ERR_INVALID for options that cannot work,
// GSYNC_ERR_CONNECT when the network or a daemon does not come up,
// GSYNC_ERR_INTERNAL when a system command fails. The message is the contract:
// it names the command line that failed and its stderr, or the host, its
// daemon's command line and the tail of its log.
class Testbed {
 public:
  // Builds the network, writes cluster.toml and a new cluster key, verifies
  // host-to-host TCP reachability, starts one gsyncd per host and waits
  // until each daemon's client and admin sockets accept connections. On
  // failure everything made so far is torn down before returning.
  static Status create(const Options& options, std::unique_ptr<Testbed>* out);

  // Stops the daemons (SIGTERM, SIGKILL after 5 s), SIGKILLs anything else
  // still running in the bed's namespaces, deletes the namespaces (and with
  // them every link and bridge) and removes dir(). Also run at exit() for
  // beds still alive; only in the process that created the bed.
  ~Testbed();
  // What the destructor does, now; idempotent. The accessors stay valid.
  void teardown();
  Testbed(const Testbed&) = delete;
  Testbed& operator=(const Testbed&) = delete;

  int hosts() const { return static_cast<int>(hosts_.size()); }
  int racks() const { return racks_; }
  const std::string& host_id(int h) const { return hosts_.at(h).id; }  // "h1".."hN"
  const std::string& rack(int h) const { return hosts_.at(h).rack; }   // "r1".."rR"
  std::string address(int h) const { return hosts_.at(h).address; }
  uint16_t port(int h) const { return hosts_.at(h).port; }
  std::string socket(int h) const { return hosts_.at(h).socket; }
  std::string admin_socket(int h) const { return hosts_.at(h).admin_socket; }
  std::string cluster_file() const { return cluster_file_; }
  // The bed's cluster key (dir()/cluster.key, mode 0600, made by create()),
  // which every daemon is started with (--cluster-key).
  std::string key_file() const { return key_file_; }
  std::string dir() const { return dir_; }
  // Prefix of every name this bed made, e.g. "gtb-4242-1"; also the
  // cluster's name in cluster.toml.
  const std::string& name() const { return name_; }

  bool namespaces() const { return !fabric_netns_.empty(); }
  std::string netns(int h) const { return hosts_.at(h).netns; }  // "" in loopback mode
  std::string fabric_netns() const { return fabric_netns_; }
  // Why the bed runs on loopback ("" when it has namespaces).
  std::string loopback_reason() const { return loopback_reason_; }
  uint32_t uplink_mbit() const { return uplink_mbit_; }

  // Host h's CPUs; empty when the bed is not pinned (Options::pin).
  const std::vector<int>& cpus(int h) const { return hosts_.at(h).cpus; }

  pid_t daemon_pid(int h) const { return hosts_.at(h).pid; }  // -1 when not running
  bool daemon_alive(int h) const;
  std::string daemon_log(int h) const;
  std::string daemon_log_path(int h) const { return hosts_.at(h).log_path; }
  // The daemon's argv, as started.
  std::vector<std::string> daemon_command(int h) const;
  std::vector<std::string> dpdk_args(int h) const;
  // --cluster FILE, or with Options::etcd the flags that register h there.
  std::vector<std::string> membership_args(int h) const;
  // Host h is the memif client of its rack (Options::dpdk "memif"): it
  // starts after the server, and a server started again leaves it without a
  // link until it is started again too (DPDK 22.11's memif client does not
  // reconnect).
  bool memif_client(int h) const;

  // Sends sig to host h's daemon. For SIGKILL also reaps it and waits (up
  // to 5 s) until its TCP port is free again, so daemon_alive(h) is false and
  // a new daemon can bind the port on return; other signals are only sent.
  // daemon_alive and kill_daemon also work in a forked child (a rank), where
  // the daemons are siblings rather than children.
  void kill_daemon(int h, int sig = SIGKILL);
  // (Re)starts host h's daemon with the same identity, sockets and port, and
  // waits as create() does. Its log is appended to.
  Status start_daemon(int h);
  // Waits, as create() does, until the daemons of `hosts` (empty: all)
  // each see every other host's link up (gsyncctl peers), up to
  // Options::start_timeout_s; the error names the links that are not up.
  Status wait_links_up(std::vector<int> hosts = {}) const;

  // Membership on etcd (Options::etcd). The bed's etcd (its first member;
  // member(i) of etcd_members()), and every member's client URL,
  // comma-separated (what the daemons are given).
  EtcdServer* etcd() const { return etcd_.empty() ? nullptr : etcd_[0].get(); }
  EtcdServer* etcd_member(int i) const { return etcd_.at(size_t(i)).get(); }
  int etcd_members() const { return static_cast<int>(etcd_.size()); }
  std::string etcd_endpoint() const;
  // A new host in rack `rack` (1-based; a new rack when one past the last)
  // with the next id, registered through etcd; *h is its index.
  Status add_host(int rack, int* h);
  // Host h leaves: sig SIGTERM is a clean leave (its lease is revoked),
  // SIGKILL a crash (peers learn of it when the lease expires). Its index
  // stays, with no daemon.
  void remove_host(int h, int sig = SIGTERM);

  // Runs fn in a forked child inside host h's network namespace (in loopback
  // mode: just forked) and returns the child's pid; fn's return value is the
  // exit code. For peer drivers (gloo) that must use that host's address.
  // The caller reaps the child; the destructor SIGKILLs one still running in
  // a namespace. Like the daemons, the child gets SIGKILL if the thread that
  // spawned it exits (PR_SET_PDEATHSIG).
  pid_t spawn_in_host(int h, std::function<int()> fn);

  // Deletes what beds of processes that are gone left behind: namespaces
  // named gtb-<pid>-<n>-* (after SIGKILLing processes still in them) and
  // /tmp/gtb-<pid>-<n>.* directories. Appends one line per removed item to
  // *report when given. Beds of live processes are never touched.
  static Status cleanup_stale(std::string* report = nullptr);

 private:
  struct Host {
    std::string id, rack, address, netns, dir, socket, admin_socket, log_path;
    int rack_index = 0;  // 1-based
    uint16_t port = 0;
    std::vector<int> cpus;  // empty: not pinned
    mutable pid_t pid = -1;  // daemon_alive() reaps
    bool started_once = false;
  };

  Testbed() = default;
  Status build(const Options& options);
  Status plan(const Options& options);
  Status choose_mode(const Options& options, const std::vector<int>& rack_sizes);
  Status plan_hosts(const Options& options, const std::vector<int>& rack_sizes, int hosts);
  Status build_network();
  Status verify_network();
  Status write_cluster_file();
  Status start_etcd();
  // daemons.cc
  Status launch_daemon(int h);
  Status wait_ready(const std::vector<int>& hosts);
  // links.cc
  Status fit_neighbour_table();
  void restore_neighbour_table();
  Status wait_links(const std::vector<int>& hosts) const;
  bool wait_port_released(int h) const;

  Options options_;
  std::string name_, dir_, cluster_file_, key_file_, gsyncd_;
  std::string fabric_netns_, loopback_reason_;
  std::vector<std::string> made_netns_;  // in creation order, for teardown
  std::vector<Host> hosts_;
  std::vector<std::unique_ptr<EtcdServer>> etcd_;
  int racks_ = 0;
  uint32_t uplink_mbit_ = 0;
  pid_t owner_pid_ = -1;
  bool torn_down_ = false;
  std::vector<uint64_t> neigh_saved_;  // gc_thresh2, 3 as found, then as set
};

// The kernel neighbour entries a bed of `hosts` namespaces needs (links.cc).
uint64_t neighbour_entries(int hosts);

// Whether `gsyncd --help` lists --cluster (the multi-host daemon).
bool gsyncd_has_cluster_flag(const std::string& gsyncd);

}  // namespace gsync::testbed
