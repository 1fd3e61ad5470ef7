// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider's reliability, one direction of one link each, with no
// DPDK in it (unit-tested over a lossy in-memory wire, tests/unit/
// test_dpdk_window.cc). Frames are numbered; the receiver places every new
// frame's payload straight into its region, in whatever order frames come,
// and acknowledges cumulatively (the next number it expects) with a bitmap
// of the 64 frames after that (selective ack). The sender keeps at most a
// window of frames unacknowledged, resends a frame the bitmap shows missing
// once it is a round trip old; when the oldest frame goes a retransmission
// timeout without an ack, it resends that frame and a probe 64 frames on
// (or the newest), whose ack shows the holes between (the timeout doubles
// each time, and comes back to the measured round trip on progress). When
// the last frames of a burst are lost, no later frame shows the hole: two
// quiet round trips after the sender ran out of new frames, the newest one
// goes again (a tail probe). A write completes (on_write at the receiver, on_write_done at
// the sender) once every frame up to its last is acknowledged, so writes
// complete in order, and a duplicate never lands after its write did.
// docs/transport.md, "The DPDK provider".
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

namespace gsync::transport::dpdk {

using Clock = std::chrono::steady_clock;

// An ack's selective bitmap: bit i of word w says frame cum+1+64w+i has
// arrived. One word rides in the frame header, the rest after it: with one
// word only, a window of hundreds of frames showed one hole per round trip
// (every hole past the first 64 frames waited for the cumulative ack to
// come near it), which capped a link at 1% loss to a third of its rate.
constexpr size_t kSackWords = 8;

struct WriteReq {
  const uint8_t* src = nullptr;
  uint64_t len = 0;
  uint32_t region = 0;
  uint64_t offset = 0;  // in the receiver's region
  uint64_t imm = 0;
  uint64_t cookie = 0;
};

// One frame to put on the wire (its payload is [data, data+length)).
struct OutFrame {
  uint32_t seq = 0;
  bool last = false;
  uint32_t region = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint64_t write_len = 0, imm = 0;  // last only
  const uint8_t* data = nullptr;
  bool resend = false;
};

struct SenderOptions {
  uint32_t window = 512;    // frames unacknowledged at most
  uint32_t payload = 1400;  // bytes per frame at most
  Clock::duration min_rto = std::chrono::milliseconds(5);
  Clock::duration max_rto = std::chrono::milliseconds(200);
  uint32_t first_seq = 0;
  bool tail_probe = true;  // off: only the timeout finds a lost tail (tests of the timeout)
};

class Sender {
 public:
  explicit Sender(const SenderOptions& o);

  void queue(const WriteReq& w);
  // Up to max frames due now: resends first, then new frames while the
  // window has room. Each is counted as sent at `now`.
  size_t due(Clock::time_point now, OutFrame* out, size_t max);
  // The receiver's ack. `done` gets the cookies of the writes it completes,
  // in order. False when the ack makes no sense (it acknowledges a frame
  // never sent): ignored.
  bool on_ack(uint32_t cum, const uint64_t* sack, size_t words, uint32_t window,
              Clock::time_point now, std::vector<uint64_t>* done);
  bool on_ack(uint32_t cum, uint64_t sack, uint32_t window, Clock::time_point now,
              std::vector<uint64_t>* done) {
    return on_ack(cum, &sack, 1, window, now, done);
  }
  // The link is gone: the cookies of every write not completed, in order.
  void abandon(std::vector<uint64_t>* cookies);

  bool idle() const { return writes_.empty(); }
  bool has_due(Clock::time_point now) const;
  // Since when the oldest outstanding frame has waited with no progress;
  // Clock::time_point{} when nothing is outstanding.
  Clock::time_point waiting_since() const;
  Clock::duration rto() const { return rto_; }
  Clock::duration srtt() const { return srtt_; }

  uint64_t frames_sent = 0, frames_resent = 0, timeouts = 0, bad_acks = 0;
  uint64_t bytes_acked = 0;

 private:
  struct Write {
    WriteReq req;
    uint64_t framed = 0;  // bytes put into frames so far
  };
  struct Slot {
    Write* w = nullptr;
    uint64_t off = 0;  // in the write
    uint32_t len = 0;
    bool last = false, sacked = false, resent = false, queued = false;
    Clock::time_point sent{};
  };
  Slot& slot(uint32_t seq) { return slots_[seq & mask_]; }
  const Slot& slot(uint32_t seq) const { return slots_[seq & mask_]; }
  uint32_t in_flight() const { return next_ - base_; }
  bool outstanding(uint32_t seq) const { return seq - base_ < in_flight(); }
  OutFrame frame_of(uint32_t seq, bool resend) const;
  void on_timeout();
  void mark_lost(uint32_t cum, const uint64_t* sack, size_t words, Clock::time_point now);
  void queue_holes(Clock::time_point now);
  void probe_tail(Clock::time_point now);
  void advance(uint32_t cum, Clock::time_point now, std::vector<uint64_t>* done);

  SenderOptions o_;
  std::deque<Write> writes_;  // not complete, in order; references stay valid
  size_t unframed_ = 0;       // index in writes_ of the first write with bytes left to frame
  std::vector<Slot> slots_;
  uint32_t mask_ = 0;
  uint32_t base_ = 0, next_ = 0;  // [base_, next_) are outstanding
  uint32_t hole_end_ = 0;  // one past the highest frame acknowledged selectively
  Clock::time_point last_ack_{};
  bool probed_ = false;  // the tail probe went since the last progress
  uint32_t peer_window_ = 0;
  std::deque<uint32_t> lost_;  // to resend, oldest first
  Clock::duration rto_, srtt_{};
  Clock::time_point progress_{};
};

// Where a complete write landed (the last frame's fields).
struct Landing {
  uint32_t region = 0;
  uint64_t offset = 0, len = 0, imm = 0;
};

class Receiver {
 public:
  Receiver(uint32_t window, uint32_t first_seq = 0);

  enum class Verdict { kNew, kDuplicate, kOutside };
  Verdict classify(uint32_t seq) const;
  // A new frame has been placed (or dropped as a late write into a retired
  // region); last: the write it ends, else null.
  void accept(uint32_t seq, const Landing* last);
  // The writes completed since the last call, in order.
  void take(std::vector<Landing>* out);

  uint32_t cum() const { return cum_; }
  uint64_t sack() const;
  // The whole bitmap: words written to out (at most kSackWords), trailing
  // empty words left out; 0 when nothing past cum has arrived.
  size_t sack(uint64_t* out) const;
  uint32_t window() const { return window_; }

 private:
  struct Slot {
    bool got = false, ends = false;
    Landing landing;
  };
  uint32_t window_;
  uint32_t mask_;
  uint32_t cum_;
  std::vector<Slot> slots_;
  std::vector<Landing> ready_;
};

}  // namespace gsync::transport::dpdk
