// SPDX-License-Identifier: Apache-2.0
#include "daemon/shm/client_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/shm/device_requests.h"

namespace gsync {

namespace {
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
}  // namespace

ClientListener::ClientListener(const DaemonConfig& cfg, EventLoop& loop, ClientSink& sink,
                               Worker* gpu_worker)
    : cfg_(cfg), loop_(loop), sink_(sink), gpu_worker_(gpu_worker) {}

ClientListener::~ClientListener() {
  for (auto& [id, s] : sessions_) s->closed = true;
  for (auto& [fd, deadline] : handshakes_) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(cfg_.socket_path.c_str());
  }
}

Status ClientListener::start() {
  Status err;
  listen_fd_ = listen_unix(cfg_.socket_path, SOCK_SEQPACKET, cfg_.socket_mode, &err);
  if (listen_fd_ < 0) return err;
  loop_.add(listen_fd_, EPOLLIN, [this](uint32_t) { accept_clients(); });
  if (cfg_.poll_us > 0) {
    // While the loop polls it reads the submission rings itself, and the
    // clients skip the doorbell (docs/protocol.md, "Doorbells").
    loop_.add_looker([this] { return take_all_submissions(); },
                     [this](bool on) {
                       for (auto& [id, s] : sessions_) s->set_polled(on);
                       std::atomic_thread_fence(std::memory_order_seq_cst);
                     });
  }
  return Status::ok();
}

void ClientListener::tick(std::chrono::steady_clock::time_point now) {
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    spdlog::warn("client on fd {} sent no hello within {} s; dropped", it->first,
                 kHandshakeTimeout.count());
    loop_.remove(it->first);
    close(it->first);
    it = handshakes_.erase(it);
  }
}

void ClientListener::accept_clients() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        spdlog::error("accept on {}: {}", cfg_.socket_path, strerror(errno));
      return;
    }
    handshakes_[fd] = std::chrono::steady_clock::now() + kHandshakeTimeout;
    loop_.add(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t) { on_hello(fd); });
  }
}

bool ClientListener::allowed(const Peer& peer) const {
  if (peer.uid == 0 || peer.uid == getuid()) return true;
  if (std::find(cfg_.allowed_uids.begin(), cfg_.allowed_uids.end(), peer.uid) !=
      cfg_.allowed_uids.end())
    return true;
  return std::find(cfg_.allowed_gids.begin(), cfg_.allowed_gids.end(), peer.gid) !=
         cfg_.allowed_gids.end();
}

void ClientListener::refuse(int fd, const Peer& peer, const Status& st) {
  spdlog::warn("refused client pid {} uid {}: {}", peer.pid, peer.uid, st.message());
  send_reply(fd, refusal(st), {});
  close(fd);
}

void ClientListener::on_hello(int fd) {
  handshakes_.erase(fd);
  loop_.remove(fd);
  Peer peer;
  proto::HelloRequest hello{};
  Status st;
  // The hello is read even from a client about to be refused: closing a
  // socket with unread data resets it, and the client would see ECONNRESET
  // instead of the reason.
  Status hello_st = read_hello(fd, &hello);
  if (!peer_credentials(fd, &peer)) {
    st = Status(GSYNC_ERR_INTERNAL, fmt::format("SO_PEERCRED: {}", strerror(errno)));
  } else if (!allowed(peer)) {
    st = Status(GSYNC_ERR_PERMISSION,
                fmt::format("uid {} gid {} (pid {}) is not allowed to use gsyncd on {}; allowed: "
                            "root, uid {}, [auth] allowed_uids/allowed_gids",
                            peer.uid, peer.gid, peer.pid, cfg_.socket_path, getuid()));
  } else {
    st = hello_st;
  }
  if (st && sessions_.size() >= cfg_.max_clients)
    st = Status(GSYNC_ERR_REFUSED, fmt::format("daemon is at its limit of {} clients "
                                               "([limits] max_clients)",
                                               cfg_.max_clients));
  if (!st) return refuse(fd, peer, st);
  open_session(fd, peer, hello);
}

