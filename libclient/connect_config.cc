// SPDX-License-Identifier: Apache-2.0
//
// gsync_config_t checked and resolved into ConnectParams (connect.h): each
// field as the struct's size says the caller's library version has it, the
// environment's overrides, the defaults. Every refusal names the field.
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "libclient/connect.h"
#include "libclient/error.h"
#include "libclient/format.h"
#include "protocol/compression.h"
#include "protocol/guard.h"
#include "protocol/plan_choice.h"
#include "protocol/ps.h"
#include "protocol/wire.h"
#include "protocol/world.h"

namespace gsync::client {
namespace {

namespace proto = gsync::proto;

// Oldest gsync_config_t layout this library accepts (the 0.1 one).
constexpr uint32_t kMinConfigSize = offsetof(gsync_config_t, timeout_ms) + sizeof(uint32_t);
constexpr uint32_t kMaxConfigSize = 4096;

// An elastic job's bounds: the 0.5 fields, then the environment.
int elastic_from_config(const gsync_config_t& cfg, ConnectParams* p) {
  int64_t lo = 0, hi = 0;
  if (cfg.struct_size >= offsetof(gsync_config_t, max_hosts) + sizeof(int32_t)) {
    lo = cfg.min_hosts;
    hi = cfg.max_hosts;
  }
  for (auto [name, v] : {std::pair{"GSYNC_MIN_HOSTS", &lo}, std::pair{"GSYNC_MAX_HOSTS", &hi}}) {
    const char* env = std::getenv(name);
    if (env == nullptr || *env == '\0') continue;
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(env, &end, 10);
    if (errno != 0 || *end != '\0' || n < 0 || n > proto::kMaxElasticHosts)
      return fail(GSYNC_ERR_INVALID, format("gsync_connect: $%s '%s' is not a number of hosts "
                                            "(0 .. %d)",
                                            name, env, proto::kMaxElasticHosts));
    *v = n;
  }
  if (lo < 0 || lo > proto::kMaxElasticHosts || hi < 0 || hi > proto::kMaxElasticHosts)
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.min_hosts %lld and cfg.max_hosts "
                                          "%lld must be in 0 .. %d",
                                          static_cast<long long>(lo), static_cast<long long>(hi),
                                          proto::kMaxElasticHosts));
  if (lo == 0 && hi != 0)
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.max_hosts %lld without min_hosts "
                                          "(an elastic job sets min_hosts >= 1)",
                                          static_cast<long long>(hi)));
  if (hi != 0 && hi < lo)
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.max_hosts %lld is below min_hosts "
                                          "%lld",
                                          static_cast<long long>(hi), static_cast<long long>(lo)));
  p->min_hosts = static_cast<uint16_t>(lo);
  p->max_hosts = static_cast<uint16_t>(hi);
  return GSYNC_OK;
}

// The job's algorithm and chunk size: the 0.4 fields, then the environment.
int plan_from_config(const gsync_config_t& cfg, uint32_t* out) {
  proto::PlanChoice plan;
  std::string algo = "auto", where = "cfg.algorithm";
  uint64_t chunk = 0;
  if (cfg.struct_size >= offsetof(gsync_config_t, chunk_bytes) + sizeof(uint64_t)) {
    if (cfg.algorithm != nullptr) algo = std::string(cfg.algorithm, strnlen(cfg.algorithm, 32));
    chunk = cfg.chunk_bytes;
  }
  if (const char* env = std::getenv("GSYNC_ALGORITHM"); env != nullptr && *env != '\0') {
    algo = std::string(env, strnlen(env, 32));
    where = "$GSYNC_ALGORITHM";
  }
  if (!proto::algo_by_name(algo, &plan.algo))
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: %s '%s' is not auto, ring, hier, direct, "
                                          "tree or doubling",
                                          where.c_str(), algo.c_str()));
  where = "cfg.chunk_bytes";
  if (const char* env = std::getenv("GSYNC_CHUNK_BYTES"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    errno = 0;
    chunk = std::strtoull(env, &end, 10);
    if (errno != 0 || *end != '\0' || *env == '-')
      return fail(GSYNC_ERR_INVALID,
                  format("gsync_connect: $GSYNC_CHUNK_BYTES '%.32s' is not a number of bytes", env));
    where = "$GSYNC_CHUNK_BYTES";
  }
  if (std::string why = proto::check_chunk_bytes(chunk); !why.empty())
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: %s: %s", where.c_str(), why.c_str()));
  plan.chunk_bytes = chunk;
  *out = proto::to_wire(plan);
  return GSYNC_OK;
}

