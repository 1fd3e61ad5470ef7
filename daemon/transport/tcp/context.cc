// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/context.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <unordered_set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gsync::transport {

std::unique_ptr<Context> make_tcp_context(const ContextOptions& options, Status* err) {
  std::unique_ptr<tcp::TcpContext> ctx;
  Status st = tcp::TcpContext::create(options, &ctx);
  if (err != nullptr) *err = st;
  if (!st) return nullptr;
  return ctx;
}

}  // namespace gsync::transport

namespace gsync::transport::tcp {

namespace {

constexpr int kMaxStreams = 64;
// Host indices set_peer takes: the cluster file's limit, with room for
// indices of hosts that left for good (docs/membership.md, "Slots").
constexpr size_t kMaxHosts = 4096;
// Completions handled per poll(); the rest wait for the next call, so one
// busy link cannot keep the caller's thread from its other work.
constexpr int kMaxCompletionsPerPoll = 4096;
// A deadline further away than this means "no timer needed".
constexpr auto kNoDeadline = std::chrono::hours(1);
// Late writes into deregistered regions are received into this, a chunk at
// a time, and dropped.
constexpr size_t kDiscardBytes = 256 << 10;

uint64_t random_u64() {
  std::random_device rd;
  uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  return v == 0 ? 1 : v;
}

}  // namespace

TcpContext::TcpContext(const ContextOptions& options)
    : options_(options), instance_id_(random_u64()) {}

Status TcpContext::create(const ContextOptions& o, std::unique_ptr<TcpContext>* out) {
  int n = static_cast<int>(o.hosts.size());
  if (n == 0) return {GSYNC_ERR_INVALID, "tcp transport: the hosts table is empty"};
  if (o.self < 0 || o.self >= n)
    return {GSYNC_ERR_INVALID, fmt::format("tcp transport: self index {} is outside the hosts "
                                           "table ({} hosts)",
                                           o.self, n)};
  if (o.streams < 1 || o.streams > kMaxStreams)
    return {GSYNC_ERR_INVALID,
            fmt::format("tcp transport: streams = {}; it must be 1..{}", o.streams, kMaxStreams)};
  if (o.cross_rack_streams < 0 || o.cross_rack_streams > kMaxStreams)
    return {GSYNC_ERR_INVALID, fmt::format("tcp transport: cross_rack_streams = {}; it must be "
                                           "0..{} (0: as streams)",
                                           o.cross_rack_streams, kMaxStreams)};
  if (o.heartbeat_ms == 0 || o.peer_timeout_ms <= o.heartbeat_ms)
    return {GSYNC_ERR_INVALID,
            fmt::format("tcp transport: peer_timeout_ms ({}) must exceed heartbeat_ms ({}) > 0, or "
                        "a quiet but live peer would be declared down",
                        o.peer_timeout_ms, o.heartbeat_ms)};
  if (o.reconnect_min_ms == 0 || o.reconnect_min_ms > o.reconnect_max_ms)
    return {GSYNC_ERR_INVALID,
            fmt::format("tcp transport: reconnect backoff {}..{} ms is not a range",
                        o.reconnect_min_ms, o.reconnect_max_ms)};
  if (o.cluster_key.size() != kClusterKeyBytes)
    return {
        GSYNC_ERR_INVALID,
        fmt::format("tcp transport: {}; every connection proves the cluster key "
                    "(docs/security.md), so a context without one does not start",
                    o.cluster_key.empty() ? std::string("no cluster key")
                                          : fmt::format("the cluster key is {} bytes, not {}",
                                                        o.cluster_key.size(), kClusterKeyBytes))};
  if (Status st = init_crypto(); !st) return st;
  std::unordered_set<std::string> ids;
  for (int i = 0; i < n; i++) {
    const PeerInfo& h = o.hosts[static_cast<size_t>(i)];
    if (h.host_id.empty() && i != o.self) continue;  // an index no host holds yet
    if (h.host_id.empty() || h.host_id.size() > kMaxHelloString)
      return {GSYNC_ERR_INVALID, fmt::format("tcp transport: host {} has an empty or over-long "
                                             "host id",
                                             i)};
    if (!ids.insert(h.host_id).second)
      return {
          GSYNC_ERR_INVALID,
          fmt::format("tcp transport: host id '{}' appears twice in the hosts table", h.host_id)};
  }

  std::unique_ptr<TcpContext> ctx(new TcpContext(o));
  const PeerInfo& me = o.hosts[static_cast<size_t>(o.self)];
  Status st = Device::create(o.listen_address.empty() ? me.address : o.listen_address, me.port,
                             o.socket_buffer_bytes, &ctx->device_);
  if (!st) return {st.code(), fmt::format("tcp transport for {}: {}", me.host_id, st.message())};
  ctx->pairs_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; i++)
    if (i != o.self && !o.hosts[size_t(i)].host_id.empty())
      ctx->pairs_[static_cast<size_t>(i)] = std::make_unique<Pair>(*ctx, i);
  *out = std::move(ctx);
  return Status::ok();
}

