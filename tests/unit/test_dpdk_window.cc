// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider's reliability (daemon/transport/dpdk/window.h): writes
// of every size end to end over an in-memory wire that loses, duplicates
// and reorders frames and acks (tests/unit/dpdk_wire.h), across the wrap of
// the 32-bit sequence numbers; then the Sender's window, retransmission
// timeout and bad acks, and the Receiver's verdicts and selective ack, each
// driven by hand on a fake clock.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "daemon/transport/dpdk/window.h"
#include "tests/unit/dpdk_wire.h"

namespace gsync::transport::dpdk {
namespace {

using namespace std::chrono_literals;
using wire::Faults;
using wire::kStart;
using wire::Wire;

constexpr uint32_t kPayload = 1400;

// 0 bytes, 1 byte, exactly one payload, one more, 1 MiB, and a few between.
const std::vector<uint64_t> kSizes = {0, 1, kPayload, kPayload + 1, 1 << 20, 7,
                                      3 * kPayload, 0, 2 * kPayload - 1};

SenderOptions wire_options(uint32_t first_seq = 0) {
  SenderOptions o;
  o.window = 64;
  o.payload = kPayload;
  o.min_rto = 1ms;
  o.max_rto = 20ms;
  o.first_seq = first_seq;
  return o;
}

uint64_t frames_of(const std::vector<uint64_t>& sizes) {
  uint64_t n = 0;
  for (uint64_t len : sizes) n += len == 0 ? 1 : (len + kPayload - 1) / kPayload;
  return n;
}

// Every write landed once, in order, where and as it was sent; the sender
// completed every cookie in order; nothing is left outstanding.
void expect_all_delivered(const Wire& w) {
  ASSERT_TRUE(w.complete()) << w.landed.size() << " of " << w.writes.size() << " landed, "
                            << w.done.size() << " completed at the sender";
  for (size_t i = 0; i < w.writes.size(); i++) {
    const auto& want = w.writes[i];
    const Landing& got = w.landed[i];
    EXPECT_EQ(got.region, want.region) << "write " << i;
    EXPECT_EQ(got.offset, want.offset) << "write " << i;
    EXPECT_EQ(got.len, want.len) << "write " << i;
    EXPECT_EQ(got.imm, want.imm) << "write " << i;
    EXPECT_EQ(w.done[i], want.cookie) << "write " << i;
  }
  EXPECT_TRUE(w.dst == w.expect) << "the destination differs from what was sent";
  EXPECT_EQ(w.sender.waiting_since(), Clock::time_point{});
  uint64_t bytes = 0;
  for (const auto& x : w.writes) bytes += x.len;
  EXPECT_EQ(w.sender.bytes_acked, bytes);
}

// ---------------------------------------------------------------- end to end

TEST(DpdkWindow, LossFreeWritesOfEverySizeLandInOrder) {
  Wire w(wire_options(), 64, Faults{});
  // Half now, half while the first are in flight.
  w.add_writes({kSizes.begin(), kSizes.begin() + 4});
  for (int i = 0; i < 5; i++) w.step();
  w.add_writes({kSizes.begin() + 4, kSizes.end()});
  w.run(10s);
  expect_all_delivered(w);
  EXPECT_EQ(w.sender.frames_sent, frames_of(kSizes));
  EXPECT_EQ(w.sender.frames_resent, 0u);
  EXPECT_EQ(w.sender.timeouts, 0u);
  EXPECT_EQ(w.duplicates_seen + w.outside_seen + w.reordered_seen, 0u);
  EXPECT_EQ(w.max_outstanding, 64u) << "a 1 MiB write fills the window";
  // The round trip is 40 us on this wire; acks come a tick or two later.
  EXPECT_GE(w.sender.srtt(), 40us);
  EXPECT_LE(w.sender.srtt(), 100us);
}

class DpdkWindowLossy : public ::testing::TestWithParam<std::tuple<double, uint32_t>> {};

TEST_P(DpdkWindowLossy, EveryWriteLandsOnceInOrder) {
  auto [loss, first_seq] = GetParam();
  Faults f;
  f.drop_data = loss;
  f.drop_ack = loss;
  f.duplicate = 0.05;
  f.jitter = 30us;  // six ticks: frames overtake each other
  f.seed = uint64_t(loss * 1000) + first_seq;
  Wire w(wire_options(first_seq), 64, f);
  w.add_writes(kSizes);
  w.add_writes(kSizes);
  w.run(60s);
  expect_all_delivered(w);
  EXPECT_GT(w.sender.frames_resent, 0u);
  EXPECT_GT(w.reordered_seen, 0u) << "the wire did not reorder: the test tests less";
  EXPECT_GT(w.duplicates_seen, 0u);
  EXPECT_LE(w.max_outstanding, 64u);
  RecordProperty("frames_resent", std::to_string(w.sender.frames_resent));
  RecordProperty("timeouts", std::to_string(w.sender.timeouts));
  RecordProperty("srtt_us", std::to_string(w.sender.srtt() / 1us));
  RecordProperty("fake_ms", std::to_string((w.now - kStart) / 1ms));
}

// 2^32 - 100: the numbers wrap inside the first write of 1 MiB.
INSTANTIATE_TEST_SUITE_P(Loss, DpdkWindowLossy,
                         ::testing::Combine(::testing::Values(0.01, 0.1, 0.3),
                                            ::testing::Values(0u, 0xffffff9cu)));

TEST(DpdkWindow, SequenceNumbersWrap) {
  const uint32_t first = UINT32_MAX - 100;
  Wire w(wire_options(first), 64, Faults{});
  w.add_writes(kSizes);
  w.run(10s);
  expect_all_delivered(w);
  // The numbers did go past 2^32.
  EXPECT_LT(w.next_seq(), first);
  EXPECT_EQ(uint32_t(w.next_seq() - first), frames_of(kSizes));
  EXPECT_EQ(w.receiver.cum(), w.next_seq());
  EXPECT_EQ(w.sender.frames_resent, 0u);
}

// ---------------------------------------------------------------- sender

SenderOptions small_options(uint32_t first_seq = 0) {
  SenderOptions o;
  o.window = 16;
  o.payload = 100;
  o.min_rto = 1ms;
  o.max_rto = 50ms;
  o.first_seq = first_seq;
  return o;
}

TEST(DpdkSender, NeverMoreThanAWindowOutstanding) {
  Sender s(small_options(10));
  std::vector<uint8_t> src(100 * 100);
  s.queue(WriteReq{src.data(), src.size(), 1, 0, 0, 77});
  OutFrame out[100];
  Clock::time_point t = kStart;
  ASSERT_EQ(s.due(t, out, 100), 16u);
  for (uint32_t i = 0; i < 16; i++) {
    EXPECT_EQ(out[i].seq, 10 + i);
    EXPECT_EQ(out[i].offset, 100u * i);
    EXPECT_EQ(out[i].length, 100u);
    EXPECT_FALSE(out[i].resend);
  }
  EXPECT_EQ(s.due(t, out, 100), 0u) << "the window is full";
  EXPECT_FALSE(s.has_due(t));
  // Four acknowledged: four more, and no more.
  std::vector<uint64_t> done;
  ASSERT_TRUE(s.on_ack(14, 0, 16, t, &done));
  ASSERT_EQ(s.due(t, out, 100), 4u);
  EXPECT_EQ(out[0].seq, 26u);
  EXPECT_EQ(s.due(t, out, 100), 0u);
  // The receiver takes only 2 past what it acknowledged: nothing until it
  // has taken 14 more; then 2 at a time.
  ASSERT_TRUE(s.on_ack(14, 0, 2, t, &done));
  EXPECT_EQ(s.due(t, out, 100), 0u);
  ASSERT_TRUE(s.on_ack(30, 0, 2, t, &done));
  EXPECT_EQ(s.due(t, out, 100), 2u);
  EXPECT_EQ(s.due(t, out, 100), 0u);
  // A window larger than the sender's own does not raise it.
  ASSERT_TRUE(s.on_ack(32, 0, 1000, t, &done));
  EXPECT_EQ(s.due(t, out, 100), 16u);
  EXPECT_EQ(s.frames_sent, 16u + 4 + 2 + 16);
  EXPECT_TRUE(done.empty()) << "the write is not complete";
}

// Without the tail probe (below), only the timeout resends a lost tail.
SenderOptions no_probe() {
  SenderOptions o = small_options();
  o.tail_probe = false;
  return o;
}

TEST(DpdkSender, TimeoutDoublesToItsCapAndComesBackOnProgress) {
  Sender s(no_probe());
  std::vector<uint8_t> src(100);
  std::vector<uint64_t> done;
  OutFrame out[8];
  // One round trip of 3 ms measured: the timeout is 4 of them.
  Clock::time_point t0 = kStart;
  s.queue(WriteReq{src.data(), 100, 1, 0, 0, 1});
  ASSERT_EQ(s.due(t0, out, 8), 1u);
  ASSERT_TRUE(s.on_ack(1, 0, 16, t0 + 3ms, &done));
  EXPECT_EQ(done, std::vector<uint64_t>{1});
  EXPECT_EQ(s.srtt(), 3ms);
  EXPECT_EQ(s.rto(), 12ms);
  // The next frame is lost, and every resend of it.
  Clock::time_point t1 = t0 + 3ms;
  s.queue(WriteReq{src.data(), 100, 1, 100, 0, 2});
  ASSERT_EQ(s.due(t1, out, 8), 1u);
  EXPECT_EQ(s.waiting_since(), t1);
  Clock::time_point last = t1;
  for (auto rto : {12ms, 24ms, 48ms, 50ms, 50ms}) {
    SCOPED_TRACE(std::to_string(rto.count()) + " ms");
    EXPECT_EQ(s.rto(), rto);
    EXPECT_FALSE(s.has_due(last + rto - 1us));
    EXPECT_EQ(s.due(last + rto - 1us, out, 8), 0u) << "resent before its timeout";
    last += rto;
    EXPECT_TRUE(s.has_due(last));
    ASSERT_EQ(s.due(last, out, 8), 1u) << "not resent at its timeout";
    EXPECT_EQ(out[0].seq, 1u);
    EXPECT_TRUE(out[0].resend);
    EXPECT_EQ(out[0].offset, 100u);
    EXPECT_EQ(s.waiting_since(), t1) << "a resend is not progress";
  }
  EXPECT_EQ(s.timeouts, 5u);
  EXPECT_EQ(s.frames_resent, 5u);
  EXPECT_EQ(s.rto(), 50ms);
  // Progress: back to 4 round trips. The resent frame's ack says nothing
  // of the round trip (Karn): the measured 3 ms stands.
  ASSERT_TRUE(s.on_ack(2, 0, 16, last + 1ms, &done));
  EXPECT_EQ(done, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s.srtt(), 3ms);
  EXPECT_EQ(s.rto(), 12ms);
  EXPECT_EQ(s.waiting_since(), Clock::time_point{});
}

TEST(DpdkSender, TimeoutIsClampedToItsBounds) {
  std::vector<uint8_t> src(100);
  std::vector<uint64_t> done;
  OutFrame out[8];
  struct Case {
    Clock::duration rtt, want;
  };
  // 4 x 100 us is below min_rto; 4 x 30 ms is above max_rto.
  for (auto [rtt, want] : {Case{100us, 1ms}, Case{30ms, 50ms}}) {
    Sender s(small_options());
    s.queue(WriteReq{src.data(), 100, 1, 0, 0, 1});
    ASSERT_EQ(s.due(kStart, out, 8), 1u);
    ASSERT_TRUE(s.on_ack(1, 0, 16, kStart + rtt, &done));
    EXPECT_EQ(s.srtt(), rtt);
    EXPECT_EQ(s.rto(), want);
  }
}

TEST(DpdkSender, ALostTailIsProbedBeforeTheTimeout) {
  Sender s(small_options());
  std::vector<uint8_t> src(500);
  std::vector<uint64_t> done;
  OutFrame out[16];
  s.queue(WriteReq{src.data(), 500, 1, 0, 0, 9});
  ASSERT_EQ(s.due(kStart, out, 16), 5u);  // all five lost
  EXPECT_EQ(s.due(kStart + 199us, out, 16), 0u) << "probed before two quiet round trips";
  ASSERT_EQ(s.due(kStart + 200us, out, 16), 1u);
  EXPECT_EQ(out[0].seq, 4u) << "the probe is the newest frame";
  EXPECT_TRUE(out[0].resend);
  EXPECT_EQ(s.due(kStart + 600us, out, 16), 0u) << "probed again with no progress";
  // Its ack shows the four before it missing: they go as holes.
  ASSERT_TRUE(s.on_ack(0, 0b1000, 16, kStart + 700us, &done));
  ASSERT_EQ(s.due(kStart + 700us, out, 16), 4u);
  for (uint32_t i = 0; i < 4; i++) EXPECT_EQ(out[i].seq, i);
  ASSERT_TRUE(s.on_ack(5, 0, 16, kStart + 800us, &done));
  EXPECT_EQ(done, std::vector<uint64_t>{9});
  EXPECT_EQ(s.timeouts, 0u);
}

TEST(DpdkSender, TimeoutResendsTheOldestFrameFirst) {
  Sender s(no_probe());
  std::vector<uint8_t> src(500);
  s.queue(WriteReq{src.data(), 500, 1, 0, 0, 9});
  OutFrame out[16];
  ASSERT_EQ(s.due(kStart, out, 16), 5u);
  EXPECT_EQ(s.due(kStart + 999us, out, 16), 0u);
  size_t n = s.due(kStart + 1ms, out, 16);
  ASSERT_GE(n, 1u);
  EXPECT_EQ(out[0].seq, 0u);
  EXPECT_TRUE(out[0].resend);
  for (size_t i = 0; i < n; i++) EXPECT_LT(out[i].seq, 5u);
  // Everything arrives now: done, nothing left.
  std::vector<uint64_t> done;
  ASSERT_TRUE(s.on_ack(5, 0, 16, kStart + 2ms, &done));
  EXPECT_EQ(done, std::vector<uint64_t>{9});
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.due(kStart + 1s, out, 16), 0u);
}

TEST(DpdkSender, SelectiveAckResendsTheHoleOnceARoundTripOld) {
  Sender s(small_options());
  std::vector<uint8_t> src(500);
  std::vector<uint64_t> done;
  OutFrame out[16];
  s.queue(WriteReq{src.data(), 500, 1, 0, 0, 9});
  ASSERT_EQ(s.due(kStart, out, 16), 5u);  // 0..4; 1 is lost
  // 0's ack comes after 400 us (the round trip), then 2's, 3's, 4's show
  // the hole. Frames may be reordered: 1 is not resent before it is a
  // round trip old and a little more (1.25 of them).
  ASSERT_TRUE(s.on_ack(1, 0, 16, kStart + 400us, &done));
  ASSERT_TRUE(s.on_ack(1, 0b111, 16, kStart + 410us, &done));
  EXPECT_EQ(s.due(kStart + 410us, out, 16), 0u);
  ASSERT_TRUE(s.on_ack(1, 0b111, 16, kStart + 510us, &done));
  ASSERT_EQ(s.due(kStart + 510us, out, 16), 1u);
  EXPECT_EQ(out[0].seq, 1u);
  EXPECT_TRUE(out[0].resend);
  // The same hole in the next ack is not resent again at once.
  ASSERT_TRUE(s.on_ack(1, 0b111, 16, kStart + 520us, &done));
  EXPECT_EQ(s.due(kStart + 520us, out, 16), 0u);
  ASSERT_TRUE(s.on_ack(5, 0, 16, kStart + 800us, &done));
  EXPECT_EQ(done, std::vector<uint64_t>{9});
  EXPECT_EQ(s.frames_resent, 1u);
  EXPECT_EQ(s.timeouts, 0u);
}

TEST(DpdkSender, WaitingSinceIsTheLastProgress) {
  Sender s(small_options());
  EXPECT_EQ(s.waiting_since(), Clock::time_point{}) << "idle";
  std::vector<uint8_t> src(300);
  std::vector<uint64_t> done;
  OutFrame out[8];
  s.queue(WriteReq{src.data(), 300, 1, 0, 0, 1});
  EXPECT_EQ(s.waiting_since(), Clock::time_point{}) << "queued is not outstanding";
  ASSERT_EQ(s.due(kStart, out, 8), 3u);
  EXPECT_EQ(s.waiting_since(), kStart);
  ASSERT_TRUE(s.on_ack(0, 0, 16, kStart + 1ms, &done));
  EXPECT_EQ(s.waiting_since(), kStart) << "an ack of nothing new is not progress";
  ASSERT_TRUE(s.on_ack(2, 0, 16, kStart + 2ms, &done));
  EXPECT_EQ(s.waiting_since(), kStart + 2ms);
  ASSERT_TRUE(s.on_ack(3, 0, 16, kStart + 3ms, &done));
  EXPECT_EQ(s.waiting_since(), Clock::time_point{});
  EXPECT_TRUE(s.idle());
}

TEST(DpdkSender, AnAckOfWhatWasNeverSentIsRefused) {
  // Across the wrap: frames 2^32 - 2, 2^32 - 1, 0 are outstanding.
  Sender s(small_options(UINT32_MAX - 1));
  std::vector<uint8_t> src(300);
  std::vector<uint64_t> done;
  OutFrame out[8];
  s.queue(WriteReq{src.data(), 300, 1, 0, 0, 4});
  ASSERT_EQ(s.due(kStart, out, 8), 3u);
  EXPECT_EQ(out[2].seq, 0u);
  EXPECT_FALSE(s.on_ack(2, 0, 16, kStart, &done));
  EXPECT_FALSE(s.on_ack(1000, 0, 16, kStart, &done));
  EXPECT_EQ(s.bad_acks, 2u);
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(s.waiting_since(), kStart) << "a refused ack changes nothing";
  ASSERT_TRUE(s.on_ack(1, 0, 16, kStart + 1ms, &done));
  EXPECT_EQ(done, std::vector<uint64_t>{4});
  // Late (an older cum): harmless, not bad.
  EXPECT_TRUE(s.on_ack(UINT32_MAX, 0, 16, kStart + 2ms, &done));
  EXPECT_EQ(s.bad_acks, 2u);
  EXPECT_EQ(done.size(), 1u);
}

// FAIL (a bug in window.cc, reported to its owner; left failing on purpose):
// a selective ack bit for a frame never sent is taken. With a window of 64
// or less (the sender's ring is 64 slots) bit 63 names frame cum + 64,
// whose slot is cum's own: Sender::mark_lost's second loop marks the
// outstanding, missing frame `cum` as acknowledged, and it is never sent
// again, by the ack path or by the timeout: the link stalls for good.
// window.h says an ack that acknowledges a frame never sent is refused.
TEST(DpdkSender, ASelectiveAckOfAFrameNeverSentIsRefused) {
  Sender s(small_options());
  std::vector<uint8_t> src(1000);
  std::vector<uint64_t> done;
  OutFrame out[16];
  s.queue(WriteReq{src.data(), 1000, 1, 0, 0, 3});
  ASSERT_EQ(s.due(kStart, out, 16), 10u);  // frames 0..9; 0 is lost
  // 1..9 arrived (bits 0..8), and bit 63: frame 64, never sent.
  uint64_t sack = 0x1ffull | (1ull << 63);
  EXPECT_FALSE(s.on_ack(0, sack, 16, kStart + 100us, &done))
      << "an ack of frame 64, never sent, was taken";
  // Whatever it said about the bogus bit, frame 0 must still go again.
  bool resent0 = false;
  for (auto t = kStart + 1ms; t < kStart + 1s && !resent0; t += 1ms) {
    size_t n = s.due(t, out, 16);
    for (size_t i = 0; i < n; i++) resent0 |= out[i].seq == 0;
  }
  EXPECT_TRUE(resent0) << "frame 0 was never resent: the link is stalled";
}

// FAIL (a bug in window.cc, reported to its owner; left failing on purpose):
// Sender::advance takes a round-trip sample from every frame the
// cumulative ack passes that was not resent, also from frames the
// selective ack had shown arrived long before: their sample is the time
// the hole took to fill, not a round trip. srtt grows with every hole, the
// hole's resend waits 1.25 srtt (mark_lost), so the next hole takes longer
// still: over the lossy wire above (40 us round trip) srtt ends at about
// 130 us with 1% loss, 24 ms with 10%, 450 ms with 30%, and the selective
// ack no longer resends anything before the timeout does.
TEST(DpdkSender, ARoundTripIsNotMeasuredAcrossAHole) {
  Sender s(small_options());
  std::vector<uint8_t> src(1000);
  std::vector<uint64_t> done;
  OutFrame out[16];
  s.queue(WriteReq{src.data(), 1000, 1, 0, 0, 3});
  ASSERT_EQ(s.due(kStart, out, 16), 10u);  // frames 0..9; 0 is lost
  // 1..9 are acknowledged selectively 40 us after they were sent.
  ASSERT_TRUE(s.on_ack(0, 0x1ff, 16, kStart + 40us, &done));
  ASSERT_TRUE(s.on_ack(0, 0x1ff, 16, kStart + 130us, &done));
  ASSERT_EQ(s.due(kStart + 130us, out, 16), 1u);
  EXPECT_EQ(out[0].seq, 0u);
  // 0 came again 40 us later: everything is acknowledged.
  ASSERT_TRUE(s.on_ack(10, 0, 16, kStart + 170us, &done));
  EXPECT_EQ(done, std::vector<uint64_t>{3});
  EXPECT_LT(s.srtt(), 80us) << "the only round trips seen took 40 us";
}

TEST(DpdkSender, AbandonGivesBackEveryCookieInOrder) {
  Sender s(small_options());
  std::vector<uint8_t> src(1000);
  std::vector<uint64_t> done, left;
  OutFrame out[16];
  for (uint64_t c = 1; c <= 4; c++) s.queue(WriteReq{src.data(), 250, 1, 250 * (c - 1), 0, c});
  ASSERT_EQ(s.due(kStart, out, 16), 12u);
  ASSERT_TRUE(s.on_ack(3, 0, 16, kStart + 1ms, &done));  // the first write's 3 frames
  EXPECT_EQ(done, std::vector<uint64_t>{1});
  s.abandon(&left);
  EXPECT_EQ(left, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.waiting_since(), Clock::time_point{});
  EXPECT_EQ(s.due(kStart + 1s, out, 16), 0u);
}

// ---------------------------------------------------------------- receiver

TEST(DpdkReceiver, VerdictsAroundTheWindow) {
  Receiver r(16, 100);
  EXPECT_EQ(r.cum(), 100u);
  EXPECT_EQ(r.window(), 16u);
  EXPECT_EQ(r.classify(100), Receiver::Verdict::kNew);
  EXPECT_EQ(r.classify(115), Receiver::Verdict::kNew) << "the window's last";
  EXPECT_EQ(r.classify(116), Receiver::Verdict::kOutside) << "one past the window";
  EXPECT_EQ(r.classify(100 + 100000), Receiver::Verdict::kOutside);
  r.accept(102, nullptr);
  EXPECT_EQ(r.classify(102), Receiver::Verdict::kDuplicate) << "accepted out of order";
  EXPECT_EQ(r.cum(), 100u);
  r.accept(100, nullptr);
  r.accept(101, nullptr);
  EXPECT_EQ(r.cum(), 103u);
  for (uint32_t seq : {100u, 101u, 102u})
    EXPECT_EQ(r.classify(seq), Receiver::Verdict::kDuplicate) << "behind cum: " << seq;
  EXPECT_EQ(r.classify(103), Receiver::Verdict::kNew);
  EXPECT_EQ(r.classify(103 + 16), Receiver::Verdict::kOutside);
  // Far behind is not a late duplicate any more.
  EXPECT_EQ(r.classify(103 - 4 * 16), Receiver::Verdict::kDuplicate);
  EXPECT_EQ(r.classify(103 - 4 * 16 - 1), Receiver::Verdict::kOutside);
}

TEST(DpdkReceiver, SelectiveAckShowsWhatCameOutOfOrder) {
  Receiver r(200, 7);
  EXPECT_EQ(r.sack(), 0u);
  r.accept(8, nullptr);  // cum + 1: bit 0
  r.accept(10, nullptr);  // bit 2
  r.accept(7 + 64, nullptr);  // bit 63
  r.accept(7 + 65, nullptr);  // past what 64 bits show
  EXPECT_EQ(r.sack(), (1ull << 0) | (1ull << 2) | (1ull << 63));
  EXPECT_EQ(r.cum(), 7u);
  r.accept(7, nullptr);  // 7, 8 delivered: cum 9, 10 is now bit 0
  EXPECT_EQ(r.cum(), 9u);
  EXPECT_EQ(r.sack(), (1ull << 0) | (1ull << 61) | (1ull << 62));
  // A small window shows only what it can take.
  Receiver small(4, 0);
  small.accept(3, nullptr);
  EXPECT_EQ(small.sack(), 1ull << 2);
}

TEST(DpdkReceiver, WritesCompleteInOrderWhateverOrderFramesCome) {
  Receiver r(16, UINT32_MAX - 1);  // and across the wrap
  Landing a{1, 0, 200, 11}, b{2, 500, 1, 22}, c{1, 1000, 0, 33};
  // a is frames 2^32 - 2 and 2^32 - 1; b is 0; c is 1.
  std::vector<Landing> out;
  r.accept(1, &c);
  r.accept(0, &b);
  r.accept(UINT32_MAX, &a);
  r.take(&out);
  EXPECT_TRUE(out.empty()) << "a's first frame has not come";
  EXPECT_EQ(r.sack(), 0b111u);
  r.accept(UINT32_MAX - 1, nullptr);
  r.take(&out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].imm, 11u);
  EXPECT_EQ(out[0].len, 200u);
  EXPECT_EQ(out[1].imm, 22u);
  EXPECT_EQ(out[1].offset, 500u);
  EXPECT_EQ(out[2].imm, 33u);
  EXPECT_EQ(out[2].region, 1u);
  EXPECT_EQ(r.cum(), 2u);
  EXPECT_EQ(r.sack(), 0u);
  out.clear();
  r.take(&out);
  EXPECT_TRUE(out.empty()) << "taken once";
  EXPECT_EQ(r.classify(UINT32_MAX), Receiver::Verdict::kDuplicate);
}

}  // namespace
}  // namespace gsync::transport::dpdk

