// SPDX-License-Identifier: Apache-2.0
//
// gsyncd: the per-host gradient aggregation daemon.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "daemon/config/config.h"
#include "daemon/core/log.h"
#include "daemon/gsyncd.h"
#include "gsync_build_config.h"

namespace {
// The flags that set a string key of the config, each as it is: one table,
// so a new key's flag is one line here.
struct StringFlag {
  const char* name;
  const char* help;
  std::string gsync::DaemonConfig::*field;
};
const StringFlag kStringFlags[] = {
    {"--socket", "client socket (overrides [daemon] socket)", &gsync::DaemonConfig::socket_path},
    {"--admin-socket", "admin socket (overrides [daemon] admin_socket)",
     &gsync::DaemonConfig::admin_socket_path},
    {"--log-level", "trace debug info warn error critical off", &gsync::DaemonConfig::log_level},
    {"--poll-mode", "auto (poll only while a CPU is spare) or always",
     &gsync::DaemonConfig::poll_mode},
    {"--cluster", "cluster file (overrides [cluster] file)", &gsync::DaemonConfig::cluster_file},
    {"--host-id", "this daemon's id in the cluster file or etcd", &gsync::DaemonConfig::host_id},
    {"--cluster-name", "the cluster's name, with --etcd ([cluster] name)",
     &gsync::DaemonConfig::cluster_name},
    {"--address", "the address peers reach this daemon at, with --etcd ([cluster] address)",
     &gsync::DaemonConfig::address},
    {"--rack", "this daemon's rack, with --etcd ([cluster] rack)", &gsync::DaemonConfig::rack},
    {"--etcd-prefix", "the key prefix in etcd ([cluster] etcd_prefix)",
     &gsync::DaemonConfig::etcd_prefix},
    {"--cluster-key", "cluster key file, mode 0600 (overrides [cluster] key_file; gsyncctl keygen)",
     &gsync::DaemonConfig::cluster_key_file},
    {"--algo", "cross-host algorithm: auto ring hier direct tree doubling",
     &gsync::DaemonConfig::algorithm},
    {"--transport", "daemon-to-daemon transport: auto tcp verbs dpdk", &gsync::DaemonConfig::transport},
    {"--dpdk-eal-args", "DPDK's EAL arguments, the port among them ([dpdk] eal_args)",
     &gsync::DaemonConfig::dpdk_eal_args},
    {"--dpdk-port", "the DPDK port by name ([dpdk] port)", &gsync::DaemonConfig::dpdk_port},
    {"--dpdk-rx-lcore", "DPDK's receive poll: off, any or a CPU, a dedicated lcore ([dpdk] rx_lcore)",
     &gsync::DaemonConfig::dpdk_rx_lcore},
    {"--checkpoint-dir", "checkpoints folder ([checkpoint] dir)",
     &gsync::DaemonConfig::checkpoint_dir},
    {"--metrics-listen", "serve Prometheus metrics at HOST:PORT/metrics ([metrics] listen)",
     &gsync::DaemonConfig::metrics_listen},
    {"--tuning-table", "file the tuning table is kept in ([tuning] table)",
     &gsync::DaemonConfig::tuning_table},
};
// The flags that set a count key of the config, likewise.
struct CountFlag {
  const char* name;
  const char* help;
  uint32_t gsync::DaemonConfig::*field;
};
const CountFlag kCountFlags[] = {
    {"--port", "the port peers reach this daemon at, with --etcd ([cluster] port)",
     &gsync::DaemonConfig::port},
    {"--etcd-lease-ttl-s", "the etcd lease's time to live, s ([cluster] etcd_lease_ttl_s)",
     &gsync::DaemonConfig::etcd_lease_ttl_s},
    {"--dpdk-window", "DPDK frames in flight per link ([dpdk] window)",
     &gsync::DaemonConfig::dpdk_window},
    {"--dpdk-payload", "DPDK bytes per frame, 0: the port's MTU ([dpdk] payload)",
     &gsync::DaemonConfig::dpdk_payload},
    {"--dpdk-drop-ppm", "test hook: DPDK frames dropped on receipt, per million ([dpdk] drop_ppm)",
     &gsync::DaemonConfig::dpdk_drop_ppm},
    {"--dpdk-mbufs", "DPDK packet buffers in the port's pool ([dpdk] mbufs)",
     &gsync::DaemonConfig::dpdk_mbufs},
    {"--dpdk-idle-poll-us", "how often an idle DPDK port is looked at ([dpdk] idle_poll_us)",
     &gsync::DaemonConfig::dpdk_idle_poll_us},
    {"--checkpoint-keep", "checkpoint sets kept, 1 to 8 ([checkpoint] keep)",
     &gsync::DaemonConfig::checkpoint_keep},
};

// "a,b,,c" -> {a, b, c}
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gsyncd: per-host gradient aggregation daemon"};
  std::string config_path = gsync::kDefaultConfigPath;
  std::string strings[std::size(kStringFlags)];
  uint32_t reduce_threads = 0, op_timeout_ms = 0;
  std::string chunk_bytes;
  uint32_t tcp_streams = 0;
  int tcp_streams_cross_rack = -1;
  int64_t tcp_buffer_kib = -1, poll_us = -1, trace_ring_ops = -1;
  std::string trace_record;
  int64_t counts[std::size(kCountFlags)];
  std::fill(std::begin(counts), std::end(counts), -1);
  bool print_config = false;
  std::string etcd;
  auto* config_opt = app.add_option("-c,--config", config_path, "TOML config file");
  for (size_t i = 0; i < std::size(kStringFlags); i++)
    app.add_option(kStringFlags[i].name, strings[i], kStringFlags[i].help);
  app.add_option("--reduce-threads", reduce_threads, "reduce worker threads (0: one per CPU)");
  app.add_option("--op-timeout-ms", op_timeout_ms, "default op timeout");
  app.add_option("--poll-us", poll_us, "keep polling this long after an event (0: always sleep)");
  app.add_option("--tcp-streams", tcp_streams, "TCP connections per peer in this host's rack");
  app.add_option("--tcp-streams-cross-rack", tcp_streams_cross_rack,
                 "TCP connections per peer in another rack (0: as --tcp-streams)");
  app.add_option("--tcp-buffer-kib", tcp_buffer_kib,
                 "socket buffers per TCP connection, KiB (0: kernel autotuning)");
  app.add_option("--chunk-bytes", chunk_bytes, "cross-host pipelining unit (K/M suffixes)");
  app.add_option("--trace-ring-ops", trace_ring_ops, "recent ops kept ([trace] ring_ops)")
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
  app.add_option("--trace-record", trace_record, "record ops' timelines ([trace] record)")
      ->check(CLI::IsMember({"true", "false"}));
  for (size_t i = 0; i < std::size(kCountFlags); i++)
    app.add_option(kCountFlags[i].name, counts[i], kCountFlags[i].help)
        ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
  app.add_option("--etcd", etcd,
                 "membership on etcd: its endpoints, comma-separated ([cluster] etcd)");
  app.add_flag("--print-config", print_config, "print the config in force as TOML and exit");
  app.set_version_flag("--version", GSYNC_VERSION_STRING);
  CLI11_PARSE(app, argc, argv);

