// SPDX-License-Identifier: Apache-2.0
//
// One direction of a DPDK link in memory, for tests/unit/test_dpdk_window.cc:
// a Sender and a Receiver (daemon/transport/dpdk/window.h) joined by a wire
// that carries real frames (put_headers, parse) and loses, duplicates and
// reorders them as told, on a fake clock the test advances (no sleeps, no
// threads). The receiving end does what the provider's Pair::on_data does:
// classify, copy the payload to its place in `dst`, accept, take the writes
// completed; and acks as Pair::put_ack does. Along the way it checks what
// must hold whatever the wire did: every frame parses, a new frame's bytes
// belong to a write that has not landed yet (a duplicate never lands after
// its write), the sender has at most a window of frames outstanding, and
// only resends frames that are outstanding.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "daemon/transport/dpdk/frame.h"
#include "daemon/transport/dpdk/window.h"

namespace gsync::transport::dpdk::wire {

using namespace std::chrono_literals;

// Far from Clock::time_point{}, which waiting_since() uses for "nothing".
inline const Clock::time_point kStart = Clock::time_point{} + 1h;

struct Faults {
  double drop_data = 0, drop_ack = 0, duplicate = 0;
  Clock::duration latency = 20us;  // one way
  Clock::duration jitter = 0us;    // added at random; more than a tick reorders frames
  uint64_t seed = 1;
};

struct TestWrite {
  uint64_t offset = 0, len = 0, imm = 0, cookie = 0;
  uint32_t region = 0;
};

class Wire {
 public:
  static constexpr Clock::duration kTick = 5us;
  static constexpr uint64_t kGap = 64;  // sentinel bytes between writes in dst
  static constexpr uint8_t kSentinel = 0xee;

  Wire(const SenderOptions& so, uint32_t receiver_window, Faults f)
      : sender(so),
        receiver(receiver_window, so.first_seq),
        window_(so.window),
        first_(so.first_seq),
        base_(so.first_seq),
        next_(so.first_seq),
        faults_(f),
        rng_(f.seed) {}

  // Queues writes of these sizes, one after another in dst with kGap bytes
  // between, each of random bytes, to regions 1..3 in turn.
  void add_writes(const std::vector<uint64_t>& sizes) {
    for (uint64_t len : sizes) {
      TestWrite w;
      w.offset = dst.size();
      w.len = len;
      w.region = 1 + writes.size() % 3;
      w.imm = 0x1000 + writes.size();
      w.cookie = 500 + writes.size();
      auto& bytes = payloads_.emplace_back(len + 1);  // +1: a valid pointer for 0 bytes
      for (auto& b : bytes) b = static_cast<uint8_t>(rng_());
      dst.resize(w.offset + len + kGap, kSentinel);
      expect.resize(dst.size(), kSentinel);
      std::memcpy(expect.data() + w.offset, bytes.data(), len);
      writes.push_back(w);
      sender.queue(WriteReq{bytes.data(), len, w.region, w.offset, w.imm, w.cookie});
    }
  }

  bool complete() const {
    return done.size() == writes.size() && landed.size() == writes.size() && sender.idle();
  }

  // Steps until complete(), or `limit` of fake time has passed, or a
  // second of it without progress at either end (a stalled link: that is
  // 50 timeouts at most).
  void run(Clock::duration limit) {
    Clock::time_point end = now + limit, moved = now;
    uint64_t seen = progress();
    while (!complete() && now < end && now - moved < 1s && !::testing::Test::HasFatalFailure()) {
      step();
      if (progress() != seen) {
        seen = progress();
        moved = now;
      }
    }
  }

  void step() {
    // With nothing on the wire and nothing due, jump ahead (a timeout).
    bool quiet = to_receiver_.empty() && to_sender_.empty() && !sender.has_due(now);
    now += quiet ? 20 * kTick : kTick;
    receive_data();
    receive_acks();
    send_data();
  }

  Sender sender;
  Receiver receiver;
  Clock::time_point now = kStart;
  std::vector<uint8_t> dst, expect;
  std::vector<TestWrite> writes;
  std::vector<Landing> landed;
  std::vector<uint64_t> done;
  uint64_t duplicates_seen = 0, outside_seen = 0, reordered_seen = 0, acks_sent = 0;
  uint32_t max_outstanding = 0;

  uint32_t next_seq() const { return next_; }
  uint64_t progress() const { return receiver.cum() + sender.bytes_acked; }

 private:
  struct InFlight {
    Clock::time_point arrive;
    std::vector<uint8_t> bytes;
  };
  static constexpr uint8_t kMacA[6] = {2, 0, 0, 0, 0, 0xa};
  static constexpr uint8_t kMacB[6] = {2, 0, 0, 0, 0, 0xb};
  static uint32_t tag() { return cluster_tag("wire"); }

  bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  // Puts a frame on the wire, or loses it, or puts it there twice; frames
  // arrive in order of their arrival time, which the jitter shuffles.
  void put(std::deque<InFlight>* q, std::vector<uint8_t> bytes, double drop) {
    if (chance(drop)) return;
    int copies = chance(faults_.duplicate) ? 2 : 1;
    for (int i = 0; i < copies; i++) {
      auto j = std::uniform_int_distribution<int64_t>(0, faults_.jitter.count())(rng_);
      InFlight f{now + faults_.latency + Clock::duration(j), bytes};
      auto at = std::upper_bound(q->begin(), q->end(), f.arrive,
                                 [](Clock::time_point t, const InFlight& g) { return t < g.arrive; });
      q->insert(at, std::move(f));
    }
  }

