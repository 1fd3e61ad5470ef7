// SPDX-License-Identifier: Apache-2.0
//
// The list of config keys, byte-size parsing, and the rules a loaded config
// must follow. No toml++ here: it is heavy and lives in config.cc alone.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sched.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>
#include <string>

#include "daemon/config/config.h"
#include "daemon/config/config_internal.h"
#include "daemon/core/text.h"

namespace gsync {
namespace {

constexpr uint32_t kMinRingEntries = 16;
constexpr uint32_t kMaxRingEntries = 65536;
// sizeof(sockaddr_un::sun_path) on Linux, including the terminating NUL (unix(7)).
constexpr size_t kSunPathSize = 108;
// More reduce threads than this is a typo, not a machine.
constexpr uint32_t kMaxReduceThreads = 1024;
// Polling longer than this between events is a spinning daemon, not a window.
constexpr uint32_t kMaxPollUs = 100000;
constexpr uint32_t kMaxSocketMode = 07777;
// useradd(8): group names are at most 32 bytes.
constexpr size_t kMaxGroupName = 32;
// The recent ops kept for gsyncctl ops and trace: a million take about
// half a gigabyte (docs/operations.md, "Traces"); more is a typo.
constexpr uint32_t kMaxTraceRingOps = 1000000;
constexpr std::array<std::string_view, 6> kAlgorithms = {"auto", "ring", "hier", "direct", "tree",
                                                          "doubling"};
constexpr std::array<std::string_view, 4> kTransports = {"auto", "tcp", "verbs", "dpdk"};
constexpr std::array<std::string_view, 2> kPollModes = {"auto", "always"};
constexpr std::array<std::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};

const ConfigField kFields[] = {
    {"daemon", "socket", ConfigKind::kString, &DaemonConfig::socket_path},
    {"daemon", "admin_socket", ConfigKind::kString, &DaemonConfig::admin_socket_path},
    {"daemon", "socket_mode", ConfigKind::kMode, &DaemonConfig::socket_mode},
    {"daemon", "admin_socket_mode", ConfigKind::kMode, &DaemonConfig::admin_socket_mode},
    {"daemon", "admin_group", ConfigKind::kString, &DaemonConfig::admin_group},
    {"daemon", "log_level", ConfigKind::kString, &DaemonConfig::log_level},
    {"daemon", "reduce_threads", ConfigKind::kCount, &DaemonConfig::reduce_threads},
    {"daemon", "poll_us", ConfigKind::kCount, &DaemonConfig::poll_us},
    {"daemon", "poll_mode", ConfigKind::kString, &DaemonConfig::poll_mode},
    {"auth", "allowed_uids", ConfigKind::kIdList, &DaemonConfig::allowed_uids},
    {"auth", "allowed_gids", ConfigKind::kIdList, &DaemonConfig::allowed_gids},
    {"limits", "default_arena", ConfigKind::kSize, &DaemonConfig::default_arena_bytes},
    {"limits", "max_arena", ConfigKind::kSize, &DaemonConfig::max_arena_bytes},
    {"limits", "max_clients", ConfigKind::kCount, &DaemonConfig::max_clients},
    {"limits", "ring_entries", ConfigKind::kCount, &DaemonConfig::ring_entries},
    {"limits", "op_timeout_ms", ConfigKind::kCount, &DaemonConfig::op_timeout_ms},
    {"limits", "inline_reduce_bytes", ConfigKind::kSize, &DaemonConfig::inline_reduce_bytes},
    {"cluster", "file", ConfigKind::kString, &DaemonConfig::cluster_file},
    {"cluster", "host_id", ConfigKind::kString, &DaemonConfig::host_id},
    {"cluster", "key_file", ConfigKind::kString, &DaemonConfig::cluster_key_file},
    {"cluster", "tcp_streams", ConfigKind::kCount, &DaemonConfig::tcp_streams},
    {"cluster", "tcp_streams_cross_rack", ConfigKind::kCount, &DaemonConfig::tcp_streams_cross_rack},
    {"cluster", "tcp_buffer_kib", ConfigKind::kCount, &DaemonConfig::tcp_buffer_kib},
    {"cluster", "transport", ConfigKind::kString, &DaemonConfig::transport},
    {"cluster", "peer_timeout_ms", ConfigKind::kCount, &DaemonConfig::peer_timeout_ms},
    {"cluster", "algorithm", ConfigKind::kString, &DaemonConfig::algorithm},
    {"cluster", "chunk_bytes", ConfigKind::kSize, &DaemonConfig::chunk_bytes},
    {"cluster", "etcd", ConfigKind::kStringList, &DaemonConfig::etcd_endpoints},
    {"cluster", "etcd_prefix", ConfigKind::kString, &DaemonConfig::etcd_prefix},
    {"cluster", "etcd_lease_ttl_s", ConfigKind::kCount, &DaemonConfig::etcd_lease_ttl_s},
    {"cluster", "name", ConfigKind::kString, &DaemonConfig::cluster_name},
    {"cluster", "address", ConfigKind::kString, &DaemonConfig::address},
    {"cluster", "port", ConfigKind::kCount, &DaemonConfig::port},
    {"cluster", "rack", ConfigKind::kString, &DaemonConfig::rack},
    {"checkpoint", "dir", ConfigKind::kString, &DaemonConfig::checkpoint_dir},
    {"checkpoint", "keep", ConfigKind::kCount, &DaemonConfig::checkpoint_keep},
    {"metrics", "listen", ConfigKind::kString, &DaemonConfig::metrics_listen},
    {"tuning", "table", ConfigKind::kString, &DaemonConfig::tuning_table},
    {"dpdk", "eal_args", ConfigKind::kString, &DaemonConfig::dpdk_eal_args},
    {"dpdk", "port", ConfigKind::kString, &DaemonConfig::dpdk_port},
    {"dpdk", "mbufs", ConfigKind::kCount, &DaemonConfig::dpdk_mbufs},
    {"dpdk", "window", ConfigKind::kCount, &DaemonConfig::dpdk_window},
    {"dpdk", "payload", ConfigKind::kCount, &DaemonConfig::dpdk_payload},
    {"dpdk", "idle_poll_us", ConfigKind::kCount, &DaemonConfig::dpdk_idle_poll_us},
    {"dpdk", "drop_ppm", ConfigKind::kCount, &DaemonConfig::dpdk_drop_ppm},
    {"dpdk", "rx_lcore", ConfigKind::kString, &DaemonConfig::dpdk_rx_lcore},
    {"trace", "ring_ops", ConfigKind::kCount, &DaemonConfig::trace_ring_ops},
    {"trace", "record", ConfigKind::kBool, &DaemonConfig::trace_record},
};

struct SizeSuffix {
  std::string_view name;  // lower case
  int shift;
};
constexpr SizeSuffix kSizeSuffixes[] = {
    {"", 0},     {"b", 0},  {"k", 10},   {"kib", 10}, {"m", 20},
    {"mib", 20}, {"g", 30}, {"gib", 30}, {"t", 40},   {"tib", 40},
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The [cluster] keys of membership on etcd (docs/membership.md).
std::optional<ConfigProblem> check_etcd(const DaemonConfig& cfg) {
  auto problem = [](std::string key, std::string message) {
    return ConfigProblem{{std::move(key)}, std::move(message)};
  };
  if (cfg.etcd_endpoints.empty()) return std::nullopt;
  if (!cfg.cluster_file.empty())
    return ConfigProblem{{"cluster.etcd", "cluster.file"},
                         "membership comes from etcd or from a cluster file, not both"};
  for (const auto& e : cfg.etcd_endpoints)
    if (e.rfind("http://", 0) != 0 && e.rfind("https://", 0) != 0)
      return problem("cluster.etcd", fmt::format("\"{}\" is not an http:// or https:// URL",
                                                 printable(e, 64)));
  if (cfg.cluster_name.empty() || cfg.cluster_name.size() > 255 || !is_printable(cfg.cluster_name) ||
      cfg.cluster_name.find('/') != std::string::npos)
    return problem("cluster.name", "with [cluster] etcd, the cluster's name: 1 to 255 printable "
                                   "bytes without '/' (its keys are under etcd_prefix + name)");
  if (cfg.etcd_prefix.empty() || cfg.etcd_prefix.back() != '/')
    return problem("cluster.etcd_prefix", "must end with '/'");
  if (cfg.etcd_lease_ttl_s < 1 || cfg.etcd_lease_ttl_s > 3600)
    return problem("cluster.etcd_lease_ttl_s",
                   fmt::format("must be 1 to 3600 seconds, got {}", cfg.etcd_lease_ttl_s));
  if (cfg.address.empty())
    return problem("cluster.address", "with [cluster] etcd, the address peers reach this daemon at");
  if (cfg.port < 1 || cfg.port > 65535)
    return problem("cluster.port", fmt::format("must be 1 to 65535, got {}", cfg.port));
  if (cfg.rack.empty() || cfg.rack.size() > 255 || !is_printable(cfg.rack))
    return problem("cluster.rack", "must be 1 to 255 printable bytes");
  return std::nullopt;
}

std::optional<std::string> check_socket_path(const std::string& path) {
  if (path.empty()) return "must not be empty";
  if (path.find('\0') != std::string::npos) return "must not contain a NUL character";
  if (path.size() >= kSunPathSize) {
    return fmt::format("is {} bytes; a unix socket path must be shorter than {} (unix(7))",
                       path.size(), kSunPathSize);
  }
  return std::nullopt;
}

// A group name as useradd(8) and systemd-sysusers accept them: letters,
// digits, '_', '-' and '.', not starting with '-' or a digit, at most 32
// bytes; "" means the daemon's own group.
std::optional<std::string> check_group_name(const std::string& name) {
  if (name.empty()) return std::nullopt;
  auto quoted = [&] { return fmt::format("\"{}\"", printable(name, 64)); };
  if (name.size() > kMaxGroupName)
    return fmt::format("{} is {} bytes; a group name has at most {}", quoted(), name.size(),
                       kMaxGroupName);
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      return fmt::format("{} is not a group name (letters, digits, '_', '-', '.'; \"\" for the "
                         "daemon's own group)",
                         quoted());
  }
  if (name[0] == '-' || std::isdigit(static_cast<unsigned char>(name[0])))
    return fmt::format("{} is not a group name (it must not start with '-' or a digit)",
                       quoted());
  return std::nullopt;
}

std::optional<ConfigProblem> metrics_problem(const DaemonConfig& cfg) {
  if (cfg.metrics_listen.empty()) return std::nullopt;
  std::string host;
  uint16_t port = 0;
  if (std::string why = parse_host_port(cfg.metrics_listen, &host, &port); !why.empty())
    return ConfigProblem{{"metrics.listen"}, why};
  return std::nullopt;
}

std::optional<ConfigProblem> trace_problem(const DaemonConfig& cfg) {
  if (cfg.trace_ring_ops < 1 || cfg.trace_ring_ops > kMaxTraceRingOps)
    return ConfigProblem{{"trace.ring_ops"},
                         fmt::format("must be 1 to {} (recent ops kept), got {}",
                                     kMaxTraceRingOps, cfg.trace_ring_ops)};
  return std::nullopt;
}

constexpr int kRxLcoreBad = -3;

}  // namespace

