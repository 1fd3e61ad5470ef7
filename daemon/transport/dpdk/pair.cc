// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/dpdk/pair.h"

#include <cstring>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/transport/peering/link.h"

namespace gsync::transport::dpdk {

namespace {

// Frames one pair puts out per transmit: the port's burst, shared fairly.
constexpr size_t kBurst = 128;

std::string mac_text(const uint8_t m[6]) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
}

uint32_t fresh_link_id(int peer) {
  // The low half names the pair (the receive path finds it by that), the
  // high half the incarnation; never 0.
  static std::mt19937 rng{std::random_device{}()};
  uint32_t hi = 0;
  while (hi == 0) hi = rng() & 0xffff;
  return hi << 16 | (uint32_t(peer) & 0xffff);
}

}  // namespace

Pair::Pair(const PairEnv& env, int peer, std::string self, std::string describe)
    : env_(env), peer_(peer), self_(std::move(self)), describe_(std::move(describe)) {
  out_.resize(kBurst);
}

// ---------------------------------------------------------------- bring-up

void Pair::on_link_up() {
  tcp_up_ = true;
  start();
}

void Pair::start() {
  link_id_ = fresh_link_id(peer_);
  have_remote_ = peer_ready_ = false;
  Hello m;
  std::memcpy(m.mac, env_.mac, 6);
  m.link = link_id_;
  m.payload = env_.payload;
  m.window = env_.window;
  env_.host->send_bootstrap(peer_, encode(m));
}

void Pair::on_link_down(const Status& why) {
  tcp_up_ = false;
  teardown(why);
}

void Pair::on_hello(const Hello& m) {
  if (!tcp_up_) return;
  if (have_remote_) {
    if (m.link == remote_.link) return;
    // The peer started over (it saw a silence we did not): our state is of
    // its old incarnation, so ours goes too.
    teardown(Status(GSYNC_ERR_HOST_LOST,
                    fmt::format("dpdk link {} -> {}: the peer started the link over (its link id "
                                "{:#x} replaces {:#x})",
                                self_, describe_, m.link, remote_.link)));
    start();
  }
  remote_ = m;
  have_remote_ = true;
  payload_ = std::min(m.payload, env_.payload);
  window_ = std::min(m.window, env_.window);
  // Its frames may come as soon as it has our READY.
  receiver_ = std::make_unique<Receiver>(window_);
  env_.host->send_bootstrap(peer_, encode(Ready{link_id_, m.link}));
  maybe_up();
}

void Pair::on_ready(const Ready& m) {
  if (!have_remote_ || m.to_link != link_id_ || m.from_link != remote_.link) return;  // stale
  peer_ready_ = true;
  maybe_up();
}

void Pair::maybe_up() {
  if (!have_remote_ || !peer_ready_ || up_ || !*env_.port_up) return;
  SenderOptions o;
  o.window = window_;
  o.payload = payload_;
  o.min_rto = env_.min_rto;
  sender_ = std::make_unique<Sender>(o);
  up_ = true;
  connects_++;
  spdlog::info("dpdk link {} -> {} up: {} <-> {}, link ids {:#x} <-> {:#x}, {} bytes per frame, "
               "window {} frames",
               self_, describe_, mac_text(env_.mac), mac_text(remote_.mac), link_id_, remote_.link,
               payload_, window_);
  env_.host->post_peer_up(peer_);
}

void Pair::teardown(const Status& why) {
  if (!why.message().empty() && (up_ || have_remote_)) last_error_.set(why.message());
  if (up_) {
    up_ = false;
    spdlog::warn("{}", why.message());
    env_.host->post_peer_down(peer_, why);
  }
  if (sender_) {
    frames_resent_total_ += sender_->frames_resent;
    timeouts_total_ += sender_->timeouts;
    done_.clear();
    sender_->abandon(&done_);
    if (env_.teardowns) ++*env_.teardowns;
    Status st(why.code() == GSYNC_OK ? GSYNC_ERR_HOST_LOST : why.code(), why.message());
    for (uint64_t c : done_) env_.host->post_write_done(peer_, c, st);
  }
  sender_.reset();
  receiver_.reset();
  have_remote_ = peer_ready_ = ack_owed_ = false;
}

// ---------------------------------------------------------------- writes

void Pair::write(const WriteReq& w) {
  if (!up_) {
    env_.host->post_write_done(
        peer_, w.cookie,
        Status(GSYNC_ERR_HOST_LOST,
               fmt::format("dpdk link {} -> {} is down{}", self_, describe_,
                           last_error_.empty() ? "" : ": " + last_error_.text)));
    return;
  }
  sender_->queue(w);
}

void Pair::on_frame(const Parsed& f) {
  if (!have_remote_ || std::memcmp(f.src_mac, remote_.mac, 6) != 0) {
    env_.drops[size_t(Drop::kLink)]++;
    return;
  }
  if (f.h.type == uint8_t(FrameType::kData)) return on_data(f);
  if (!up_) return;
  done_.clear();
  uint64_t sack[kSackWords] = {f.h.sack};
  size_t words = 1 + size_t(f.h.offset);  // parse() bounds it by kMaxAckWords
  std::memcpy(sack + 1, f.payload, size_t(f.h.offset) * 8);
  if (!sender_->on_ack(f.h.seq, sack, words, f.h.length, Clock::now(), &done_)) {
    env_.drops[size_t(Drop::kWindow)]++;
    return;
  }
  for (uint64_t c : done_) env_.host->post_write_done(peer_, c, Status::ok());
  writes_sent_ += done_.size();
}