void ClientListener::open_session(int fd, const Peer& peer, const proto::HelloRequest& hello) {
  JoinRequest join = join_request(hello);
  uint64_t arena = hello.arena_bytes ? hello.arena_bytes : cfg_.default_arena_bytes;
  reap_stale_holder(join);
  Status st = sink_.check_join(join);
  if (st && arena > cfg_.max_arena_bytes)
    st = Status(GSYNC_ERR_NOMEM, fmt::format("job {} rank {} asked for a {}-byte arena; this "
                                             "daemon allows at most {} ([limits] max_arena)",
                                             join.job_id, join.rank, arena, cfg_.max_arena_bytes));
  std::unique_ptr<Session> created;
  if (st) st = Session::create(next_session_, cfg_.ring_entries, arena, &created);
  if (!st) return refuse(fd, peer, st);
  std::shared_ptr<Session> s(std::move(created));
  next_session_++;
  s->socket_fd = fd;
  s->peer = peer;
  s->job_id = join.job_id;
  s->rank = join.rank;
  s->local_rank = join.local_rank;
  s->world_size = join.world_size;
  s->local_size = join.local_size;
  s->sync = join.sync;
  s->guard = join.guard;
  s->plan = join.plan;
  s->min_hosts = join.min_hosts;
  s->max_hosts = join.max_hosts;
  s->timeout_ms = hello.timeout_ms ? hello.timeout_ms : cfg_.op_timeout_ms;

  proto::HelloReply reply{};
  reply.magic = proto::kHelloMagic;
  reply.version = proto::kVersion;
  reply.session_id = s->id();
  reply.shm_bytes = s->shm_bytes();
  reply.default_timeout_ms = s->timeout_ms;
  if (!send_reply(fd, reply, {s->memfd(), s->sq_doorbell(), s->cq_doorbell()})) {
    spdlog::warn("{}: sending the session fds failed: {}", s->describe(), strerror(errno));
    return;  // the Session destructor closes everything
  }
  sessions_[s->id()] = s;
  sink_.attach(s);
  watch(s);
  spdlog::info("{} connected: session {}, uid {}, arena {} MiB", s->describe(), s->id(), peer.uid,
               s->arena_bytes() >> 20);
}

void ClientListener::watch(const std::shared_ptr<Session>& s) {
  loop_.add(s->sq_doorbell(), EPOLLIN, [this, s](uint32_t) { on_doorbell(s); });
  // After the hello the socket carries device memory requests
  // (device_requests.h); its hangup is how a client's death (even SIGKILL)
  // reaches us.
  loop_.add(s->socket_fd, EPOLLIN | EPOLLRDHUP, [this, s](uint32_t ev) { on_socket(s, ev); });
}

void ClientListener::on_socket(const std::shared_ptr<Session>& s, uint32_t ev) {
  // While a registration is imported (off this thread) the socket is
  // watched for hangup only, and its next requests wait their turn: one
  // request answered at a time, in order.
  if (s->device_request_busy) {
    if (ev & (EPOLLHUP | EPOLLRDHUP | EPOLLERR))
      close_session(s, "disconnected (its connection closed: exited or killed)");
    return;
  }
  // Requests first: a client that registers memory and exits at once has
  // both a message and a hangup waiting, and the message is moot then.
  while (!s->closed && !s->device_request_busy) {
    // Room for more than a request: a longer message is read whole (and
    // refused), not taken for a request and the rest of another.
    alignas(proto::DeviceRequest) char buf[sizeof(proto::DeviceRequest) + 64];
    iovec iov[1] = {{buf, sizeof buf}};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(s->socket_fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n <= 0) {
      if (n == 0 || (n < 0 && errno != EAGAIN) || (ev & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)))
        close_session(s, "disconnected (its connection closed: exited or killed)");
      return;
    }
    std::vector<int> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
    }
    proto::DeviceRequest req{};
    Status st = parse_device_request(buf, static_cast<size_t>(n), &req);
    if (st && (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
      st = Status(GSYNC_ERR_PROTOCOL, "a device memory request with more than one fd or too long");
    else if (st && fds.size() > 1)
      st = Status(GSYNC_ERR_PROTOCOL, fmt::format("a device memory request with {} fds (one at "
                                                  "most)",
                                                  fds.size()));
    if (st) {
      s->device_request_busy = true;
      handle_device_request(s, req, fds.empty() ? -1 : fds[0], gpu_worker_,
                            [this, s](const proto::DeviceReply& r) { answer(s, r); });
      // Still busy: the answer comes from the worker; reading stops till then.
      if (s->device_request_busy && !s->closed) {
        loop_.modify(s->socket_fd, EPOLLRDHUP);
        s->device_reading_paused = true;
      }
    } else {
      uint64_t id = 0, seq = 0;
      request_ids(buf, static_cast<size_t>(n), &id, &seq);  // echoed even from a bad one
      answer(s, device_reply(id, seq, Status(st.code(), s->describe() + ": " + st.message())));
    }
    for (int fd : fds) close(fd);
  }
}

