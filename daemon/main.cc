// SPDX-License-Identifier: Apache-2.0
//
// gsyncd: the per-host gradient aggregation daemon.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "daemon/config/config.h"
#include "daemon/core/log.h"
#include "daemon/gsyncd.h"
#include "gsync_build_config.h"

int main(int argc, char** argv) {
  CLI::App app{"gsyncd: per-host gradient aggregation daemon"};
  std::string config_path = gsync::kDefaultConfigPath;
  std::string socket, admin_socket, log_level;
  uint32_t reduce_threads = 0, op_timeout_ms = 0;
  std::string cluster_file, host_id, cluster_key, algorithm, chunk_bytes, transport;
  uint32_t tcp_streams = 0;
  int tcp_streams_cross_rack = -1;
  int64_t tcp_buffer_kib = -1, poll_us = -1;
  std::string poll_mode, checkpoint_dir, metrics_listen;
  bool print_config = false;
  auto* config_opt = app.add_option("-c,--config", config_path, "TOML config file");
  app.add_option("--socket", socket, "client socket (overrides [daemon] socket)");
  app.add_option("--admin-socket", admin_socket, "admin socket (overrides [daemon] admin_socket)");
  app.add_option("--log-level", log_level, "trace debug info warn error critical off");
  app.add_option("--reduce-threads", reduce_threads, "reduce worker threads (0: one per CPU)");
  app.add_option("--op-timeout-ms", op_timeout_ms, "default op timeout");
  app.add_option("--poll-us", poll_us, "keep polling this long after an event (0: always sleep)");
  app.add_option("--poll-mode", poll_mode, "auto (poll only while a CPU is spare) or always");
  app.add_option("--cluster", cluster_file, "cluster file (overrides [cluster] file)");
  app.add_option("--host-id", host_id, "this daemon's id in the cluster file");
  app.add_option("--cluster-key", cluster_key,
                 "cluster key file, mode 0600 (overrides [cluster] key_file; gsyncctl keygen)");
  app.add_option("--algo", algorithm, "cross-host algorithm: auto ring hier direct tree doubling");
  app.add_option("--tcp-streams", tcp_streams, "TCP connections per peer in this host's rack");
  app.add_option("--tcp-streams-cross-rack", tcp_streams_cross_rack,
                 "TCP connections per peer in another rack (0: as --tcp-streams)");
  app.add_option("--tcp-buffer-kib", tcp_buffer_kib,
                 "socket buffers per TCP connection, KiB (0: kernel autotuning)");
  app.add_option("--transport", transport, "daemon-to-daemon transport: auto tcp verbs");
  app.add_option("--chunk-bytes", chunk_bytes, "cross-host pipelining unit (K/M suffixes)");
  app.add_option("--checkpoint-dir", checkpoint_dir, "checkpoints folder ([checkpoint] dir)");
  app.add_option("--metrics-listen", metrics_listen,
                 "serve Prometheus metrics at HOST:PORT/metrics ([metrics] listen)");
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
  if (!socket.empty()) cfg.socket_path = socket;
  if (!admin_socket.empty()) cfg.admin_socket_path = admin_socket;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (reduce_threads) cfg.reduce_threads = reduce_threads;
  if (op_timeout_ms) cfg.op_timeout_ms = op_timeout_ms;
  if (!cluster_file.empty()) cfg.cluster_file = cluster_file;
  if (!host_id.empty()) cfg.host_id = host_id;
  if (!cluster_key.empty()) cfg.cluster_key_file = cluster_key;
  if (!algorithm.empty()) cfg.algorithm = algorithm;
  if (tcp_streams) cfg.tcp_streams = tcp_streams;
  if (tcp_streams_cross_rack >= 0) cfg.tcp_streams_cross_rack = static_cast<uint32_t>(tcp_streams_cross_rack);
  if (poll_us >= 0) cfg.poll_us = static_cast<uint32_t>(poll_us);
  if (!poll_mode.empty()) cfg.poll_mode = poll_mode;
  if (tcp_buffer_kib >= 0) cfg.tcp_buffer_kib = static_cast<uint32_t>(tcp_buffer_kib);
  if (!transport.empty()) cfg.transport = transport;
  if (!checkpoint_dir.empty()) cfg.checkpoint_dir = checkpoint_dir;
  if (!metrics_listen.empty()) cfg.metrics_listen = metrics_listen;
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