void Pair::on_data(const Parsed& f) {
  switch (receiver_->classify(f.h.seq)) {
    case Receiver::Verdict::kOutside:
      env_.drops[size_t(Drop::kWindow)]++;
      return;
    case Receiver::Verdict::kDuplicate:
      duplicates_++;
      ack_owed_ = true;  // the sender did not hear our ack
      return;
    case Receiver::Verdict::kNew:
      break;
  }
  const FrameHeader& h = f.h;
  const Region* r = env_.regions->find(h.region);
  if (h.length > payload_ || (r == nullptr && !env_.regions->retired(h.region)) ||
      (r != nullptr && (h.offset > r->bytes || h.length > r->bytes - h.offset))) {
    // Never written anywhere, never acknowledged: a sender of this
    // protocol does not send it.
    env_.drops[size_t(Drop::kRegion)]++;
    return;
  }
  if (r != nullptr) std::memcpy(r->base + h.offset, f.payload, h.length);  // else: a late write
  Landing l{h.region, h.offset + h.length - h.write_len, h.write_len, h.imm};
  receiver_->accept(h.seq, (h.flags & kFlagLast) ? &l : nullptr);
  frames_received_++;
  bytes_received_ += h.length;
  ack_owed_ = true;
  landed_.clear();
  receiver_->take(&landed_);
  land(landed_);
}

void Pair::land(const std::vector<Landing>& done) {
  const Handlers& hs = env_.host->handlers();
  for (const Landing& l : done) {
    if (env_.regions->find(l.region) == nullptr) continue;  // retired meanwhile: dropped
    writes_received_++;
    if (hs.on_write) hs.on_write(peer_, l.region, l.offset, l.len, l.imm);
  }
}

// ---------------------------------------------------------------- transmit

bool Pair::put_frame(TxSink& tx, const OutFrame& f) {
  uint8_t* p = tx.frame_with(kFrameOverhead, f.data, f.length);
  if (p == nullptr) return false;
  FrameHeader h;
  h.type = uint8_t(FrameType::kData);
  h.flags = f.last ? kFlagLast : 0;
  h.cluster = env_.cluster;
  h.link = remote_.link;
  h.seq = f.seq;
  h.length = f.length;
  h.region = f.region;
  h.offset = f.offset;
  h.write_len = f.write_len;
  h.imm = f.imm;
  put_headers(p, remote_.mac, env_.mac, h);
  bytes_sent_ += f.length;
  return true;
}

bool Pair::put_ack(TxSink& tx) {
  uint64_t sack[kSackWords] = {};
  size_t words = receiver_->sack(sack);
  size_t extra = words > 1 ? words - 1 : 0;
  uint8_t* p = tx.frame(kFrameOverhead + extra * 8);
  if (p == nullptr) return false;
  FrameHeader h;
  h.type = uint8_t(FrameType::kAck);
  h.cluster = env_.cluster;
  h.link = remote_.link;
  h.seq = receiver_->cum();
  h.length = receiver_->window();
  h.sack = sack[0];
  h.offset = extra;
  put_headers(p, remote_.mac, env_.mac, h);
  std::memcpy(p + kFrameOverhead, sack + 1, extra * 8);
  ack_owed_ = false;
  acks_sent_++;
  return true;
}

bool Pair::transmit(Clock::time_point now, TxSink& tx) {
  if (ack_owed_ && receiver_ && tx.room() > 0) put_ack(tx);
  if (!up_) return false;
  size_t max = std::min(kBurst, tx.room());
  size_t n = sender_->due(now, out_.data(), max);
  for (size_t i = 0; i < n; i++) put_frame(tx, out_[i]);
  Clock::time_point since = sender_->waiting_since();
  if (since != Clock::time_point{} && now - since > env_.peer_timeout) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count();
    teardown(Status(GSYNC_ERR_HOST_LOST,
                    fmt::format("dpdk link {} -> {}: no acknowledgement for {} ms (peer timeout "
                                "{} ms) with frames outstanding; the link starts over",
                                self_, describe_, ms,
                                std::chrono::duration_cast<std::chrono::milliseconds>(
                                    env_.peer_timeout)
                                    .count())));
    if (tcp_up_) start();
    return false;
  }
  return sender_->has_due(now);
}

PeerStats Pair::stats() const {
  PeerStats s;
  s.state = up_ ? PeerState::kUp
                : (connects_ > 0 || !last_error_.empty()) ? PeerState::kDown : PeerState::kConnecting;
  s.bytes_sent = bytes_sent_;
  s.bytes_received = bytes_received_;
  s.writes_sent = writes_sent_;
  s.writes_received = writes_received_;
  s.connects = connects_;
  s.last_error = last_error_.text;
  s.last_error_at = last_error_.at;
  s.transport = "dpdk";
  s.streams = 1;
  s.dpdk.mac = mac_text(env_.mac);
  s.dpdk.remote_mac = have_remote_ ? mac_text(remote_.mac) : "";
  s.dpdk.link = link_id_;
  s.dpdk.remote_link = have_remote_ ? remote_.link : 0;
  s.dpdk.frames_resent = frames_resent_total_ + (sender_ ? sender_->frames_resent : 0);
  s.dpdk.timeouts = timeouts_total_ + (sender_ ? sender_->timeouts : 0);
  s.dpdk.frames_sent = sender_ ? sender_->frames_sent : 0;
  s.dpdk.frames_received = frames_received_;
  s.dpdk.duplicates = duplicates_;
  if (sender_) {
    s.dpdk.srtt_us = std::chrono::duration<double, std::micro>(sender_->srtt()).count();
    s.dpdk.rto_us = std::chrono::duration<double, std::micro>(sender_->rto()).count();
  }
  return s;
}

}  // namespace gsync::transport::dpdk