// The daemon's socket: cfg.socket_path, else $GSYNC_SOCKET, else the
// default; where it came from goes into every error about it.
int socket_from_config(const gsync_config_t& cfg, ConnectParams* p) {
  if (cfg.socket_path != nullptr) {
    p->socket_path = cfg.socket_path;
    p->socket_source = "cfg.socket_path";
  } else if (const char* env = std::getenv("GSYNC_SOCKET"); env != nullptr && *env != '\0') {
    p->socket_path = env;
    p->socket_source = "$GSYNC_SOCKET";
  } else {
    p->socket_path = GSYNC_DEFAULT_SOCKET;
    p->socket_source = "the default";
  }
  if (p->socket_path.empty() || p->socket_path == "@" ||
      p->socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return fail(
        GSYNC_ERR_INVALID,
        format("gsync_connect: socket path '%s' (from %s) is empty or longer than %zu bytes",
               p->socket_path.c_str(), p->socket_source.c_str(),
               sizeof(sockaddr_un{}.sun_path) - 1));
  }
  return GSYNC_OK;
}

// The job's sync mode and staleness: the 0.2 fields; BSP before them.
int sync_from_config(const gsync_config_t& cfg, uint32_t* out) {
  if (cfg.struct_size < offsetof(gsync_config_t, staleness) + sizeof(uint32_t)) return GSYNC_OK;
  proto::Sync sync;
  if (!proto::sync_from_wire(cfg.sync_mode, &sync.mode))
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.sync_mode %d is not a "
                                          "gsync_sync_mode_t (GSYNC_SYNC_BSP .. GSYNC_SYNC_SSP)",
                                          cfg.sync_mode));
  if (sync.mode == proto::SyncMode::kSsp) sync.staleness = cfg.staleness;
  if (sync.mode != proto::SyncMode::kSsp && cfg.staleness != 0)
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.staleness %u with sync mode %s "
                                          "(GSYNC_SYNC_SSP only)",
                                          cfg.staleness, proto::name(sync.mode)));
  if (sync.staleness > proto::kMaxStaleness)
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.staleness %u is over %u",
                                          cfg.staleness, proto::kMaxStaleness));
  *out = proto::to_wire(sync);
  return GSYNC_OK;
}

// The job's anomaly guard: the 0.3 fields; off before them or unless asked.
int guard_from_config(const gsync_config_t& cfg, uint32_t* out) {
  if (cfg.struct_size < offsetof(gsync_config_t, anomaly_window) + sizeof(uint32_t) ||
      cfg.anomaly_guard == 0)
    return GSYNC_OK;
  proto::Guard g;
  g.on = true;
  if (cfg.anomaly_sigmas != 0) {
    if (cfg.anomaly_sigmas > proto::kMaxGuardSigmas)
      return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.anomaly_sigmas %u is over %u",
                                            cfg.anomaly_sigmas, unsigned{proto::kMaxGuardSigmas}));
    g.sigmas = static_cast<uint8_t>(cfg.anomaly_sigmas);
  }
  if (cfg.anomaly_window != 0) {
    if (cfg.anomaly_window < proto::kMinGuardWindow || cfg.anomaly_window > 65535)
      return fail(GSYNC_ERR_INVALID,
                  format("gsync_connect: cfg.anomaly_window %u is outside %u .. 65535",
                         cfg.anomaly_window, unsigned{proto::kMinGuardWindow}));
    g.window = static_cast<uint16_t>(cfg.anomaly_window);
  }
  *out = proto::to_wire(g);
  return GSYNC_OK;
}

}  // namespace

