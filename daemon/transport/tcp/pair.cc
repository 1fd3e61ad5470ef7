// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/pair.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/tcp/context.h"

namespace gsync::transport::tcp {

namespace {

std::chrono::milliseconds ms(uint32_t v) { return std::chrono::milliseconds(v); }

std::string bytes_text(uint64_t n) {
  if (n >= (1ull << 20) && n % (1ull << 20) == 0) return fmt::format("{} MiB", n >> 20);
  if (n >= (1ull << 10) && n % (1ull << 10) == 0) return fmt::format("{} KiB", n >> 10);
  return fmt::format("{} bytes", n);
}

}  // namespace

Pair::Pair(TcpContext& ctx, int peer)
    : ctx_(ctx),
      peer_(peer),
      streams_(ctx.streams_for(peer)),
      describe_(ctx.describe_host(peer)),
      backoff_ms_(ctx.options().reconnect_min_ms) {
  conns_.assign(static_cast<size_t>(streams_), nullptr);
}

// The connections belong to the context, which closes them.
Pair::~Pair() = default;

bool Pair::connector() const { return ctx_.self() < peer_; }

void Pair::start() {
  if (connector()) connect_attempt(Clock::now());
}

// --- Link setup -------------------------------------------------------------

Hello Pair::own_hello(int stream) const {
  const ContextOptions& o = ctx_.options();
  Hello h;
  h.identity = o.identity;
  h.host_index = static_cast<uint32_t>(o.self);
  h.host_id = o.hosts[static_cast<size_t>(o.self)].host_id;
  h.stream = static_cast<uint32_t>(stream);
  h.streams = static_cast<uint32_t>(streams_);
  h.link_id = link_id_;
  h.instance_id = ctx_.instance_id();
  return h;
}

void Pair::connect_attempt(Clock::time_point now) {
  const PeerInfo& info = ctx_.options().hosts[static_cast<size_t>(peer_)];
  if (!endpoint_ok_) {
    // Resolved once, not at every retry: getaddrinfo blocks, and the hosts
    // table is literals in practice. A name that does not resolve yet is
    // tried again at the next attempt.
    Status st = resolve(info.address, info.port, &endpoint_);
    if (!st) {
      attempt_failed(fmt::format("{}: {}", describe_, st.message()), st.code());
      return;
    }
    endpoint_ok_ = true;
  }
  link_id_ = ctx_.new_link_id();
  phase_ = Phase::kConnecting;
  gathered_ = 0;
  handshake_deadline_ = now + ms(ctx_.handshake_timeout_ms());
  for (int s = 0; s < streams_; s++) {
    int fd = socket(endpoint_.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      attempt_failed(fmt::format("socket for {}: {}", describe_, strerror(errno)),
                     GSYNC_ERR_INTERNAL);
      return;
    }
    Status st = tune_socket(fd, ctx_.options().socket_buffer_bytes);
    if (!st) {
      ::close(fd);
      attempt_failed(fmt::format("socket for {}: {}", describe_, st.message()), st.code());
      return;
    }
    Connection* c = ctx_.new_connection(fd, true, endpoint_.text);
    c->pair = this;
    c->stream = s;
    conns_[static_cast<size_t>(s)] = c;
    c->post_connect(endpoint_, ctx_.handshake_timeout_ms());
  }
  ctx_.kick();
}

void Pair::on_connected(Connection* c, int res) {
  if (res < 0) {
    // A connect cut off by its linked timeout completes with -ECANCELED.
    std::string why = res == -ECANCELED
                          ? fmt::format("no answer within {} ms", ctx_.handshake_timeout_ms())
                          : std::string(strerror(-res));
    // The stream is left out: every stream fails alike, and one reason per
    // cause keeps the log to one line however many retries it takes.
    fail(fmt::format("connecting to {}: {}", describe_, why), GSYNC_ERR_CONNECT);
    return;
  }
  c->phase = Connection::Phase::kHandshake;
  Hello hello = own_hello(c->stream);
  hello.nonce = fresh_nonce();
  c->hs.connector_hello = encode_hello(hello);
  queue_frame(c, FrameType::kHello, c->hs.connector_hello);
  c->expect_header();
  c->post_send();
}

std::string Pair::adopt(Connection* c, const Hello& hello) {
  if (phase_ == Phase::kUp) {
    if (hello.link_id == link_id_)
      return fmt::format("stream {} of {}'s current link is already open", hello.stream, describe_);
    // The connector only starts a new link after giving up the old one, so
    // the old one is dead even if no error has reached us yet (a host that
    // vanished sends no FIN).
    link_down(fmt::format(
                  "{} opened a new link ({}); the old link is dropped", describe_,
                  hello.instance_id == peer_instance_ ? "it reconnected" : "its daemon restarted"),
              GSYNC_ERR_CONNECT);
  }
  if (phase_ == Phase::kConnecting && hello.link_id != link_id_) {
    spdlog::debug("tcp transport: {} started a new link before its last one was complete",
                  describe_);
    drop_connections();
    phase_ = Phase::kIdle;
  }
  if (phase_ == Phase::kIdle) {
    phase_ = Phase::kConnecting;
    link_id_ = hello.link_id;
    gathered_ = 0;
    handshake_deadline_ = Clock::now() + ms(ctx_.handshake_timeout_ms());
  }
  Connection*& slot = conns_[hello.stream];
  if (slot != nullptr)
    return fmt::format("{} opened stream {} of one link twice", describe_, hello.stream);
  slot = c;
  c->pair = this;
  c->stream = static_cast<int>(hello.stream);
  c->phase = Connection::Phase::kHandshake;
  peer_instance_ = hello.instance_id;
  // Every stream here has proved the key (TcpContext::on_auth). The
  // connector is up once it has checked every stream's HELLO_ACK and may
  // already send on this one; what it sends waits unread until the whole
  // link is here, so nothing arrives before on_peer_up.
  if (++gathered_ < streams_) return "";
  for (Connection* k : conns_) k->phase = Connection::Phase::kOpen;
  go_up();
  c->expect_header();  // c's own completion reads on
  for (Connection* k : conns_)
    if (k != c) ctx_.resume_later(k);
  return "";
}

void Pair::on_hello_ack(Connection* c) {
  Hello h;
  std::string why;
  std::string_view payload = c->small_payload();
  // The hello, then the acceptor's proof (on_header saw it is long enough).
  std::string_view p = payload.substr(0, payload.size() - kProofBytes);
  std::string_view proof = payload.substr(p.size());
  if (!decode_hello(reinterpret_cast<const uint8_t*>(p.data()), p.size(), &h, &why)) {
    malformed(c, "HELLO_ACK: " + why);
    return;
  }
  const ContextOptions& o = ctx_.options();
  const PeerInfo& info = o.hosts[static_cast<size_t>(peer_)];
  // The acceptor checked us; this checks that the daemon at that address is
  // the one the hosts table names, and not, say, another cluster's daemon
  // that a stale table points at.
  if (h.host_index != static_cast<uint32_t>(peer_) || h.host_id != info.host_id ||
      h.identity.cluster_name != o.identity.cluster_name ||
      h.identity.protocol_version != o.identity.protocol_version ||
      h.identity.build_id != o.identity.build_id || h.streams != static_cast<uint32_t>(streams_)) {
    fail(fmt::format(
             "{} answered as {} (host index {}, cluster '{}', protocol version {}, build "
             "'{}', {} streams); expected {} (host index {}, cluster '{}', protocol version "
             "{}, build '{}', {} streams)",
             describe_, h.host_id, h.host_index, h.identity.cluster_name,
             h.identity.protocol_version, h.identity.build_id, h.streams, info.host_id, peer_,
             o.identity.cluster_name, o.identity.protocol_version, o.identity.build_id, streams_),
         GSYNC_ERR_REFUSED);
    return;
  }
  if (h.link_id != link_id_) {
    malformed(c, fmt::format("HELLO_ACK for link {:x}, but this attempt is link {:x}", h.link_id,
                             link_id_));
    return;
  }
  // Our proof goes back even when theirs failed: the acceptor then sees
  // the mismatch too and says so on its side (a REFUSE it logs), instead
  // of a connection that merely closed.
  Proof ours = prove(o.cluster_key, Role::kConnector, c->hs.connector_hello, p);
  queue_frame(c, FrameType::kAuth,
              std::string_view(reinterpret_cast<const char*>(ours.data()), ours.size()));
  c->post_send();
  if (!verify(o.cluster_key, Role::kAcceptor, c->hs.connector_hello, p, proof)) {
    fail(fmt::format("key mismatch: {} answered with a proof of another cluster key than the "
                     "one this daemon {} holds; every daemon of cluster '{}' must hold the same "
                     "key ([cluster] key_file)",
                     describe_, o.hosts[static_cast<size_t>(o.self)].host_id,
                     o.identity.cluster_name),
         GSYNC_ERR_REFUSED);
    return;
  }
  c->hs = Handshake{};
  peer_instance_ = h.instance_id;
  c->acked = true;
  c->phase = Connection::Phase::kOpen;
  c->expect_header();
  // Up once every stream's acceptor has proved the key; the acceptor sends
  // nothing before it has every stream's AUTH, which follows these checks.
  if (++gathered_ == streams_ && phase_ == Phase::kConnecting) go_up();
}

void Pair::go_up() {
  phase_ = Phase::kUp;
  state_ = PeerState::kUp;
  connects_++;
  backoff_ms_ = ctx_.options().reconnect_min_ms;
  last_rx_ = Clock::now();
  last_logged_.clear();
  dropped_controls_ = 0;
  spdlog::info("tcp transport: link to {} up ({} stream{}, {}, link #{})", describe_, streams_,
               streams_ == 1 ? "" : "s", connector() ? "we connected" : "it connected", connects_);
  ctx_.post_peer_up(peer_);
}

// --- Failure ----------------------------------------------------------------

void Pair::fail(const std::string& reason, int code) {
  if (phase_ == Phase::kUp)
    link_down(reason, code);
  else
    attempt_failed(reason, code);
}

void Pair::link_down(const std::string& reason, int code) {
  // The one log line of this failure; handlers and stats carry the rest.
  spdlog::error("tcp transport: {}; peer down", reason);
  phase_ = Phase::kIdle;
  state_ = PeerState::kDown;
  last_error_.set(reason);
  last_logged_ = reason;
  drop_connections();
  assembling_.clear();
  ctx_.post_peer_down(peer_, Status(code, reason));
  // After on_peer_down, as the interface promises.
  for (PendingWrite& w : writes_) {
    if (!w.live) continue;
    ctx_.post_write_done(
        peer_, w.cookie,
        Status(code, fmt::format("write of {} to {} failed, the link went down: {}",
                                 bytes_text(w.len), describe_, reason)));
  }
  writes_.clear();
  free_writes_.clear();
  backoff_ms_ = ctx_.options().reconnect_min_ms;
  if (connector()) schedule_retry();
}

void Pair::attempt_failed(const std::string& reason, int code) {
  drop_connections();
  phase_ = Phase::kIdle;
  last_error_.set(reason);
  if (reason != last_logged_) {
    // Refusals are configuration errors someone must fix; a peer that is
    // not reachable yet is normal while a cluster starts.
    auto level = spdlog::level::warn;
    if (code == GSYNC_ERR_REFUSED || code == GSYNC_ERR_VERSION || code == GSYNC_ERR_PROTOCOL)
      level = spdlog::level::err;
    else if (state_ == PeerState::kConnecting)
      level = spdlog::level::info;
    spdlog::log(level, "tcp transport: {}{}", reason, connector() ? "; retrying" : "");
    last_logged_ = reason;
  }
  if (connector()) schedule_retry();
}

void Pair::leave(const Status& why) {
  if (phase_ == Phase::kUp)
    link_down(why.message(), why.code());
  else
    drop_connections();
  phase_ = Phase::kIdle;
  state_ = PeerState::kDown;
  last_error_.set(why.message());
  absent_ = true;
}

void Pair::rejoin() {
  absent_ = false;
  streams_ = ctx_.streams_for(peer_);
  conns_.assign(static_cast<size_t>(streams_), nullptr);
  describe_ = ctx_.describe_host(peer_);
  endpoint_ok_ = false;  // the endpoint may have changed
  state_ = PeerState::kConnecting;
  last_logged_.clear();
  backoff_ms_ = ctx_.options().reconnect_min_ms;
  retry_at_ = Clock::now();
  start();
}

void Pair::schedule_retry() {
  const ContextOptions& o = ctx_.options();
  retry_at_ = Clock::now() + ms(backoff_ms_);
  backoff_ms_ = std::min(o.reconnect_max_ms, std::max(o.reconnect_min_ms, backoff_ms_ * 2));
}

void Pair::drop_connections() {
  for (Connection*& c : conns_) {
    if (c != nullptr) ctx_.retire(c);
    c = nullptr;
  }
  gathered_ = 0;
}

void Pair::on_connection_error(Connection* c, const std::string& what) {
  fail(fmt::format("{} stream {}: {}", describe_, c->stream, what), GSYNC_ERR_CONNECT);
}

void Pair::malformed(Connection* c, const std::string& what) {
  fail(fmt::format("{} stream {} sent a malformed frame: {}", describe_, c->stream, what),
       GSYNC_ERR_PROTOCOL);
}

// --- Sending ----------------------------------------------------------------

void Pair::queue_frame(Connection* c, FrameType type, std::string_view payload) {
  c->push_frame(type, payload);
}

Connection* Pair::least_loaded() {
  Connection* best = nullptr;
  for (int i = 0; i < streams_; i++) {
    Connection* c = conns_[(next_stream_ + static_cast<uint64_t>(i)) % streams_];
    if (best == nullptr || c->queued_bytes() < best->queued_bytes()) best = c;
  }
  next_stream_++;
  return best;
}

int32_t Pair::alloc_write(uint64_t cookie, uint64_t len) {
  int32_t slot;
  if (!free_writes_.empty()) {
    slot = free_writes_.back();
    free_writes_.pop_back();
  } else {
    slot = static_cast<int32_t>(writes_.size());
    writes_.emplace_back();
  }
  writes_[static_cast<size_t>(slot)] = PendingWrite{cookie, len, 0, true};
  return slot;
}

void Pair::write(const void* src, uint64_t len, uint32_t region, uint64_t offset, uint64_t imm,
                 uint64_t cookie) {
  if (phase_ != Phase::kUp) {
    ctx_.post_write_done(
        peer_, cookie,
        Status(GSYNC_ERR_CONNECT,
               fmt::format("write of {} to {}: the peer is {}{}", bytes_text(len), describe_,
                           state_ == PeerState::kConnecting ? "not connected yet" : "down",
                           last_error_.empty() ? "" : " (" + last_error_.text + ")")));
    return;
  }
  uint64_t pieces = (streams_ > 1 && len >= kSplitMin) ? static_cast<uint64_t>(streams_) : 1;
  pieces = std::max(pieces, (len + kMaxPiece - 1) / kMaxPiece);
  // Page-sized pieces, so a piece boundary never splits a page of the
  // receiver's region between two streams' copies.
  uint64_t piece = pieces == 1 ? len : ((len + pieces - 1) / pieces + 4095) & ~uint64_t{4095};
  int32_t slot = alloc_write(cookie, len);
  PendingWrite& w = writes_[static_cast<size_t>(slot)];
  uint64_t id = next_write_id_++;
  const auto* bytes = static_cast<const uint8_t*>(src);
  uint64_t off = 0;
  for (uint64_t i = 0; i == 0 || off < len; i++) {
    uint64_t n = std::min(piece, len - off);
    Connection* c = pieces == 1 ? least_loaded() : conns_[(next_stream_ + i) % streams_];
    SendItem* it = c->item();
    FrameHeader& h = it->header;
    h.type = static_cast<uint8_t>(FrameType::kWrite);
    h.region = region;
    h.length = static_cast<uint32_t>(n);
    h.offset = offset + off;
    h.imm = imm;
    h.write_id = id;
    h.write_len = len;
    it->data = bytes + off;
    it->write_slot = slot;
    c->push(it);
    w.pieces_left++;
    off += n;
  }
  if (pieces > 1) next_stream_ += pieces;
  flush_sends();
}

void Pair::send_control(std::string_view msg) {
  if (msg.size() > kMaxControl) {
    spdlog::error("tcp transport: control message of {} bytes to {} dropped: the limit is {}",
                  msg.size(), describe_, kMaxControl);
    return;
  }
  if (phase_ != Phase::kUp) {
    // No completion to fail: say it once per outage, not per message.
    if (dropped_controls_++ == 0)
      spdlog::warn(
          "tcp transport: control message to {} dropped: the peer is not connected "
          "(later ones are dropped silently until it is)",
          describe_);
    return;
  }
  Connection* c = conns_[0];
  queue_frame(c, FrameType::kControl, msg);
  bytes_sent_ += msg.size();
  c->post_send();
}

void Pair::flush_sends() {
  for (Connection* c : conns_)
    if (c != nullptr) c->post_send();
}

void Pair::piece_sent(int32_t slot) {
  PendingWrite& w = writes_[static_cast<size_t>(slot)];
  if (!w.live || --w.pieces_left > 0) return;
  w.live = false;
  free_writes_.push_back(slot);
  writes_sent_++;
  bytes_sent_ += w.len;
  ctx_.post_write_done(peer_, w.cookie, Status::ok());
}

void Pair::on_sent(Connection* c, int res) {
  c->on_sent(res, [this](SendItem* it) {
    if (it->write_slot >= 0) piece_sent(it->write_slot);
  });
  c->post_send();
}

// --- Timers -----------------------------------------------------------------

void Pair::tick(Clock::time_point now, Clock::time_point* next) {
  if (absent_) return;
  const ContextOptions& o = ctx_.options();
  if (phase_ == Phase::kIdle && connector() && now >= retry_at_) connect_attempt(now);
  if (phase_ == Phase::kConnecting && now >= handshake_deadline_) {
    fail(fmt::format("handshake with {} did not complete within {} ms", describe_,
                     ctx_.handshake_timeout_ms()),
         GSYNC_ERR_TIMEOUT);
  }
  if (phase_ == Phase::kUp) {
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_rx_);
    if (silent >= ms(o.peer_timeout_ms)) {
      link_down(fmt::format("no traffic from {} for {} ms", describe_, silent.count()),
                GSYNC_ERR_TIMEOUT);
    }
  }
  switch (phase_) {
    case Phase::kIdle:
      if (connector()) *next = std::min(*next, retry_at_);
      return;
    case Phase::kConnecting:
      *next = std::min(*next, handshake_deadline_);
      return;
    case Phase::kUp:
      break;
  }
  *next = std::min(*next, last_rx_ + ms(o.peer_timeout_ms));
  // A heartbeat only when stream 0 has been quiet for a period: any frame
  // tells the peer we are alive, and a stream still busy sending is not
  // quiet (the peer is receiving it).
  Connection* c0 = conns_[0];
  auto due = c0->last_queued() + ms(o.heartbeat_ms);
  if (due <= now) {
    if (c0->send_idle()) {
      queue_frame(c0, FrameType::kHeartbeat, {});
      c0->post_send();
    }
    due = now + ms(o.heartbeat_ms);
  }
  *next = std::min(*next, due);
}

PeerStats Pair::stats() const {
  PeerStats s;
  s.state = state_;
  s.bytes_sent = bytes_sent_;
  s.bytes_received = bytes_received_;
  s.writes_sent = writes_sent_;
  s.writes_received = writes_received_;
  s.connects = connects_;
  s.last_error = last_error_.text;
  s.last_error_at = last_error_.at;
  s.transport = "tcp";
  s.streams = streams_;
  return s;
}

}  // namespace gsync::transport::tcp
