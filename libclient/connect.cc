// SPDX-License-Identifier: Apache-2.0
#include "libclient/connect.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

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

// gsyncd answers the hello at once; a daemon that accepted but hangs must
// not hang the training process forever.
constexpr int kHelloTimeoutMs = 30000;
// A sane ring never needs more; a bigger value is a corrupt header.
constexpr uint32_t kMaxRingEntries = 1u << 20;
// Oldest gsync_config_t layout this library accepts (the 0.1 one).
constexpr uint32_t kMinConfigSize = offsetof(gsync_config_t, timeout_ms) + sizeof(uint32_t);
constexpr uint32_t kMaxConfigSize = 4096;

std::string errno_text(int err) { return std::strerror(err); }

bool is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string where(const ConnectParams& p) {
  return format("socket %s, job %s rank %d", p.socket_path.c_str(), p.job_id.c_str(), p.rank);
}

int connect_socket(const ConnectParams& p, UniqueFd* out) {
  UniqueFd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    return fail(GSYNC_ERR_CONNECT, format("socket(AF_UNIX, SOCK_SEQPACKET): %s (%s)",
                                          errno_text(errno).c_str(), where(p).c_str()));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socklen_t len;
  if (p.socket_path[0] == '@') {
    // Linux abstract namespace: "@name" -> "\0name", no file on disk.
    std::memcpy(addr.sun_path + 1, p.socket_path.data() + 1, p.socket_path.size() - 1);
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + p.socket_path.size());
  } else {
    std::memcpy(addr.sun_path, p.socket_path.data(), p.socket_path.size());
    len = static_cast<socklen_t>(sizeof(addr));
  }
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const int err = errno;
    const int code = (err == EACCES || err == EPERM) ? GSYNC_ERR_PERMISSION : GSYNC_ERR_CONNECT;
    return fail(code,
                format("cannot connect to gsyncd at %s (path from %s): %s%s (job %s rank %d)",
                       p.socket_path.c_str(), p.socket_source.c_str(), errno_text(err).c_str(),
                       err == ENOENT || err == ECONNREFUSED ? "; is gsyncd running?" : "",
                       p.job_id.c_str(), p.rank));
  }
  *out = std::move(sock);
  return GSYNC_OK;
}

int send_hello(const ConnectParams& p, int sock) {
  proto::HelloRequest hello;
  std::memset(&hello, 0, sizeof(hello));
  hello.magic = proto::kHelloMagic;
  hello.version = proto::kVersion;
  std::memcpy(hello.job_id, p.job_id.data(), p.job_id.size());
  hello.world_size = p.world_size;
  hello.rank = p.rank;
  hello.local_rank = p.local_rank;
  hello.local_size = p.local_size;
  hello.arena_bytes = p.arena_bytes;
  hello.timeout_ms = p.timeout_ms;
  hello.sync = p.sync;
  hello.guard = p.guard;
  hello.plan = p.plan;
  hello.min_hosts = p.min_hosts;
  hello.max_hosts = p.max_hosts;
  ssize_t n;
  do {
    n = ::send(sock, &hello, sizeof(hello), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(hello))) {
    return fail(GSYNC_ERR_CONNECT,
                format("sending the hello to gsyncd failed: %s (%s)",
                       n < 0 ? errno_text(errno).c_str() : "short write", where(p).c_str()));
  }
  return GSYNC_OK;
}

int wait_readable(const ConnectParams& p, int sock) {
  pollfd pfd{sock, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, kHelloTimeoutMs);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    return fail(GSYNC_ERR_CONNECT, format("gsyncd did not answer the hello within %d ms (%s)",
                                          kHelloTimeoutMs, where(p).c_str()));
  }
  if (rc < 0) {
    return fail(GSYNC_ERR_CONNECT, format("poll on the gsyncd socket: %s (%s)",
                                          errno_text(errno).c_str(), where(p).c_str()));
  }
  return GSYNC_OK;
}

