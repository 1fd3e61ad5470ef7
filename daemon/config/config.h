// SPDX-License-Identifier: Apache-2.0
//
// gsyncd's whole configuration: one typed struct. Defaults work with no file;
// a TOML file (default /etc/gsync/gsyncd.toml) overrides them; command-line
// flags override the file. docs/operations.md lists every key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/status.h"

namespace gsync {

struct DaemonConfig {
  // [daemon]
  std::string socket_path = "/run/gsync/gsyncd.sock";
  std::string admin_socket_path = "/run/gsync/gsyncd-admin.sock";
  uint32_t socket_mode = 0666;  // access is decided by SO_PEERCRED, below
  // The admin socket answers anyone who can connect: its mode and group
  // decide who may (root, the daemon's user, the group). "" keeps the
  // daemon's group; a group that does not exist does too (with a warning).
  uint32_t admin_socket_mode = 0660;
  std::string admin_group = "gsync";
  std::string log_level = "info";  // trace debug info warn error critical off
  uint32_t reduce_threads = 0;     // 0: one per online CPU
  uint32_t poll_us = 200;          // keep polling this long after an event; 0: always sleep
  std::string poll_mode = "auto";  // "auto": poll only while a CPU is spare; "always"

  // [auth] Empty lists: root and the daemon's own uid only.
  std::vector<uint32_t> allowed_uids;
  std::vector<uint32_t> allowed_gids;

  // [limits]
  uint64_t default_arena_bytes = 1ull << 30;
  uint64_t max_arena_bytes = 64ull << 30;
  uint32_t max_clients = 1024;
  uint32_t ring_entries = 1024;        // power of two, 16 .. 65536
  uint32_t op_timeout_ms = 60000;      // an op not complete by then fails
  uint64_t inline_reduce_bytes = 256 << 10;  // smaller ops reduce on the event thread

  // [cluster] Multi-host. No cluster file: this host is the whole world.
  std::string cluster_file;
  std::string host_id;              // this daemon in the file; "": found by local address
  // The shared cluster key (gsyncctl keygen; mode 0600), read by the control
  // plane. Required when cluster_file is set (docs/security.md).
  std::string cluster_key_file;
  uint32_t tcp_streams = 2;         // TCP connections per peer in this host's rack
  uint32_t tcp_streams_cross_rack = 1;  // ... per peer in another rack; 0: tcp_streams
  uint32_t tcp_buffer_kib = 256;    // socket buffers per connection; 0 = kernel autotuning
  std::string transport = "auto";   // auto (verbs if an RDMA device works, else tcp) tcp verbs dpdk
  uint32_t peer_timeout_ms = 3000;  // a silent peer is declared lost after this
  std::string algorithm = "auto";   // auto ring hier direct tree doubling
  // Membership on etcd instead of a cluster file (docs/membership.md): the
  // endpoints, the key prefix (the cluster's keys are under
  // prefix + name + "/"), the lease's time to live, and what this daemon
  // registers: the cluster's name, its address, port and rack (host_id:
  // its id; "": the host name).
  std::vector<std::string> etcd_endpoints;
  std::string etcd_prefix = "/gsync/";
  uint32_t etcd_lease_ttl_s = 10;
  std::string cluster_name;
  std::string address;
  uint32_t port = 7700;
  std::string rack = "default";
  uint64_t chunk_bytes = 0;         // pipelining unit; 0: chosen per op

  // [dpdk] The DPDK provider ([cluster] transport = "dpdk";
  // docs/transport.md, "The DPDK provider"): DPDK's own arguments (which
  // port: a --vdev, or a PCI device), the port by name, the packet pool,
  // frames in flight per link, bytes per frame (0: the port's MTU), how often
  // an idle port is looked at, and the test hook that drops received frames.
  std::string dpdk_eal_args;
  std::string dpdk_port;
  uint32_t dpdk_mbufs = 8191;
  uint32_t dpdk_window = 512;
  uint32_t dpdk_payload = 0;
  uint32_t dpdk_idle_poll_us = 1000;
  uint32_t dpdk_drop_ppm = 0;
  std::string dpdk_rx_lcore = "off";  // off, any, or a CPU: the receive poll on its own lcore

  // [checkpoint] The parameter server's checkpoints (docs/fault-tolerance.md):
  // a folder per job under dir; the newest `keep` checkpoint sets whole on every host stay.
  std::string checkpoint_dir;  // "": none on this daemon
  uint32_t checkpoint_keep = 3;

  // [metrics] Prometheus metrics over HTTP (docs/operations.md, "Metrics"):
  // "HOST:PORT"; "": off.
  std::string metrics_listen;

  // [trace] The recent ops gsyncctl ops and gsyncctl trace read (their
  // arrivals and stage times; docs/operations.md, "Traces"): how many are
  // kept, and whether ops are recorded at all.
  uint32_t trace_ring_ops = 1024;
  bool trace_record = true;

  // [tuning] The file the tuning table is kept in (daemon/tuning/
  // tune_table.h, docs/algorithms.md "Tuning"): read at start, written when
  // `gsyncctl tune load` gives the daemon a new table (its folder made if
  // missing: systemd's StateDirectory). "": kept in memory only.
  std::string tuning_table = "/var/lib/gsync/tuning.json";

  std::string source = "defaults";  // where the values came from, for gsyncctl

  // Every field, source included (tests compare whole configs with it, so a
  // key added later is compared without anyone remembering to).
  bool operator==(const DaemonConfig&) const = default;
};

constexpr const char* kDefaultConfigPath = "/etc/gsync/gsyncd.toml";

// Loads path over the defaults in *cfg. A missing file is an error only when
// required (the user named it); otherwise the defaults stand. Errors name the
// file, line and key: "/etc/gsync/gsyncd.toml:12: limits.ring_entries: ...".
Status load_config_file(const std::string& path, bool required, DaemonConfig* cfg);
// The same for TOML text already read; name stands for the file in errors
// and in cfg->source. A bad text leaves *cfg as it was.
Status load_config_text(std::string_view text, const std::string& name, DaemonConfig* cfg);
// Checks cross-field rules (ring_entries a power of two, default <= max ...).
Status validate_config(const DaemonConfig& cfg);
// [dpdk] rx_lcore of a validated config as the transport takes it
// (ContextOptions::Dpdk::rx_lcore, the same values): off, any CPU, or the
// CPU.
constexpr int kDpdkRxOff = -2, kDpdkRxAnyCpu = -1;
int dpdk_rx_cpu(const DaemonConfig& cfg);
// The config in force as TOML text (gsyncctl status, --print-config).
std::string config_to_toml(const DaemonConfig& cfg);

// "64M", "1G", "4096", "2KiB" -> bytes. False on anything else.
bool parse_byte_size(const std::string& text, uint64_t* out);

}  // namespace gsync