int parse_config(const gsync_config_t* cfg, ConnectParams* out) {
  if (cfg == nullptr) return fail(GSYNC_ERR_INVALID, "gsync_connect: cfg is NULL");
  if (cfg->struct_size < kMinConfigSize || cfg->struct_size > kMaxConfigSize) {
    return fail(GSYNC_ERR_INVALID,
                format("gsync_connect: cfg->struct_size is %u, expected %zu; initialize the "
                       "config with gsync_config_init",
                       cfg->struct_size, sizeof(gsync_config_t)));
  }
  ConnectParams p;
  if (int rc = socket_from_config(*cfg, &p); rc != GSYNC_OK) return rc;
  if (cfg->job_id == nullptr || cfg->job_id[0] == '\0') {
    return fail(GSYNC_ERR_INVALID, "gsync_connect: cfg.job_id is NULL or empty");
  }
  const size_t job_len = strnlen(cfg->job_id, proto::kJobIdMax);
  if (job_len >= proto::kJobIdMax) {
    return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.job_id '%.*s...' is longer than %zu "
                                          "bytes",
                                          20, cfg->job_id, proto::kJobIdMax - 1));
  }
  p.job_id.assign(cfg->job_id, job_len);
  p.world_size = cfg->world_size;
  p.rank = cfg->rank;
  p.local_rank = cfg->local_rank;
  p.local_size = cfg->local_size;
  p.arena_bytes = cfg->arena_bytes;
  p.timeout_ms = cfg->timeout_ms;
  auto bad = [&](const char* what) {
    return fail(GSYNC_ERR_INVALID,
                format("gsync_connect: %s (world_size %d rank %d local_rank %d local_size %d, "
                       "job %s)",
                       what, p.world_size, p.rank, p.local_rank, p.local_size, p.job_id.c_str()));
  };
  if (int rc = elastic_from_config(*cfg, &p); rc != GSYNC_OK) return rc;
  if (p.min_hosts > 0) {
    if (p.world_size != 0 || p.rank != 0)
      return bad("an elastic job (min_hosts > 0) leaves world_size and rank 0: the daemons "
                 "number its ranks");
    if (p.local_size < 1) return bad("local_size must be >= 1");
  } else {
    if (p.world_size < 1) return bad("world_size must be >= 1");
    if (p.rank < 0 || p.rank >= p.world_size) return bad("rank must be in [0, world_size)");
    if (p.local_size < 1 || p.local_size > p.world_size) {
      return bad("local_size must be in [1, world_size]");
    }
  }
  if (p.local_rank < 0 || p.local_rank >= p.local_size) {
    return bad("local_rank must be in [0, local_size)");
  }
  if (cfg->struct_size >= offsetof(gsync_config_t, compression) + sizeof(gsync_compression_t)) {
    if (int rc = compression_from_public(cfg->compression, "gsync_connect: cfg.compression",
                                         &p.compression);
        rc != GSYNC_OK)
      return rc;
  }
  if (int rc = sync_from_config(*cfg, &p.sync); rc != GSYNC_OK) return rc;
  if (int rc = guard_from_config(*cfg, &p.guard); rc != GSYNC_OK) return rc;
  if (int rc = plan_from_config(*cfg, &p.plan); rc != GSYNC_OK) return rc;
  if (cfg->struct_size >= offsetof(gsync_config_t, reproducible) + sizeof(int32_t))
    p.reproducible = cfg->reproducible != 0;
  if (const char* env = std::getenv("GSYNC_REPRODUCIBLE"); env != nullptr && *env != '\0') {
    if (std::strcmp(env, "0") != 0 && std::strcmp(env, "1") != 0)
      return fail(GSYNC_ERR_INVALID,
                  format("gsync_connect: $GSYNC_REPRODUCIBLE '%s' is not 0 or 1", env));
    p.reproducible = env[0] == '1';
  }
  // The guard checks the floats the daemons reduce; a reproducible op's
  // travel as integers, so the two would leave every op unchecked.
  if (p.reproducible && p.guard != 0)
    return fail(GSYNC_ERR_INVALID,
                "gsync_connect: reproducible allreduces travel as integers, which the anomaly "
                "guard cannot check: turn off cfg.anomaly_guard or cfg.reproducible "
                "($GSYNC_REPRODUCIBLE)");
  if (const char* env = std::getenv("GSYNC_COMPRESSION"); env != nullptr && *env != '\0') {
    if (std::string why = proto::parse(env, &p.compression); !why.empty())
      return fail(GSYNC_ERR_INVALID, format("gsync_connect: $GSYNC_COMPRESSION: %s", why.c_str()));
  }
  *out = std::move(p);
  return GSYNC_OK;
}

int compression_from_public(const gsync_compression_t& in, const char* where,
                            proto::Compression* out) {
  proto::Compression c;
  if (!proto::codec_from_wire(in.codec, &c.codec))
    return fail(GSYNC_ERR_INVALID, format("%s: codec %d is not a gsync_codec_t "
                                          "(GSYNC_CODEC_NONE .. GSYNC_CODEC_TOPK)",
                                          where, in.codec));
  if (!proto::hops_from_wire(in.hops, &c.hops))
    return fail(GSYNC_ERR_INVALID, format("%s: hops %d is not a gsync_hops_t "
                                          "(GSYNC_HOPS_CROSS_RACK .. GSYNC_HOPS_ALL)",
                                          where, in.hops));
  c.error_feedback = in.error_feedback != 0;
  c.block = in.block;
  c.topk_fraction = in.topk_fraction;
  c = proto::with_defaults(c);
  if (std::string why = proto::check_params(c); !why.empty())
    return fail(GSYNC_ERR_INVALID, format("%s: %s", where, why.c_str()));
  *out = c;
  return GSYNC_OK;
}

}  // namespace gsync::client