namespace gsync::transport::dpdk {
namespace {

// Holes 64 frames and more past the cumulative ack are seen in one ack (the
// bitmap's further words), and go together.
TEST(DpdkSackWords, HolesPastTheFirstWordAreResentTogether) {
  SenderOptions o;
  o.window = 512;
  o.payload = 100;
  Sender s(o);
  Receiver r(512);
  std::vector<uint8_t> src(200 * 100);
  s.queue(WriteReq{src.data(), src.size(), 1, 0, 0, 7});
  std::vector<OutFrame> out(256);
  auto t0 = Clock::time_point{} + std::chrono::seconds(1);
  ASSERT_EQ(s.due(t0, out.data(), 256), 200u);
  for (uint32_t seq = 0; seq < 200; seq++)
    if (seq != 10 && seq != 150) r.accept(seq, nullptr);  // two lost
  uint64_t words[kSackWords] = {};
  size_t n = r.sack(words);
  ASSERT_EQ(n, 3u) << "frames up to 199 = cum 10 + 1 + 188: three words";
  EXPECT_EQ(r.cum(), 10u);
  EXPECT_EQ(words[0], ~uint64_t(0));
  EXPECT_EQ(words[2] >> (150 - 11 - 128) & 1, 0u) << "frame 150 is missing";
  std::vector<uint64_t> done;
  ASSERT_TRUE(s.on_ack(r.cum(), words, n, 512, t0 + std::chrono::milliseconds(1), &done));
  // A round trip of 1 ms measured: the holes go once 1.25 of it old.
  size_t k = s.due(t0 + std::chrono::microseconds(2500), out.data(), 256);
  ASSERT_EQ(k, 2u);
  EXPECT_EQ(out[0].seq, 10u);
  EXPECT_EQ(out[1].seq, 150u);
  r.accept(10, nullptr);
  r.accept(150, nullptr);
  EXPECT_EQ(r.sack(words), 0u);
  EXPECT_EQ(r.cum(), 200u);
  // A bitmap word claiming a frame never sent is refused: 10 + 1 + 192 + 63
  // = 266, and only 0..199 went.
  uint64_t bogus[4] = {0, 0, 0, uint64_t(1) << 63};
  EXPECT_FALSE(s.on_ack(10, bogus, 4, 512, t0 + std::chrono::milliseconds(3), &done));
  EXPECT_EQ(s.bad_acks, 1u);
}

}  // namespace
}  // namespace gsync::transport::dpdk
