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
#include <cstring>
#include <vector>

#include "libclient/error.h"
#include "libclient/format.h"
#include "protocol/wire.h"

namespace gsync::client {
namespace {

namespace proto = gsync::proto;

// gsyncd answers the hello at once; a daemon that accepted but hangs must
// not hang the training process forever.
constexpr int kHelloTimeoutMs = 30000;
// A sane ring never needs more; a bigger value is a corrupt header.
constexpr uint32_t kMaxRingEntries = 1u << 20;

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