  bool take_arrived(std::deque<InFlight>* q, Parsed* p, std::vector<uint8_t>* keep) {
    if (q->empty() || q->front().arrive > now) return false;
    *keep = std::move(q->front().bytes);
    q->pop_front();
    Drop d = parse(keep->data(), keep->size(), tag(), p);
    EXPECT_EQ(d, Drop::kNone) << drop_name(d);
    return d == Drop::kNone;
  }

  void receive_data() {
    Parsed p;
    std::vector<uint8_t> bytes;
    bool ack_owed = false;
    while (take_arrived(&to_receiver_, &p, &bytes)) {
      uint64_t rel = uint32_t(p.h.seq - first_) + uint64_t(1);
      if (rel > highest_) highest_ = rel;
      else if (rel != highest_) reordered_seen++;  // behind a newer frame
      // As Pair::on_data: a frame outside the window is not acknowledged,
      // a duplicate is (the sender did not hear the ack).
      switch (receiver.classify(p.h.seq)) {
        case Receiver::Verdict::kOutside: outside_seen++; continue;
        case Receiver::Verdict::kDuplicate: duplicates_seen++; ack_owed = true; continue;
        case Receiver::Verdict::kNew: break;
      }
      ack_owed = true;
      land(p);
    }
    if (ack_owed) send_ack();
  }

  void land(const Parsed& p) {
    const FrameHeader& h = p.h;
    ASSERT_LE(h.offset + h.length, dst.size()) << "seq " << h.seq;
    // The write these bytes belong to (the last one starting at or before
    // them) has not landed: nothing is written after on_write said done.
    auto it = std::upper_bound(writes.begin(), writes.end(), h.offset,
                               [](uint64_t o, const TestWrite& w) { return o < w.offset; });
    ASSERT_NE(it, writes.begin());
    size_t index = size_t(it - writes.begin()) - 1;
    EXPECT_GE(index, landed.size()) << "seq " << h.seq << " wrote into write " << index
                                    << " after it landed";
    std::memcpy(dst.data() + h.offset, p.payload, h.length);
    Landing l{h.region, h.offset + h.length - h.write_len, h.write_len, h.imm};
    receiver.accept(h.seq, (h.flags & kFlagLast) ? &l : nullptr);
    receiver.take(&landed);
  }

  void send_ack() {
    FrameHeader h;
    h.type = uint8_t(FrameType::kAck);
    h.cluster = tag();
    h.link = 1;
    h.seq = receiver.cum();
    h.length = receiver.window();
    h.sack = receiver.sack();
    std::vector<uint8_t> f(kFrameOverhead);
    put_headers(f.data(), kMacA, kMacB, h);
    acks_sent++;
    put(&to_sender_, std::move(f), faults_.drop_ack);
  }

  void receive_acks() {
    Parsed p;
    std::vector<uint8_t> bytes;
    while (take_arrived(&to_sender_, &p, &bytes)) {
      // The sender's own rule: a cum in [base, next] moves base; an older
      // one is late.
      if (p.h.seq - base_ <= next_ - base_) base_ = p.h.seq;
      EXPECT_TRUE(sender.on_ack(p.h.seq, p.h.sack, p.h.length, now, &done)) << "cum " << p.h.seq;
    }
  }

  void send_data() {
    OutFrame out[32];
    size_t n = sender.due(now, out, 32);
    for (size_t i = 0; i < n; i++) {
      const OutFrame& f = out[i];
      if (f.resend) {
        EXPECT_LT(f.seq - base_, next_ - base_) << "resent seq " << f.seq << " not outstanding";
      } else {
        EXPECT_EQ(f.seq, next_) << "new frames are numbered in order";
        next_ = f.seq + 1;
      }
      max_outstanding = std::max(max_outstanding, next_ - base_);
      EXPECT_LE(next_ - base_, window_) << "more than a window outstanding";
      FrameHeader h;
      h.type = uint8_t(FrameType::kData);
      h.flags = f.last ? kFlagLast : 0;
      h.cluster = tag();
      h.link = 2;
      h.seq = f.seq;
      h.length = f.length;
      h.region = f.region;
      h.offset = f.offset;
      h.write_len = f.write_len;
      h.imm = f.imm;
      std::vector<uint8_t> bytes(kFrameOverhead + f.length);
      put_headers(bytes.data(), kMacB, kMacA, h);
      if (f.length > 0) std::memcpy(bytes.data() + kFrameOverhead, f.data, f.length);
      put(&to_receiver_, std::move(bytes), faults_.drop_data);
    }
  }

  uint32_t window_, first_, base_, next_;  // base_, next_: the test's own count
  uint64_t highest_ = 0;  // 1 + the newest seq seen, counted from first_
  Faults faults_;
  std::mt19937_64 rng_;
  std::deque<std::vector<uint8_t>> payloads_;  // stable: the sender points into them
  std::deque<InFlight> to_receiver_, to_sender_;
};

}  // namespace gsync::transport::dpdk::wire
