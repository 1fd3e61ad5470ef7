// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl doctor's messages between daemons (daemon/cluster/
// probe_messages.h): what is encoded decodes; a probe whose length, kind or
// place in its burst does not add up is refused; the answerer replies to a
// ping and to a burst's last chunk only; the midpoint clock estimate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "daemon/cluster/probe_messages.h"

namespace gsync::cluster {
namespace {

Probe data_probe(uint64_t offset, uint64_t total) {
  Probe p;
  p.kind = kProbeData;
  p.seq = 3;
  p.id = 9;
  p.sent_ns = 1000;
  p.offset = offset;
  p.total = total;
  return p;
}

bool decodes(const std::string& msg, std::string* why = nullptr) {
  Probe p;
  size_t payload = 0;
  std::string w;
  bool ok = decode_probe(msg, &p, &payload, &w);
  if (why) *why = w;
  return ok;
}

TEST(ProbeMessages, APingDecodesAndIsAnsweredAtOnce) {
  Probe p;
  p.seq = 5;
  p.id = 42;
  p.sent_ns = 1700000000123456789;
  std::string msg = encode_probe(p, 0);
  ASSERT_EQ(msg.size(), sizeof(Probe));
  Probe got;
  size_t payload = 7;
  std::string why;
  ASSERT_TRUE(decode_probe(msg, &got, &payload, &why)) << why;
  EXPECT_EQ(payload, 0u);
  EXPECT_EQ(got.id, 42u);
  auto r = answer_probe(got, payload, 2000, 2100);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->type, kProbeReply);
  EXPECT_EQ(r->kind, kProbePing);
  EXPECT_EQ(r->seq, 5u);
  EXPECT_EQ(r->sent_ns, p.sent_ns);
  EXPECT_EQ(r->received_ns, 2000);
  EXPECT_EQ(r->replied_ns, 2100);
  ProbeReply back;
  EXPECT_TRUE(decode_probe_reply(as_bytes(*r), &back, &why)) << why;
}

TEST(ProbeMessages, OnlyABurstsLastChunkIsAnswered) {
  const uint64_t total = 3 * kProbeChunkBytes - 100;
  std::string why;
  for (uint64_t off = 0; off < total; off += kProbeChunkBytes) {
    size_t len = std::min<uint64_t>(kProbeChunkBytes, total - off);
    std::string msg = encode_probe(data_probe(off, total), len);
    Probe p;
    size_t payload = 0;
    ASSERT_TRUE(decode_probe(msg, &p, &payload, &why)) << why;
    EXPECT_EQ(payload, len);
    auto r = answer_probe(p, payload, 1, 2);
    EXPECT_EQ(r.has_value(), off + len == total) << "chunk at " << off;
    if (r) {
      EXPECT_EQ(r->bytes, total);
      ProbeReply back;
      EXPECT_TRUE(decode_probe_reply(as_bytes(*r), &back, &why)) << why;
    }
  }
}

TEST(ProbeMessages, MalformedProbesAreRefusedWithAReason) {
  std::string why;
  Probe ping;
  EXPECT_FALSE(decodes(encode_probe(ping, 0).substr(0, sizeof(Probe) - 1), &why));
  EXPECT_EQ(why, "shorter than its header");
  EXPECT_FALSE(decodes(encode_probe(ping, 8), &why));
  EXPECT_EQ(why, "a ping with a payload or a burst");
  Probe odd = ping;
  odd.kind = 7;
  EXPECT_FALSE(decodes(encode_probe(odd, 0), &why));
  EXPECT_EQ(why, "of unknown kind 7");
  // Data: empty, past its burst, a burst over the limit, a chunk too big.
  EXPECT_FALSE(decodes(encode_probe(data_probe(0, 64), 0)));
  EXPECT_FALSE(decodes(encode_probe(data_probe(96, 128), 64), &why));
  EXPECT_NE(why.find("does not fit a burst of 128"), std::string::npos) << why;
  EXPECT_FALSE(decodes(encode_probe(data_probe(200, 128), 1)));
  EXPECT_FALSE(decodes(encode_probe(data_probe(0, kMaxProbeBytes + 1), 64)));
  EXPECT_FALSE(decodes(encode_probe(data_probe(0, 4 * kProbeChunkBytes), kProbeChunkBytes + 1)));
  // An offset near 2^64 must not wrap past the check.
  EXPECT_FALSE(decodes(encode_probe(data_probe(std::numeric_limits<uint64_t>::max() - 10, 128),
                                    64)));
  EXPECT_TRUE(decodes(encode_probe(data_probe(64, 128), 64)));
}

TEST(ProbeMessages, RepliesAreCheckedForLengthKindAndBytes) {
  std::string why;
  ProbeReply ping, r;
  EXPECT_TRUE(decode_probe_reply(as_bytes(ping), &r, &why)) << why;
  std::string longer(as_bytes(ping));
  longer += 'x';
  EXPECT_FALSE(decode_probe_reply(longer, &r, &why));
  ProbeReply ping_with_bytes;
  ping_with_bytes.bytes = 5;
  EXPECT_FALSE(decode_probe_reply(as_bytes(ping_with_bytes), &r, &why));
  ProbeReply data;
  data.kind = kProbeData;
  EXPECT_FALSE(decode_probe_reply(as_bytes(data), &r, &why));  // data of 0 bytes
  data.bytes = kMaxProbeBytes + 1;
  EXPECT_FALSE(decode_probe_reply(as_bytes(data), &r, &why));
  data.bytes = 4 << 20;
  EXPECT_TRUE(decode_probe_reply(as_bytes(data), &r, &why)) << why;
  data.kind = 2;
  EXPECT_FALSE(decode_probe_reply(as_bytes(data), &r, &why));
}

TEST(ProbeMessages, HostInfoIsOneExactSize) {
  HostInfo m;
  m.pid = 4242;
  set_field(m.version, sizeof m.version, "0.1.0");
  set_field(m.build_id, sizeof m.build_id, std::string(200, 'a'));  // cut, NUL kept
  HostInfo got;
  ASSERT_TRUE(decode_exact(as_bytes(m), &got));
  EXPECT_EQ(got.pid, 4242u);
  EXPECT_EQ(field(got.version, sizeof got.version), "0.1.0");
  EXPECT_EQ(field(got.build_id, sizeof got.build_id), std::string(sizeof m.build_id - 1, 'a'));
  EXPECT_FALSE(decode_exact(std::string(as_bytes(m)) + "x", &got));
}

// The peer's clock 5 ms ahead; the way there takes 30 us, back 50 us, the
// peer spends 10 us: the estimate is off by half the difference of the
// two ways (10 us), and the round trip is 80 us.
TEST(ProbeMessages, MidpointEstimatesTheOffsetWithinHalfTheAsymmetry) {
  const int64_t ahead = 5'000'000, t1 = 1'700'000'000'000'000'000;
  const int64_t t2 = t1 + 30'000 + ahead, t3 = t2 + 10'000, t4 = t3 - ahead + 50'000;
  ClockSample s = midpoint(t1, t2, t3, t4);
  EXPECT_DOUBLE_EQ(s.rtt_ns, 80'000);
  EXPECT_DOUBLE_EQ(s.offset_ns, ahead - 10'000);
  // Symmetric ways: exact.
  ClockSample e = midpoint(t1, t1 + 40'000 + ahead, t1 + 50'000 + ahead, t1 + 90'000);
  EXPECT_DOUBLE_EQ(e.offset_ns, ahead);
  // Timestamps a peer made up wrap rather than overflow.
  ClockSample w = midpoint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                           0, 0);
  EXPECT_TRUE(std::isfinite(w.offset_ns));
}

}  // namespace
}  // namespace gsync::cluster