void ClientListener::answer(const std::shared_ptr<Session>& s, const proto::DeviceReply& reply) {
  s->device_request_busy = false;
  if (s->closed) return;  // closed while its registration was imported
  if (reply.status != 0) spdlog::warn("{}", reply.message);
  // The client waits for the reply; one that does not read its replies
  // fills the socket and is cut off rather than blocking the loop.
  if (send(s->socket_fd, &reply, sizeof reply, MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof reply) {
    close_session(s, fmt::format("could not be sent its device memory reply ({}): it does not "
                                 "read them, or it is gone",
                                 strerror(errno)));
    return;
  }
  // Requests that came meanwhile make the socket readable again at once.
  if (s->device_reading_paused) {
    s->device_reading_paused = false;
    loop_.modify(s->socket_fd, EPOLLIN | EPOLLRDHUP);
  }
}

void ClientListener::reap_stale_holder(const JoinRequest& join) {
  // A restarted rank can reconnect before the loop has seen its old
  // connection hang up (the two sockets' events are not ordered). Look now,
  // so the new process is not refused for a slot held by a dead one.
  for (const auto& [id, held] : sessions_) {
    if (held->job_id != join.job_id ||
        (held->local_rank != join.local_rank && held->rank != join.rank))
      continue;
    std::shared_ptr<Session> s = held;
    pollfd p{s->socket_fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
      close_session(s, "disconnected (its connection closed: exited or killed)");
    return;
  }
}

bool ClientListener::take_all_submissions() {
  // Handling a submission can close sessions (a corrupt ring), so the ones
  // with work are picked out first.
  std::vector<std::shared_ptr<Session>> ready;
  for (auto& [id, s] : sessions_)
    if (!s->closed && s->has_submissions()) ready.push_back(s);
  for (auto& s : ready) take_submissions(s);
  return !ready.empty();
}

void ClientListener::on_doorbell(const std::shared_ptr<Session>& s) {
  s->drain_doorbell();
  take_submissions(s);
}

void ClientListener::take_submissions(const std::shared_ptr<Session>& s) {
  proto::SubmitEntry e;
  Status err;
  while (!s->closed && s->pop(&e, &err)) sink_.submit(s, e);
  if (!err.is_ok()) {
    spdlog::error("{}", err.message());
    [[maybe_unused]] Status ignored = s->complete(0, err.code(), err.message());
    close_session(s, "broke the ring protocol: " + err.message());
  }
}

void ClientListener::close_session(const std::shared_ptr<Session>& s, const std::string& reason) {
  if (s->closed) return;
  s->closed = true;
  loop_.remove(s->sq_doorbell());
  loop_.remove(s->socket_fd);
  sessions_.erase(s->id());
  spdlog::info("{} {}", s->describe(), reason);
  sink_.detach(s, reason);
  // The mapping stays until the last op holding the session lets go of it.
}

}  // namespace gsync