int dpdk_rx_cpu(const DaemonConfig& cfg) {
  const std::string& w = cfg.dpdk_rx_lcore;
  if (w == "off") return kDpdkRxOff;
  if (w == "any") return kDpdkRxAnyCpu;
  int cpu = 0;
  auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), cpu);
  if (w.empty() || ec != std::errc() || end != w.data() + w.size() || cpu < 0 || cpu >= CPU_SETSIZE)
    return kRxLcoreBad;
  return cpu;
}

namespace {

std::optional<ConfigProblem> dpdk_problem(const DaemonConfig& cfg) {
  if (cfg.dpdk_window < 2 || cfg.dpdk_window > 32768)
    return ConfigProblem{{"dpdk.window"},
                         fmt::format("must be 2 to 32768 frames in flight, got {}", cfg.dpdk_window)};
  if (cfg.dpdk_mbufs < 1024)
    return ConfigProblem{{"dpdk.mbufs"}, fmt::format("must be at least 1024, got {}", cfg.dpdk_mbufs)};
  if (cfg.dpdk_payload != 0 && (cfg.dpdk_payload < 64 || cfg.dpdk_payload > 9000))
    return ConfigProblem{{"dpdk.payload"},
                         fmt::format("must be 0 (the port's MTU) or 64 to 9000 bytes, got {}",
                                     cfg.dpdk_payload)};
  if (cfg.dpdk_idle_poll_us < 1000 || cfg.dpdk_idle_poll_us > 100000)
    return ConfigProblem{{"dpdk.idle_poll_us"},
                         fmt::format("must be 1000 to 100000 (the event loop's timers count "
                                     "milliseconds), got {}",
                                     cfg.dpdk_idle_poll_us)};
  if (cfg.dpdk_drop_ppm > 500000)
    return ConfigProblem{{"dpdk.drop_ppm"},
                         fmt::format("must be at most 500000 (half the frames), got {}",
                                     cfg.dpdk_drop_ppm)};
  if (dpdk_rx_cpu(cfg) == kRxLcoreBad)
    return ConfigProblem{{"dpdk.rx_lcore"},
                         fmt::format("must be \"off\", \"any\" or a CPU number, got \"{}\"",
                                     cfg.dpdk_rx_lcore)};
  if (cfg.transport == "dpdk" && cfg.dpdk_eal_args.empty())
    return ConfigProblem{{"dpdk.eal_args"},
                         "transport \"dpdk\" needs the port in [dpdk] eal_args (e.g. "
                         "\"--no-huge --no-pci -m 256 --vdev=net_af_packet0,iface=eth0\")"};
  return std::nullopt;
}

// Who may connect to the sockets: their modes and the admin socket's group.
std::optional<ConfigProblem> access_problem(const DaemonConfig& cfg) {
  for (auto [key, mode] : {std::pair{"daemon.socket_mode", cfg.socket_mode},
                           std::pair{"daemon.admin_socket_mode", cfg.admin_socket_mode}}) {
    if (mode > kMaxSocketMode)
      return ConfigProblem{{key}, fmt::format("0o{:o} is not a file mode (at most 0o7777)", mode)};
  }
  if (auto p = check_group_name(cfg.admin_group)) return ConfigProblem{{"daemon.admin_group"}, *p};
  return std::nullopt;
}

}  // namespace