TcpContext::~TcpContext() {
  if (!device_) return;  // create() failed before anything was started
  // The kernel may still be receiving into a header buffer or a caller's
  // region, or reading a caller's source buffer: stop every operation and
  // wait for its completion before any of that memory can go away.
  for (auto& [p, c] : conns_) ::shutdown(c->fd(), SHUT_RDWR);
  io_uring_sqe* s = device_->sqe(make_tag(nullptr, Op::kIgnore));
  io_uring_prep_cancel64(s, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
  auto deadline = Clock::now() + std::chrono::seconds(2);
  Completion c;
  while (device_->outstanding() > 0) {
    if (device_->next(&c)) continue;
    if (Clock::now() > deadline) {
      spdlog::error("tcp transport: {} io_uring operations still in flight after 2 s at shutdown",
                    device_->outstanding());
      break;
    }
    device_->wait_any(20);
  }
  pairs_.clear();
  conns_.clear();
}

int TcpContext::streams_for(int peer) const {
  const auto& hosts = options_.hosts;
  bool same_rack = peer >= 0 && size_t(peer) < hosts.size() &&
                   hosts[size_t(peer)].rack == hosts[size_t(options_.self)].rack;
  if (same_rack || options_.cross_rack_streams == 0) return options_.streams;
  return options_.cross_rack_streams;
}

std::string TcpContext::describe_host(int index) const {
  const PeerInfo& h = options_.hosts[static_cast<size_t>(index)];
  bool v6 = h.address.find(':') != std::string::npos;
  return fmt::format("{} ({}{}{}:{})", h.host_id, v6 ? "[" : "", h.address, v6 ? "]" : "", h.port);
}

uint32_t TcpContext::handshake_timeout_ms() const {
  return std::max<uint32_t>(options_.peer_timeout_ms, 1000);
}

Status TcpContext::start(Handlers handlers) {
  if (started_) return {GSYNC_ERR_INVALID, "tcp transport: start() called twice"};
  handlers_ = std::move(handlers);
  // A missing handler means "not interested"; calling an empty
  // std::function would throw.
  if (!handlers_.on_write) handlers_.on_write = [](int, uint32_t, uint64_t, uint64_t, uint64_t) {};
  if (!handlers_.on_write_done) handlers_.on_write_done = [](int, uint64_t, const Status&) {};
  if (!handlers_.on_control) handlers_.on_control = [](int, std::string_view) {};
  if (!handlers_.on_peer_up) handlers_.on_peer_up = [](int) {};
  if (!handlers_.on_peer_down) handlers_.on_peer_down = [](int, const Status&) {};
  started_ = true;
  const PeerInfo& me = options_.hosts[static_cast<size_t>(options_.self)];
  spdlog::info(
      "tcp transport: {} listening on {} (cluster '{}', {} hosts, {} stream{} per peer in "
      "the rack, {} per peer in another; socket buffers: {}, kernel granted send {} KiB, "
      "receive {} KiB)",
      me.host_id, device_->listen_endpoint().text, options_.identity.cluster_name, size(),
      options_.streams, options_.streams == 1 ? "" : "s",
      options_.cross_rack_streams ? options_.cross_rack_streams : options_.streams,
      options_.socket_buffer_bytes == 0
          ? std::string("kernel autotuning")
          : fmt::format("asked {} KiB", options_.socket_buffer_bytes >> 10),
      device_->granted_sndbuf() >> 10, device_->granted_rcvbuf() >> 10);
  post_accept();
  for (auto& p : pairs_)
    if (p) p->start();
  device_->submit();
  // The first poll() arms the timers.
  device_->notify();
  return Status::ok();
}

Region TcpContext::register_region(void* base, uint64_t bytes) { return regions_.add(base, bytes); }

void TcpContext::deregister_region(uint32_t id, std::function<void()> released) {
  if (!regions_.remove(id))
    spdlog::warn("tcp transport: deregister_region({}): no such region", id);
  // A recv into the region may be in flight (closing connections included):
  // the kernel writes into the memory until it completes, so released waits
  // for those completions. Whatever of the payload is still to come after
  // that is received into the discard buffer.
  int receives = 0;
  for (auto& [p, c] : conns_) {
    if (!c->receiving_into(id) || c->releasing) continue;
    c->releasing = true;
    receives++;
  }
  if (receives == 0) {
    if (released) released();
    return;
  }
  releasing_[id] = Release{receives, std::move(released)};
}

void TcpContext::write(int peer, const void* src, uint64_t len, uint32_t remote_region,
                       uint64_t remote_offset, uint64_t imm, uint64_t cookie) {
  Pair* p = started_ ? pair_of(peer) : nullptr;
  if (p == nullptr) {
    post_write_done(peer, cookie,
                    Status(GSYNC_ERR_INVALID,
                           fmt::format("tcp transport: write to host index {}: {}", peer,
                                       !started_ ? "the context is not started"
                                                 : fmt::format("not a peer (this daemon is {} of "
                                                               "{} hosts)",
                                                               self(), size()))));
  } else {
    p->write(src, len, remote_region, remote_offset, imm, cookie);
  }
  kick();
}

void TcpContext::send_control(int peer, std::string_view msg) {
  Pair* p = started_ ? pair_of(peer) : nullptr;
  if (p == nullptr) {
    spdlog::error("tcp transport: control message to host index {} dropped: not a peer", peer);
    return;
  }
  p->send_control(msg);
  kick();
}

Pair* TcpContext::pair_of(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(pairs_.size())) return nullptr;
  return pairs_[static_cast<size_t>(peer)].get();
}