// Receives the reply and every fd that came with it, whatever their number,
// so none leaks on an error path.
int recv_reply(const ConnectParams& p, int sock, proto::HelloReply* reply,
               std::vector<UniqueFd>* fds) {
  if (int rc = wait_readable(p, sock); rc != GSYNC_OK) return rc;
  // Room for a longer reply than ours, to tell "too long" from "ours".
  alignas(proto::HelloReply) char buf[sizeof(proto::HelloReply) + 256];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return fail(GSYNC_ERR_CONNECT, format("receiving the hello reply: %s (%s)",
                                          errno_text(errno).c_str(), where(p).c_str()));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(fd);
    }
  }
  if (n == 0) {
    return fail(GSYNC_ERR_CONNECT,
                format("gsyncd closed the connection without answering the hello; its log says "
                       "why (%s)",
                       where(p).c_str()));
  }
  // Magic and version come first in every version of the reply.
  if (n < 8) {
    return fail(GSYNC_ERR_PROTOCOL,
                format("hello reply of %zd bytes is too short (%s)", n, where(p).c_str()));
  }
  uint32_t magic, version;
  std::memcpy(&magic, buf, 4);
  std::memcpy(&version, buf + 4, 4);
  if (magic != proto::kHelloMagic) {
    return fail(GSYNC_ERR_PROTOCOL,
                format("the peer at the socket is not gsyncd: hello reply magic 0x%08x, expected "
                       "0x%08x (%s)",
                       magic, proto::kHelloMagic, where(p).c_str()));
  }
  if (version != proto::kVersion) {
    return fail(GSYNC_ERR_VERSION,
                format("gsyncd speaks protocol version %u, this libgsync %d.%d.%d speaks version "
                       "%u; install matching versions (%s)",
                       version, GSYNC_VERSION_MAJOR, GSYNC_VERSION_MINOR, GSYNC_VERSION_PATCH,
                       proto::kVersion, where(p).c_str()));
  }
  if (static_cast<size_t>(n) != sizeof(proto::HelloReply) || (msg.msg_flags & MSG_TRUNC)) {
    return fail(GSYNC_ERR_PROTOCOL, format("hello reply is %zd bytes, expected %zu (%s)", n,
                                           sizeof(proto::HelloReply), where(p).c_str()));
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    return fail(GSYNC_ERR_PROTOCOL,
                format("hello reply carried more fds than the 3 expected (%s)", where(p).c_str()));
  }
  std::memcpy(reply, buf, sizeof(*reply));
  return GSYNC_OK;
}

int check_status(const ConnectParams& p, const proto::HelloReply& reply) {
  if (reply.status == GSYNC_OK) return GSYNC_OK;
  const std::string why(reply.message, strnlen(reply.message, sizeof(reply.message)));
  if (reply.status == GSYNC_ERR_VERSION) {
    return fail(GSYNC_ERR_VERSION,
                format("gsyncd (protocol version %u) refused this libgsync (protocol version %u): "
                       "%s (%s)",
                       reply.version, proto::kVersion, why.c_str(), where(p).c_str()));
  }
  if (reply.status != 0 && !proto::is_error_code(reply.status)) {
    return fail(GSYNC_ERR_PROTOCOL, format("gsyncd answered the hello with unknown status %d: %s "
                                           "(%s)",
                                           reply.status, why.c_str(), where(p).c_str()));
  }
  return fail(reply.status,
              format("gsyncd refused the session: %s (%s)",
                     why.empty() ? error_name(reply.status) : why.c_str(), where(p).c_str()));
}

// Maps the memfd so that the arena starts on a kArenaAlign (2 MiB) virtual
// boundary: the layout puts the arena at a 2 MiB file offset, and only an
// equally aligned address lets transparent huge pages back it. Over-reserve
// address space, map over it with MAP_FIXED, and trim the slack.
int map_shm(const ConnectParams& p, int memfd, uint64_t bytes, SharedMapping* out) {
  const size_t len = proto::align_up(bytes, proto::kPage);
  const size_t reserve = len + proto::kArenaAlign;
  void* r = ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) {
    return fail(GSYNC_ERR_NOMEM,
                format("reserving %s of address space for the session: %s (%s)",
                       format_bytes(reserve).c_str(), errno_text(errno).c_str(), where(p).c_str()));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(r);
  const uintptr_t aligned = proto::align_up(start, proto::kArenaAlign);
  void* m = ::mmap(reinterpret_cast<void*>(aligned), len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, memfd, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    ::munmap(r, reserve);
    return fail(GSYNC_ERR_NOMEM,
                format("mmap of the %s session memfd: %s (%s)", format_bytes(len).c_str(),
                       errno_text(err).c_str(), where(p).c_str()));
  }
  if (aligned > start) ::munmap(r, aligned - start);
  const uintptr_t end = aligned + len;
  if (start + reserve > end) ::munmap(reinterpret_cast<void*>(end), start + reserve - end);
  *out = SharedMapping(m, len);
  return GSYNC_OK;
}