std::span<const ConfigField> config_fields() { return kFields; }

std::string dotted_key(const ConfigField& field) {
  return fmt::format("{}.{}", field.section, field.key);
}

bool parse_byte_size(const std::string& text, uint64_t* out) {
  std::string_view s = trim(text);
  uint64_t number = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec != std::errc() || end == s.data()) return false;
  std::string suffix(trim(std::string_view(end, s.data() + s.size() - end)));
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // "KB"/"GB" are refused on purpose: they mean 1000^n to some readers and
  // 1024^n to others, and an arena size off by 7% is a confusing bug.
  for (const SizeSuffix& sfx : kSizeSuffixes) {
    if (suffix != sfx.name) continue;
    if (sfx.shift > 0 && number > (UINT64_MAX >> sfx.shift)) return false;
    *out = number << sfx.shift;
    return true;
  }
  return false;
}

std::string format_byte_size(uint64_t bytes) {
  static constexpr std::pair<int, char> kUnits[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
  if (bytes != 0) {
    for (auto [shift, unit] : kUnits) {
      uint64_t mask = (uint64_t{1} << shift) - 1;
      if ((bytes & mask) == 0) return fmt::format("{}{}", bytes >> shift, unit);
    }
  }
  return fmt::format("{}", bytes);
}

std::string format_mode(uint32_t mode) { return fmt::format("{:04o}", mode); }

std::optional<ConfigProblem> find_config_problem(const DaemonConfig& cfg) {
  auto problem = [](std::string key, std::string message) {
    return ConfigProblem{{std::move(key)}, std::move(message)};
  };
  if (auto p = check_socket_path(cfg.socket_path)) return problem("daemon.socket", *p);
  if (auto p = check_socket_path(cfg.admin_socket_path)) return problem("daemon.admin_socket", *p);
  if (cfg.socket_path == cfg.admin_socket_path) {
    return ConfigProblem{
        {"daemon.admin_socket", "daemon.socket"},
        fmt::format("must differ from daemon.socket (both are \"{}\")", cfg.socket_path)};
  }
  for (auto section : {access_problem, metrics_problem, trace_problem, dpdk_problem})
    if (auto p = section(cfg)) return p;
  if (std::find(kLogLevels.begin(), kLogLevels.end(), cfg.log_level) == kLogLevels.end()) {
    return problem("daemon.log_level",
                   fmt::format("\"{}\" is not one of {}", cfg.log_level,
                               fmt::join(kLogLevels.begin(), kLogLevels.end(), ", ")));
  }
  if (cfg.reduce_threads > kMaxReduceThreads) {
    return problem("daemon.reduce_threads",
                   fmt::format("{} is more than {} (0 means one per online CPU)",
                               cfg.reduce_threads, kMaxReduceThreads));
  }
  for (const auto& [key, ids] : {std::pair{"auth.allowed_uids", &cfg.allowed_uids},
                                 std::pair{"auth.allowed_gids", &cfg.allowed_gids}}) {
    for (uint32_t id : *ids) {
      if (id > kMaxId) return problem(key, fmt::format("{} is not a valid id", id));
    }
  }
  if (cfg.default_arena_bytes == 0) return problem("limits.default_arena", "must be > 0");
  if (cfg.max_arena_bytes == 0) return problem("limits.max_arena", "must be > 0");
  if (cfg.default_arena_bytes > cfg.max_arena_bytes) {
    return ConfigProblem{
        {"limits.default_arena", "limits.max_arena"},
        fmt::format("limits.default_arena ({}) must not exceed limits.max_arena ({})",
                    format_byte_size(cfg.default_arena_bytes),
                    format_byte_size(cfg.max_arena_bytes))};
  }
  if (cfg.poll_us > kMaxPollUs)
    return problem("daemon.poll_us",
                   fmt::format("must be 0 (always sleep) to {}, got {}", kMaxPollUs, cfg.poll_us));
  if (std::find(kPollModes.begin(), kPollModes.end(), cfg.poll_mode) == kPollModes.end())
    return problem("daemon.poll_mode", fmt::format("\"{}\" is not one of {}", printable(cfg.poll_mode),
                                                   fmt::join(kPollModes.begin(), kPollModes.end(), ", ")));
  if (cfg.max_clients == 0) return problem("limits.max_clients", "must be > 0");
  uint32_t ring = cfg.ring_entries;
  if (ring < kMinRingEntries || ring > kMaxRingEntries || (ring & (ring - 1)) != 0) {
    // Rings index with (head & (entries - 1)), so only powers of two work.
    return problem("limits.ring_entries", fmt::format("must be a power of two in [{}, {}], got {}",
                                                      kMinRingEntries, kMaxRingEntries, ring));
  }
  if (cfg.op_timeout_ms == 0) return problem("limits.op_timeout_ms", "must be > 0");
  if (cfg.tcp_streams < 1 || cfg.tcp_streams > 16)
    return problem("cluster.tcp_streams", fmt::format("must be 1 to 16, got {}", cfg.tcp_streams));
  if (cfg.checkpoint_keep < 1 || cfg.checkpoint_keep > 8)
    return problem("checkpoint.keep", fmt::format("must be 1 to 8, got {}", cfg.checkpoint_keep));
  if (cfg.tcp_streams_cross_rack > 16)
    return problem("cluster.tcp_streams_cross_rack",
                   fmt::format("must be 0 (as tcp_streams) to 16, got {}", cfg.tcp_streams_cross_rack));
  if (cfg.tcp_buffer_kib != 0 && (cfg.tcp_buffer_kib < 16 || cfg.tcp_buffer_kib > 65536))
    return problem("cluster.tcp_buffer_kib",
                   fmt::format("must be 0 (kernel autotuning) or 16 to 65536, got {}",
                               cfg.tcp_buffer_kib));
  if (cfg.peer_timeout_ms < 100)
    return problem("cluster.peer_timeout_ms",
                   fmt::format("must be at least 100, got {}", cfg.peer_timeout_ms));
  if (std::find(kAlgorithms.begin(), kAlgorithms.end(), cfg.algorithm) == kAlgorithms.end()) {
    return problem("cluster.algorithm",
                   fmt::format("\"{}\" is not one of {}", cfg.algorithm,
                               fmt::join(kAlgorithms.begin(), kAlgorithms.end(), ", ")));
  }
  if (std::find(kTransports.begin(), kTransports.end(), cfg.transport) == kTransports.end()) {
    return problem("cluster.transport",
                   fmt::format("\"{}\" is not one of {}", cfg.transport,
                               fmt::join(kTransports.begin(), kTransports.end(), ", ")));
  }
  if (auto p = check_etcd(cfg)) return p;
  if (cfg.chunk_bytes != 0 && (cfg.chunk_bytes < 4096 || cfg.chunk_bytes > (256u << 20)))
    return problem("cluster.chunk_bytes",
                   fmt::format("must be 0 (automatic) or 4K to 256M, got {}", cfg.chunk_bytes));
  return std::nullopt;
}

Status validate_config(const DaemonConfig& cfg) {
  if (auto p = find_config_problem(cfg)) {
    return Status(GSYNC_ERR_INVALID, fmt::format("{}: {}", p->keys.front(), p->message));
  }
  return Status::ok();
}

}  // namespace gsync