bool TcpContext::peer_up(int peer) const {
  Pair* p = pair_of(peer);
  return p != nullptr && p->up();
}

PeerStats TcpContext::stats(int peer) const {
  if (Pair* p = pair_of(peer)) return p->stats();
  PeerStats s;
  s.state = PeerState::kDown;
  s.last_error = fmt::format("host index {} is not a peer", peer);
  return s;
}

Status TcpContext::set_peer(int peer, const PeerInfo& info) {
  if (peer < 0 || peer == self() || size_t(peer) >= kMaxHosts)
    return {GSYNC_ERR_INVALID, fmt::format("tcp transport: host index {} for {} is not a peer's "
                                           "(this daemon is {}; at most {} hosts)",
                                           peer, info.host_id, self(), kMaxHosts)};
  if (info.host_id.empty() || info.host_id.size() > kMaxHelloString)
    return {GSYNC_ERR_INVALID,
            fmt::format("tcp transport: host index {} has an empty or over-long host id", peer)};
  for (size_t i = 0; i < options_.hosts.size(); i++)
    if (int(i) != peer && options_.hosts[i].host_id == info.host_id && pair_of(int(i)) &&
        !pair_of(int(i))->absent())
      return {GSYNC_ERR_INVALID, fmt::format("tcp transport: host {} is at index {} already, "
                                             "not {}",
                                             info.host_id, i, peer)};
  if (size_t(peer) >= pairs_.size()) {
    options_.hosts.resize(size_t(peer) + 1);
    pairs_.resize(size_t(peer) + 1);
  }
  PeerInfo& now = options_.hosts[size_t(peer)];
  Pair* p = pair_of(peer);
  const bool same = now == info;
  if (p != nullptr && same && !p->absent()) return Status::ok();
  if (p != nullptr && !p->absent())
    p->leave(Status(GSYNC_ERR_HOST_LOST,
                    fmt::format("{} is now {}:{} in rack {}", p->describe(), info.address,
                                info.port, info.rack)));
  now = info;
  if (p == nullptr) {
    pairs_[size_t(peer)] = std::make_unique<Pair>(*this, peer);
    if (started_) pairs_[size_t(peer)]->start();
  } else {
    p->rejoin();
  }
  flush_events();
  kick();
  device_->notify();  // the next poll() arms the timers for the new pair
  return Status::ok();
}

void TcpContext::drop_peer(int peer, const Status& why) {
  Pair* p = pair_of(peer);
  if (p == nullptr || p->absent()) return;
  p->leave(why);
  flush_events();
  kick();
}

// --- poll -------------------------------------------------------------------