// The daemon is trusted to run the collective, not to be bug-free: a header
// that would make the client read or write outside the mapping is refused.
int check_geometry(const ConnectParams& p, const proto::HelloReply& reply, const char* base,
                   ShmGeometry* g) {
  proto::ShmHeader h;
  std::memcpy(static_cast<void*>(&h), base, offsetof(proto::ShmHeader, sq_tail));
  auto bad = [&](const std::string& what) {
    return fail(GSYNC_ERR_PROTOCOL, format("gsyncd sent a bad shared-memory header: %s (%s)",
                                           what.c_str(), where(p).c_str()));
  };
  if (h.magic != proto::kShmMagic) return bad(format("magic 0x%08x", h.magic));
  if (h.version != proto::kVersion) {
    return bad(format("header version %u, hello version %u", h.version, proto::kVersion));
  }
  if (h.total_bytes != reply.shm_bytes) {
    return bad(format("total_bytes %llu, hello said shm_bytes %llu",
                      static_cast<unsigned long long>(h.total_bytes),
                      static_cast<unsigned long long>(reply.shm_bytes)));
  }
  if (h.session_id != reply.session_id) return bad("session_id differs from the hello");
  if (!is_pow2(h.sq_entries) || h.sq_entries > kMaxRingEntries) {
    return bad(format("sq_entries %u is not a power of two <= %u", h.sq_entries, kMaxRingEntries));
  }
  if (!is_pow2(h.cq_entries) || h.cq_entries > kMaxRingEntries) {
    return bad(format("cq_entries %u is not a power of two <= %u", h.cq_entries, kMaxRingEntries));
  }
  struct Region {
    const char* name;
    uint64_t offset, bytes, align;
  };
  const std::array<Region, 4> regions{{
      {"header", 0, sizeof(proto::ShmHeader), 1},
      {"submission ring", h.sq_offset, uint64_t{h.sq_entries} * sizeof(proto::SubmitEntry), 64},
      {"completion ring", h.cq_offset, uint64_t{h.cq_entries} * sizeof(proto::CompleteEntry), 64},
      // Page alignment keeps every 256-byte arena block 256-byte aligned.
      {"arena", h.arena_offset, h.arena_bytes, proto::kPage},
  }};
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& a = regions[i];
    if (a.offset % a.align != 0 || a.offset > h.total_bytes || a.bytes > h.total_bytes - a.offset) {
      return bad(format("%s [%llu, +%llu) is misaligned or outside the %llu-byte memfd", a.name,
                        static_cast<unsigned long long>(a.offset),
                        static_cast<unsigned long long>(a.bytes),
                        static_cast<unsigned long long>(h.total_bytes)));
    }
    for (size_t j = 0; j < i; ++j) {
      const Region& b = regions[j];
      if (a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes) {
        return bad(format("%s overlaps the %s", a.name, b.name));
      }
    }
  }
  if (p.arena_bytes != 0 && h.arena_bytes < p.arena_bytes) {
    return bad(format("arena of %s, asked for %s", format_bytes(h.arena_bytes).c_str(),
                      format_bytes(p.arena_bytes).c_str()));
  }
  g->total_bytes = h.total_bytes;
  g->sq_entries = h.sq_entries;
  g->cq_entries = h.cq_entries;
  g->sq_offset = h.sq_offset;
  g->cq_offset = h.cq_offset;
  g->arena_offset = h.arena_offset;
  g->arena_bytes = h.arena_bytes;
  return GSYNC_OK;
}

}  // namespace


namespace {
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
  if (cfg->socket_path != nullptr) {
    p.socket_path = cfg->socket_path;
    p.socket_source = "cfg.socket_path";
  } else if (const char* env = std::getenv("GSYNC_SOCKET"); env != nullptr && *env != '\0') {
    p.socket_path = env;
    p.socket_source = "$GSYNC_SOCKET";
  } else {
    p.socket_path = GSYNC_DEFAULT_SOCKET;
    p.socket_source = "the default";
  }
  if (p.socket_path.empty() || p.socket_path == "@" ||
      p.socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return fail(
        GSYNC_ERR_INVALID,
        format("gsync_connect: socket path '%s' (from %s) is empty or longer than %zu bytes",
               p.socket_path.c_str(), p.socket_source.c_str(), sizeof(sockaddr_un{}.sun_path) - 1));
  }
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
  if (cfg->struct_size >= offsetof(gsync_config_t, staleness) + sizeof(uint32_t)) {
    proto::Sync sync;
    if (!proto::sync_from_wire(cfg->sync_mode, &sync.mode))
      return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.sync_mode %d is not a "
                                            "gsync_sync_mode_t (GSYNC_SYNC_BSP .. GSYNC_SYNC_SSP)",
                                            cfg->sync_mode));
    if (sync.mode == proto::SyncMode::kSsp) sync.staleness = cfg->staleness;
    if (sync.mode != proto::SyncMode::kSsp && cfg->staleness != 0)
      return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.staleness %u with sync mode %s "
                                            "(GSYNC_SYNC_SSP only)",
                                            cfg->staleness, proto::name(sync.mode)));
    if (sync.staleness > proto::kMaxStaleness)
      return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.staleness %u is over %u",
                                            cfg->staleness, proto::kMaxStaleness));
    p.sync = proto::to_wire(sync);
  }
  if (cfg->struct_size >= offsetof(gsync_config_t, anomaly_window) + sizeof(uint32_t) &&
      cfg->anomaly_guard != 0) {
    proto::Guard g;
    g.on = true;
    if (cfg->anomaly_sigmas != 0) {
      if (cfg->anomaly_sigmas > proto::kMaxGuardSigmas)
        return fail(GSYNC_ERR_INVALID, format("gsync_connect: cfg.anomaly_sigmas %u is over %u",
                                              cfg->anomaly_sigmas, unsigned{proto::kMaxGuardSigmas}));
      g.sigmas = static_cast<uint8_t>(cfg->anomaly_sigmas);
    }
    if (cfg->anomaly_window != 0) {
      if (cfg->anomaly_window < proto::kMinGuardWindow || cfg->anomaly_window > 65535)
        return fail(GSYNC_ERR_INVALID,
                    format("gsync_connect: cfg.anomaly_window %u is outside %u .. 65535",
                           cfg->anomaly_window, unsigned{proto::kMinGuardWindow}));
      g.window = static_cast<uint16_t>(cfg->anomaly_window);
    }
    p.guard = proto::to_wire(g);
  }
  if (int rc = plan_from_config(*cfg, &p.plan); rc != GSYNC_OK) return rc;
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

