// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/dpdk/window.h"

#include <algorithm>
#include <bit>

namespace gsync::transport::dpdk {

namespace {
uint32_t ring_size(uint32_t window) { return std::bit_ceil(std::max<uint32_t>(window, 64)); }
constexpr auto kMinHoleAge = std::chrono::microseconds(50);
constexpr auto kMinProbeWait = std::chrono::microseconds(200);
}  // namespace

Sender::Sender(const SenderOptions& o)
    : o_(o),
      slots_(ring_size(o.window)),
      mask_(ring_size(o.window) - 1),
      base_(o.first_seq),
      next_(o.first_seq),
      hole_end_(o.first_seq),
      peer_window_(o.window),
      rto_(o.min_rto) {}

void Sender::queue(const WriteReq& w) { writes_.push_back(Write{w, 0}); }

OutFrame Sender::frame_of(uint32_t seq, bool resend) const {
  const Slot& s = slot(seq);
  OutFrame f;
  f.seq = seq;
  f.last = s.last;
  f.region = s.w->req.region;
  f.offset = s.w->req.offset + s.off;
  f.length = s.len;
  f.data = s.w->req.src + s.off;
  if (s.last) {
    f.write_len = s.w->req.len;
    f.imm = s.w->req.imm;
  }
  f.resend = resend;
  return f;
}

bool Sender::has_due(Clock::time_point now) const {
  if (!lost_.empty()) return true;
  if (in_flight() > 0 && now - slot(base_).sent >= rto_) return true;
  return unframed_ < writes_.size() && in_flight() < std::min(o_.window, peer_window_);
}

void Sender::on_timeout() {
  // The oldest frame goes again, and a probe further on: the ack to the
  // probe shows (selective ack) which frames between are missing, and those
  // go as holes do. Not everything outstanding: on a busy host a timeout is
  // mostly a receiver that was not scheduled, and resending a whole window
  // for it only doubles the traffic.
  timeouts++;
  uint32_t probe = next_ - base_ > 64 ? base_ + 64 : next_ - 1;
  for (uint32_t seq : {base_, probe}) {
    Slot& s = slot(seq);
    if (s.sacked || s.queued) continue;
    s.queued = true;
    lost_.push_back(seq);
  }
  rto_ = std::min(rto_ * 2, o_.max_rto);
}

size_t Sender::due(Clock::time_point now, OutFrame* out, size_t max) {
  size_t n = 0;
  queue_holes(now);
  probe_tail(now);
  if (in_flight() > 0 && now - slot(base_).sent >= rto_ && !slot(base_).queued) on_timeout();
  while (n < max && !lost_.empty()) {
    uint32_t seq = lost_.front();
    lost_.pop_front();
    if (!outstanding(seq)) continue;  // acknowledged since
    Slot& s = slot(seq);
    s.queued = false;
    if (s.sacked) continue;
    s.resent = true;
    s.sent = now;
    frames_resent++;
    out[n++] = frame_of(seq, true);
  }
  uint32_t limit = std::min(o_.window, peer_window_);
  while (n < max && unframed_ < writes_.size() && in_flight() < limit) {
    Write& w = writes_[unframed_];
    uint64_t len = std::min<uint64_t>(w.req.len - w.framed, o_.payload);
    if (in_flight() == 0) progress_ = now;  // the wait starts with the first frame
    Slot& s = slot(next_);
    s = Slot{&w, w.framed, uint32_t(len), false, false, false, false, now};
    w.framed += len;
    s.last = w.framed == w.req.len;
    if (s.last) unframed_++;
    frames_sent++;
    out[n++] = frame_of(next_++, false);
  }
  return n;
}

void Sender::advance(uint32_t cum, Clock::time_point now, std::vector<uint64_t>* done) {
  // One round-trip sample per ack: the newest frame it acknowledges, and
  // only where no hole was being filled (the frames behind a hole wait for
  // it, beyond what the selective bitmap can mark) and that frame went once
  // (Karn).
  const Slot& newest = slot(cum - 1);
  if (hole_end_ == base_ && !newest.resent && !newest.sacked) {
    Clock::duration sample = now - newest.sent;
    srtt_ = srtt_.count() == 0 ? sample : (srtt_ * 7 + sample) / 8;
  }
  for (; base_ != cum; base_++) {
    Slot& s = slot(base_);
    bytes_acked += s.len;
    if (s.last) {
      done->push_back(writes_.front().req.cookie);
      writes_.pop_front();
      unframed_--;
    }
    s = Slot{};
  }
  if (hole_end_ - cum > in_flight()) hole_end_ = cum;  // the holes are filled
  rto_ = std::clamp<Clock::duration>(srtt_ * 4, o_.min_rto, o_.max_rto);
  progress_ = now;
}

void Sender::mark_lost(uint32_t cum, const uint64_t* sack, size_t words,
                       Clock::time_point now) {
  uint32_t end = cum + 1;  // one past the highest frame seen
  for (size_t w = 0; w < words; w++) {
    for (uint64_t bits = sack[w]; bits != 0; bits &= bits - 1) {
      uint32_t seq = cum + 1 + uint32_t(64 * w) + uint32_t(std::countr_zero(bits));
      slot(seq).sacked = true;
      end = seq + 1;
    }
  }
  if (end - base_ > hole_end_ - base_) hole_end_ = end;
  queue_holes(now);
}

void Sender::probe_tail(Clock::time_point now) {
  // The last frames of a burst lost: no later frame brings an ack that
  // shows the hole, and the timeout is milliseconds away. Once the sender
  // has nothing new to send and two round trips pass without an ack, the
  // newest frame goes again; its ack shows what is missing.
  if (!o_.tail_probe || probed_ || in_flight() == 0 || unframed_ < writes_.size()) return;
  Slot& s = slot(next_ - 1);
  Clock::duration quiet = std::max<Clock::duration>(2 * srtt_, kMinProbeWait);
  if (now - std::max(last_ack_, s.sent) < quiet || s.sacked || s.queued) return;
  probed_ = true;
  s.queued = true;
  lost_.push_back(next_ - 1);
}

void Sender::queue_holes(Clock::time_point now) {
  // A frame below the highest one acknowledged selectively is missing: sent
  // again once it is a round trip old, and again each round trip after
  // that. Looked at on every ack and every turn: a window stuck on a hole
  // brings no more acks to look on.
  if (hole_end_ - base_ > in_flight()) hole_end_ = base_;  // acked past the holes
  if (hole_end_ == base_) return;
  // At most the 64 frames a selective ack covers, past the first hole.
  // A single-queue port does not reorder: a hole is a loss as soon as a
  // round trip says the frame is not merely late.
  Clock::duration age = std::max<Clock::duration>(srtt_ + srtt_ / 4, kMinHoleAge);
  for (uint32_t seq = base_; seq != hole_end_; seq++) {
    Slot& s = slot(seq);
    if (s.sacked || s.queued || now - s.sent < age) continue;
    s.queued = true;
    lost_.push_back(seq);
  }
}

bool Sender::on_ack(uint32_t cum, const uint64_t* sack, size_t words, uint32_t window,
                    Clock::time_point now, std::vector<uint64_t>* done) {
  // cum must lie in [base_, next_]: an older one is a late ack (harmless),
  // a newer one acknowledges what was never sent.
  if (cum - base_ > in_flight()) {
    if (base_ - cum < (1u << 31)) return true;  // late, superseded
    bad_acks++;
    return false;
  }
  while (words > 0 && sack[words - 1] == 0) words--;
  if (words > 0) {
    // A selective ack of a frame never sent would mark a slot of the ring
    // that holds an older, unacknowledged frame.
    uint32_t top = cum + 1 + uint32_t(64 * (words - 1)) +
                   uint32_t(63 - std::countl_zero(sack[words - 1]));
    if (top - base_ >= in_flight()) {
      bad_acks++;
      return false;
    }
  }
  peer_window_ = std::max<uint32_t>(window, 1);
  last_ack_ = now;
  if (cum != base_) {
    advance(cum, now, done);
    probed_ = false;
  }
  if (words > 0 && in_flight() > 0) mark_lost(cum, sack, words, now);
  return true;
}

void Sender::abandon(std::vector<uint64_t>* cookies) {
  for (const Write& w : writes_) cookies->push_back(w.req.cookie);
  writes_.clear();
  lost_.clear();
  unframed_ = 0;
  std::fill(slots_.begin(), slots_.end(), Slot{});
  base_ = hole_end_ = next_;
}

Clock::time_point Sender::waiting_since() const {
  return in_flight() > 0 ? progress_ : Clock::time_point{};
}

// ---------------------------------------------------------------- receiver

Receiver::Receiver(uint32_t window, uint32_t first_seq)
    : window_(window),
      mask_(ring_size(window) - 1),
      cum_(first_seq),
      slots_(ring_size(window)) {}

Receiver::Verdict Receiver::classify(uint32_t seq) const {
  uint32_t ahead = seq - cum_;
  if (ahead < window_) return slots_[seq & mask_].got ? Verdict::kDuplicate : Verdict::kNew;
  // Behind what was delivered: the sender did not hear our ack. Anything
  // else is not a frame of this window.
  if (cum_ - seq <= window_ * 4u) return Verdict::kDuplicate;
  return Verdict::kOutside;
}

void Receiver::accept(uint32_t seq, const Landing* last) {
  Slot& s = slots_[seq & mask_];
  s.got = true;
  s.ends = last != nullptr;
  if (last) s.landing = *last;
  while (slots_[cum_ & mask_].got) {
    Slot& c = slots_[cum_ & mask_];
    if (c.ends) ready_.push_back(c.landing);
    c = Slot{};
    cum_++;
  }
}

void Receiver::take(std::vector<Landing>* out) {
  out->insert(out->end(), ready_.begin(), ready_.end());
  ready_.clear();
}

uint64_t Receiver::sack() const {
  uint64_t words[kSackWords] = {};
  sack(words);
  return words[0];
}

size_t Receiver::sack(uint64_t* out) const {
  // Bits for cum+1 .. within the window (frames past it are never new).
  uint32_t n = std::min<uint32_t>(uint32_t(64 * kSackWords), window_ - 1);
  size_t used = 0;
  for (size_t w = 0; w * 64 < n; w++) {
    uint64_t bits = 0;
    for (uint32_t i = 0; i < 64 && w * 64 + i < n; i++)
      if (slots_[(cum_ + 1 + uint32_t(w * 64) + i) & mask_].got) bits |= uint64_t(1) << i;
    out[w] = bits;
    if (bits != 0) used = w + 1;
  }
  return used;
}

}  // namespace gsync::transport::dpdk