void TcpContext::poll() {
  if (in_poll_) return;  // a handler called poll(); its caller is polling already
  in_poll_ = true;
  device_->quiet(true);
  // Drained before the completions are looked at; quiet(false) at the end
  // signals again for any posted after the last look.
  device_->drain_event_fd();
  flush_events();
  Completion c;
  int n = 0;
  // Submitting what the completions queued (a frame's payload receive after
  // its header) often completes at once, in the submit: look again before
  // returning, instead of paying one more trip through the event loop per
  // frame. Bounded, so a busy link cannot starve the rest of the loop.
  for (int round = 0; round < 4; round++) {
    int before = n;
    while (n < kMaxCompletionsPerPoll && device_->next(&c)) {
      dispatch(c);
      flush_events();
      run_resumed();
      n++;
    }
    device_->submit();
    if (n == before || n == kMaxCompletionsPerPoll) break;
  }
  if (n == kMaxCompletionsPerPoll) device_->notify();
  if (started_) run_timers();
  reap();
  device_->submit();
  if (!polled_) device_->quiet(false);
  in_poll_ = false;
}

void TcpContext::set_polled(bool on) {
  polled_ = on;
  if (!in_poll_) device_->quiet(on);
}

void TcpContext::kick() {
  if (in_poll_) return;  // poll() submits and flushes at its end
  device_->submit();
  if (!events_.empty()) device_->notify();
}

void TcpContext::dispatch(const Completion& cq) {
  Op op = tag_op(cq.tag);
  switch (op) {
    case Op::kIgnore:
      return;
    case Op::kAccept:
      accept_posted_ = false;
      on_accept(cq.res);
      return;
    case Op::kTimer:
      timer_armed_ = false;
      return;
    default:
      break;
  }
  auto* c = tag_owner<Connection>(cq.tag);
  c->op_done(op);
  if (op == Op::kRecv && c->releasing) {
    // Before the closed check: a closing connection's last recv may be the
    // one a deregistered region waits for.
    c->releasing = false;
    auto it = releasing_.find(c->rx_region());
    if (it != releasing_.end() && --it->second.receives == 0) {
      events_.released(std::move(it->second.released));
      releasing_.erase(it);
    }
  }
  if (c->closed()) return;  // reap() frees it once nothing is in flight
  switch (op) {
    case Op::kRecv: {
      if (c->pair != nullptr && cq.res > 0) c->pair->on_traffic();
      bool region_gone = c->rx_stage() == Connection::RxStage::kRegionPayload &&
                         !regions_.contains(c->rx_region());
      switch (c->on_recv(cq.res, region_gone)) {
        case Connection::RecvResult::kMore:
          return;
        case Connection::RecvResult::kEof:
          on_connection_error(c, "the peer closed the connection");
          return;
        case Connection::RecvResult::kError:
          on_connection_error(c, strerror(-cq.res));
          return;
        case Connection::RecvResult::kDone:
          run_frames(c);
          return;
      }
      return;
    }
    case Op::kSend:
      if (cq.res < 0) {
        on_connection_error(c, fmt::format("send: {}", strerror(-cq.res)));
      } else if (c->pair != nullptr) {
        c->pair->on_sent(c, cq.res);
      } else {
        c->on_sent(cq.res, [](SendItem*) {});
        if (c->close_after_send && c->send_idle())
          drop_unidentified(c, "");
        else
          c->post_send();
      }
      return;
    case Op::kConnect:
      if (c->pair != nullptr) c->pair->on_connected(c, cq.res);
      return;
    default:
      return;  // link timeouts and cancels: their targets report
  }
}

void TcpContext::run_frames(Connection* c) {
  // Frames the read-ahead holds in full are handled here, one after
  // another, with no recv between them; the events each one raised (a link
  // coming up) are delivered before the next, as they would be between two
  // completions.
  for (;;) {
    if (c->pair != nullptr)
      c->pair->on_received(c);
    else
      on_unidentified(c);
    if (c->closed() || !c->take_ready()) break;
    flush_events();
    if (c->closed()) break;
  }
}

void TcpContext::run_resumed() {
  // After flush_events(): the link's on_peer_up has run, so what its
  // connector sent right after AUTH (on these streams) comes after it.
  while (!resume_.empty()) {
    std::vector<Connection*> list;
    list.swap(resume_);
    for (Connection* c : list) {
      if (c->closed()) continue;  // the link failed meanwhile; reap() frees it
      c->expect_header();
      if (c->take_ready()) run_frames(c);
      flush_events();
    }
  }
}