int connect_session(const ConnectParams& p, Connection* out) {
  Connection c;
  if (int rc = connect_socket(p, &c.sock); rc != GSYNC_OK) return rc;
  if (int rc = send_hello(p, c.sock.get()); rc != GSYNC_OK) return rc;
  proto::HelloReply reply;
  std::vector<UniqueFd> fds;
  if (int rc = recv_reply(p, c.sock.get(), &reply, &fds); rc != GSYNC_OK) return rc;
  if (int rc = check_status(p, reply); rc != GSYNC_OK) return rc;
  if (fds.size() != 3) {
    return fail(GSYNC_ERR_PROTOCOL, format("hello reply carried %zu fds, expected 3 (memfd, "
                                           "submission and completion doorbells) (%s)",
                                           fds.size(), where(p).c_str()));
  }
  UniqueFd memfd = std::move(fds[0]);
  c.sq_doorbell = std::move(fds[1]);
  c.cq_doorbell = std::move(fds[2]);

  struct stat st;
  if (::fstat(memfd.get(), &st) != 0) {
    return fail(GSYNC_ERR_PROTOCOL, format("fstat of the session memfd: %s (%s)",
                                           errno_text(errno).c_str(), where(p).c_str()));
  }
  if (reply.shm_bytes < sizeof(proto::ShmHeader) || st.st_size < 0 ||
      reply.shm_bytes > static_cast<uint64_t>(st.st_size)) {
    return fail(GSYNC_ERR_PROTOCOL,
                format("hello says shm_bytes %llu but the memfd holds %lld bytes (%s)",
                       static_cast<unsigned long long>(reply.shm_bytes),
                       static_cast<long long>(st.st_size), where(p).c_str()));
  }
  // A memfd the daemon could still shrink would turn any later access into
  // SIGBUS in this process; the protocol promises F_SEAL_SHRINK.
  const int seals = ::fcntl(memfd.get(), F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    return fail(GSYNC_ERR_PROTOCOL,
                format("the session memfd is not sealed against shrinking (seals %d); refusing to "
                       "map it (%s)",
                       seals, where(p).c_str()));
  }
  if (int rc = map_shm(p, memfd.get(), reply.shm_bytes, &c.shm); rc != GSYNC_OK) return rc;
  if (int rc = check_geometry(p, reply, c.shm.base(), &c.geometry); rc != GSYNC_OK) return rc;
  // The arena should be backed by huge pages where the kernel allows it;
  // failure (THP off for shmem) only costs TLB misses.
  ::madvise(c.shm.base() + c.geometry.arena_offset, c.geometry.arena_bytes, MADV_HUGEPAGE);

  // The client only ever drains this doorbell (waiters, gsync_test after
  // gsync_completion_fd), and must never block there. The flag lives on the
  // shared open file description, which is harmless for the daemon: a write
  // to an eventfd blocks only near counter overflow.
  const int flags = ::fcntl(c.cq_doorbell.get(), F_GETFL);
  if (flags < 0 || ::fcntl(c.cq_doorbell.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return fail(GSYNC_ERR_PROTOCOL, format("the completion doorbell is not a usable fd: %s (%s)",
                                           errno_text(errno).c_str(), where(p).c_str()));
  }
  c.session_id = reply.session_id;
  c.default_timeout_ms = reply.default_timeout_ms;
  *out = std::move(c);
  return GSYNC_OK;
}

}  // namespace gsync::client