  // Log lines may quote what others sent: the sink escapes it (core/log.h).
  gsync::make_log_printable();
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  gsync::DaemonConfig cfg;
  // The default path is optional (no file: the defaults); a named one must exist.
  if (gsync::Status st = gsync::load_config_file(config_path, config_opt->count() > 0, &cfg); !st) {
    spdlog::critical("{}", st.message());
    return 2;
  }
  for (size_t i = 0; i < std::size(kStringFlags); i++)
    if (!strings[i].empty()) cfg.*kStringFlags[i].field = strings[i];
  if (reduce_threads) cfg.reduce_threads = reduce_threads;
  if (op_timeout_ms) cfg.op_timeout_ms = op_timeout_ms;
  if (tcp_streams) cfg.tcp_streams = tcp_streams;
  if (tcp_streams_cross_rack >= 0) cfg.tcp_streams_cross_rack = static_cast<uint32_t>(tcp_streams_cross_rack);
  if (poll_us >= 0) cfg.poll_us = static_cast<uint32_t>(poll_us);
  if (tcp_buffer_kib >= 0) cfg.tcp_buffer_kib = static_cast<uint32_t>(tcp_buffer_kib);
  if (trace_ring_ops >= 0) cfg.trace_ring_ops = static_cast<uint32_t>(trace_ring_ops);
  if (!trace_record.empty()) cfg.trace_record = trace_record == "true";
  for (size_t i = 0; i < std::size(kCountFlags); i++)
    if (counts[i] >= 0) cfg.*kCountFlags[i].field = static_cast<uint32_t>(counts[i]);
  if (!etcd.empty()) cfg.etcd_endpoints = split_commas(etcd);
  if (!chunk_bytes.empty() && !gsync::parse_byte_size(chunk_bytes, &cfg.chunk_bytes)) {
    spdlog::critical("--chunk-bytes '{}' is not a byte size", chunk_bytes);
    return 2;
  }
  if (gsync::Status st = gsync::validate_config(cfg); !st) {
    spdlog::critical("{}", st.message());
    return 2;
  }
  if (print_config) {
    std::fputs(gsync::config_to_toml(cfg).c_str(), stdout);
    return 0;
  }
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  gsync::Gsyncd::block_stop_signals();
  gsync::Gsyncd daemon(cfg);
  if (gsync::Status st = daemon.start(); !st) {
    spdlog::critical("cannot start: {}", st.message());
    return 1;
  }
  return daemon.run();
}