void TcpContext::on_connection_error(Connection* c, const std::string& what) {
  if (c->pair != nullptr) {
    c->pair->on_connection_error(c, what);
  } else if (c->hs.awaiting_auth) {
    // A connector gives up all its streams when one fails (a key mismatch
    // it saw on another stream, a timeout): said where it failed, not here.
    spdlog::debug("tcp transport: the connection from {} ended before its AUTH: {}", c->remote(),
                  what);
    drop_unidentified(c, "");
  } else if (!c->received_any() && !c->close_after_send) {
    // Nothing sent, then gone: a port check (gsyncctl doctor's reach
    // check, a load balancer's), not a daemon that failed its handshake.
    spdlog::info("tcp transport: a connection from {} closed before sending anything (a port "
                 "check?): {}",
                 c->remote(), what);
    drop_unidentified(c, "");
  } else {
    drop_unidentified(c, c->close_after_send ? "" : what);
  }
}

// --- Connections, timers, events -------------------------------------------

Connection* TcpContext::new_connection(int fd, bool outbound, std::string remote) {
  if (discard_.empty()) discard_.resize(kDiscardBytes);
  auto owned = std::make_unique<Connection>(*device_, fd, outbound, std::move(remote),
                                            discard_.data(), discard_.size());
  Connection* c = owned.get();
  conns_.emplace(c, std::move(owned));
  return c;
}

void TcpContext::retire(Connection* c) {
  if (c->closed()) return;
  c->close();
  closing_.push_back(c);
}

void TcpContext::reap() {
  auto keep = std::remove_if(closing_.begin(), closing_.end(), [this](Connection* c) {
    if (c->ops() > 0) return false;
    conns_.erase(c);
    return true;
  });
  closing_.erase(keep, closing_.end());
}

void TcpContext::run_timers() {
  Clock::time_point now = Clock::now();
  Clock::time_point next = now + kNoDeadline;
  for (auto& p : pairs_) {
    if (!p) continue;
    p->tick(now, &next);
    flush_events();
  }
  // Iterated over a copy: dropping one edits the list.
  std::vector<Connection*> waiting = unidentified_;
  for (Connection* c : waiting) {
    if (now >= c->deadline)
      drop_unidentified(
          c, c->close_after_send ? ""
             : c->hs.awaiting_auth
                 ? fmt::format("no AUTH within {} ms of connecting", handshake_timeout_ms())
                 : fmt::format("no HELLO within {} ms", handshake_timeout_ms()));
    else
      next = std::min(next, c->deadline);
  }
  if (!accept_posted_) {
    if (now >= accept_retry_at_)
      post_accept();
    else
      next = std::min(next, accept_retry_at_);
  }
  if (next < now + kNoDeadline) arm_timer(next);
}

void TcpContext::arm_timer(Clock::time_point deadline) {
  // One timeout in flight, moved earlier when needed; a later deadline just
  // lets the current one fire early, and the poll() it causes re-arms.
  if (timer_armed_ && deadline + std::chrono::milliseconds(1) >= timer_deadline_) return;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch());
  // steady_clock is CLOCK_MONOTONIC, the clock io_uring timeouts use.
  timer_ts_.tv_sec = ns.count() / 1000000000;
  timer_ts_.tv_nsec = ns.count() % 1000000000;
  if (timer_armed_) {
    io_uring_sqe* s = device_->sqe(make_tag(nullptr, Op::kIgnore));
    io_uring_prep_timeout_update(s, &timer_ts_, make_tag(nullptr, Op::kTimer), IORING_TIMEOUT_ABS);
  } else {
    io_uring_sqe* s = device_->sqe(make_tag(nullptr, Op::kTimer));
    io_uring_prep_timeout(s, &timer_ts_, 0, IORING_TIMEOUT_ABS);
    timer_armed_ = true;
  }
  timer_deadline_ = deadline;
}

void TcpContext::post_write_done(int peer, uint64_t cookie, Status st) {
  events_.write_done(peer, cookie, std::move(st));
}

void TcpContext::post_peer_up(int peer) {
  events_.peer_up(peer);
}

void TcpContext::post_peer_down(int peer, Status why) {
  events_.peer_down(peer, std::move(why));
}

void TcpContext::flush_events() {
  // Before start() there are no handlers; the events wait for them.
  if (started_) events_.flush(handlers_);
}

}  // namespace gsync::transport::tcp
