// SPDX-License-Identifier: Apache-2.0
//
// TcpContext's inbound half: accepting connections, identifying them by
// their HELLO (cluster name, protocol version, build id, which host, which
// stream), answering with HELLO_ACK and its proof of the cluster key,
// checking the connector's AUTH, and only then handing each to its peer's
// Pair - or refusing it with a REFUSE that names both sides' values.
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/tcp/context.h"

namespace gsync::transport::tcp {

namespace {
// How long a refused connection may take to receive its REFUSE.
constexpr auto kRefuseLinger = std::chrono::seconds(1);
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
}  // namespace

// --- Accepting and identifying ------------------------------------------------

void TcpContext::post_accept() {
  accept_len_ = sizeof accept_addr_;
  io_uring_sqe* s = device_->sqe(make_tag(nullptr, Op::kAccept));
  io_uring_prep_accept(s, device_->listen_fd(), reinterpret_cast<sockaddr*>(&accept_addr_),
                       &accept_len_, SOCK_CLOEXEC);
  accept_posted_ = true;
}

void TcpContext::on_accept(int res) {
  if (res < 0) {
    // EMFILE and friends: retry later rather than spin on the error.
    spdlog::warn("tcp transport: accept on {}: {}; retrying", device_->listen_endpoint().text,
                 strerror(-res));
    accept_retry_at_ = Clock::now() + kAcceptRetry;
    return;
  }
  std::string remote = endpoint_text(reinterpret_cast<sockaddr*>(&accept_addr_), accept_len_);
  post_accept();
  Status st = tune_socket(res, options_.socket_buffer_bytes);
  if (!st) spdlog::warn("tcp transport: connection from {}: {}", remote, st.message());
  Connection* c = new_connection(res, false, remote);
  c->deadline = Clock::now() + std::chrono::milliseconds(handshake_timeout_ms());
  unidentified_.push_back(c);
  c->expect_header();
}

void TcpContext::on_unidentified(Connection* c) {
  if (c->close_after_send) {
    // Refused: whatever it sends now is not read.
    return;
  }
  if (c->hs.awaiting_auth) {
    on_auth(c);
    return;
  }
  if (c->rx_stage() == Connection::RxStage::kHeader) {
    const FrameHeader& h = c->header();
    if (h.magic != kFrameMagic) {
      drop_unidentified(c, fmt::format("bad frame magic 0x{:08x} in its first frame (not a gsync "
                                       "daemon?)",
                                       h.magic));
    } else if (h.version != kFrameVersion) {
      refuse(c, -1,
             fmt::format("frame version mismatch: the daemon at {} speaks frame version {}, "
                         "this daemon {} speaks {}",
                         c->remote(), h.version,
                         options_.hosts[static_cast<size_t>(self())].host_id, kFrameVersion));
    } else if (h.type != static_cast<uint8_t>(FrameType::kHello)) {
      drop_unidentified(c, fmt::format("a {} frame before HELLO", frame_type_name(h.type)));
    } else if (h.length == 0 || h.length > kMaxHello) {
      drop_unidentified(c, fmt::format("a HELLO of {} bytes (at most {})", h.length, kMaxHello));
    } else {
      c->expect_small(h.length);
    }
    return;
  }
  Hello hello;
  std::string why;
  std::string_view p = c->small_payload();
  if (!decode_hello(reinterpret_cast<const uint8_t*>(p.data()), p.size(), &hello, &why)) {
    drop_unidentified(c, "malformed HELLO: " + why);
    return;
  }
  int index =
      hello.host_index < static_cast<uint32_t>(size()) ? static_cast<int>(hello.host_index) : -1;
  if (std::string refusal = check_hello(hello); !refusal.empty()) {
    refuse(c, index, refusal);
    return;
  }
  send_hello_ack(c, hello);
}

void TcpContext::send_hello_ack(Connection* c, const Hello& theirs) {
  // Answered at once, on this connection alone: its pair hears of it only
  // once its AUTH has proved the key, so a process without the key can
  // neither take a link down (a new link id replaces an up link) nor hold
  // a stream's place in one.
  Hello ack;
  ack.identity = options_.identity;
  ack.host_index = static_cast<uint32_t>(self());
  ack.host_id = options_.hosts[static_cast<size_t>(self())].host_id;
  ack.stream = theirs.stream;
  ack.streams = theirs.streams;  // check_hello: what we expect for this peer
  ack.link_id = theirs.link_id;
  ack.instance_id = instance_id_;
  ack.nonce = fresh_nonce();
  c->hs.claimed = theirs;
  c->hs.connector_hello.assign(c->small_payload());
  c->hs.acceptor_hello = encode_hello(ack);
  c->hs.awaiting_auth = true;
  Proof proof =
      prove(options_.cluster_key, Role::kAcceptor, c->hs.connector_hello, c->hs.acceptor_hello);
  std::string payload = c->hs.acceptor_hello;
  payload.append(reinterpret_cast<const char*>(proof.data()), proof.size());
  c->push_frame(FrameType::kHelloAck, payload);
  c->post_send();
  c->expect_header();
}

void TcpContext::on_auth(Connection* c) {
  // check_hello passed: the claimed index is a peer's.
  int index = static_cast<int>(c->hs.claimed.host_index);
  std::string them = describe_host(index);
  if (c->rx_stage() == Connection::RxStage::kHeader) {
    const FrameHeader& h = c->header();
    if (h.magic != kFrameMagic || h.version != kFrameVersion ||
        h.type != static_cast<uint8_t>(FrameType::kAuth) || h.length != kProofBytes) {
      drop_unidentified(c, fmt::format("it claimed to be {}, then sent a {} frame of {} bytes "
                                       "where AUTH was due: nothing is taken from a connection "
                                       "before it has proved the cluster key",
                                       them, frame_type_name(h.type), h.length));
    } else {
      c->expect_small(kProofBytes);
    }
    return;
  }
  if (!verify(options_.cluster_key, Role::kConnector, c->hs.connector_hello, c->hs.acceptor_hello,
              c->small_payload())) {
    refuse(c, index,
           fmt::format("key mismatch: {} answered with a proof of another cluster key than the "
                       "one this daemon {} holds; every daemon of cluster '{}' must hold the "
                       "same key ([cluster] key_file)",
                       them, options_.hosts[static_cast<size_t>(self())].host_id,
                       options_.identity.cluster_name));
    return;
  }
  Hello hello = std::move(c->hs.claimed);
  c->hs = Handshake{};
  std::string refusal = pair_of(index)->adopt(c, hello);
  if (!refusal.empty()) {
    refuse(c, index, refusal);
    return;
  }
  unidentified_.erase(std::find(unidentified_.begin(), unidentified_.end(), c));
}

std::string TcpContext::check_hello(const Hello& h) const {
  const Identity& me = options_.identity;
  const std::string& my_id = options_.hosts[static_cast<size_t>(self())].host_id;
  bool known = h.host_index < static_cast<uint32_t>(size()) &&
               options_.hosts[h.host_index].host_id == h.host_id;
  std::string them = known ? describe_host(static_cast<int>(h.host_index))
                           : fmt::format("{} (host index {})", h.host_id, h.host_index);
  // Cluster first: a daemon of another cluster is best told so, whatever
  // else differs.
  if (h.identity.cluster_name != me.cluster_name)
    return fmt::format("cluster name mismatch: {} is in cluster '{}', this daemon {} is in '{}'",
                       them, h.identity.cluster_name, my_id, me.cluster_name);
  if (h.identity.protocol_version != me.protocol_version)
    return fmt::format("protocol version mismatch: {} speaks version {}, this daemon {} speaks {}",
                       them, h.identity.protocol_version, my_id, me.protocol_version);
  if (h.identity.build_id != me.build_id)
    return fmt::format("build id mismatch: {} runs build '{}', this daemon {} runs build '{}'",
                       them, h.identity.build_id, my_id, me.build_id);
  if (h.host_index >= static_cast<uint32_t>(size()))
    return fmt::format(
        "host index mismatch: {} says it is host index {}, but the hosts table of "
        "this daemon {} has {} hosts",
        h.host_id, h.host_index, my_id, size());
  if (options_.hosts[h.host_index].host_id.empty())
    return fmt::format("{} claims host index {}, which no host of this daemon {}'s cluster holds "
                       "(yet): a host that joined moments ago is let in once this daemon hears "
                       "of it",
                       h.host_id, h.host_index, my_id);
  if (!known)
    return fmt::format(
        "host id mismatch: the connecting daemon says it is {} at host index {}, "
        "but in the hosts table of this daemon {} index {} is {}",
        h.host_id, h.host_index, my_id, h.host_index,
        describe_host(static_cast<int>(h.host_index)));
  if (Pair* p = pair_of(static_cast<int>(h.host_index)); p != nullptr && p->absent())
    return fmt::format("{} has left the cluster as this daemon {} knows it; refused until it "
                       "registers again",
                       them, my_id);
  if (static_cast<int>(h.host_index) == self())
    return fmt::format(
        "{} connected to itself (a connection claimed this daemon's own host "
        "index {})",
        them, h.host_index);
  if (static_cast<int>(h.host_index) > self())
    return fmt::format(
        "direction mismatch: {} (host index {}) connected to this daemon {} (host "
        "index {}), but the lower index connects; are the hosts tables the same?",
        them, h.host_index, my_id, self());
  if (int want = streams_for(static_cast<int>(h.host_index));
      h.streams != static_cast<uint32_t>(want))
    return fmt::format("streams mismatch: {} opens {} streams to this daemon, this daemon {} "
                       "expects {} (streams within a rack and across racks must be set the same "
                       "on every host)",
                       them, h.streams, my_id, want);
  if (h.stream >= h.streams)
    return fmt::format("{} sent stream index {} of {} streams", them, h.stream, h.streams);
  return "";
}

void TcpContext::refuse(Connection* c, int claimed_index, const std::string& reason) {
  // Once per distinct reason and remote address (its port changes with
  // every retry): a misconfigured peer retries forever, and a process
  // elsewhere claiming the same host is news.
  const std::string& remote = c->remote();
  std::string from = remote.substr(0, remote.rfind(':'));
  if (logged_refusals_.size() > 256) logged_refusals_.clear();
  if (logged_refusals_.insert(from + " " + reason).second)
    spdlog::error("tcp transport: refused a connection from {}: {}", c->remote(), reason);
  else
    spdlog::debug("tcp transport: refused a connection from {}: {}", c->remote(), reason);
  if (Pair* p = pair_of(claimed_index)) p->note_refusal(reason);
  SendItem* it = c->item();
  it->header.type = static_cast<uint8_t>(FrameType::kRefuse);
  it->owned.assign(reason.substr(0, kMaxRefuse));
  it->use_owned = true;
  it->header.length = static_cast<uint32_t>(it->owned.size());
  c->push(it);
  c->close_after_send = true;
  c->deadline = Clock::now() + kRefuseLinger;
  c->post_send();
}

void TcpContext::drop_unidentified(Connection* c, const std::string& why) {
  if (!why.empty())
    spdlog::error("tcp transport: dropping the connection from {}: {}", c->remote(), why);
  auto it = std::find(unidentified_.begin(), unidentified_.end(), c);
  if (it != unidentified_.end()) unidentified_.erase(it);
  retire(c);
}

}  // namespace gsync::transport::tcp
