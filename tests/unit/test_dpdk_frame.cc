// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider's two message formats (daemon/transport/dpdk/frame.h):
// a frame put_headers() wrote parses back to its fields; every reason
// parse() can give from the bytes alone (ethertype, sizes, magic, version,
// type, flags, reserved, the fields of a last piece, the cluster's tag) is
// reached by one small edit of a good frame, and reported as that reason;
// HELLO and READY on the bootstrap link round-trip and refuse bytes short
// or long. The reasons that need a link's state (kLink, kWindow, kRegion)
// are the provider's, not parse()'s.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "daemon/transport/dpdk/frame.h"

namespace gsync::transport::dpdk {
namespace {

const uint8_t kDst[6] = {0x02, 0, 0, 0, 0, 0x02};
const uint8_t kSrc[6] = {0x02, 0, 0, 0, 0, 0x01};

uint32_t tag() { return cluster_tag("prod-a"); }

FrameHeader data_header(uint32_t length, bool last) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(FrameType::kData);
  h.flags = last ? kFlagLast : 0;
  h.cluster = tag();
  h.link = 7;
  h.seq = 0xfffffff0u;
  h.length = length;
  h.region = 3;
  h.offset = 4096 + 1400;
  if (last) {
    h.write_len = 1400 + length;  // the write began one piece earlier, at 4096
    h.imm = 0x1122334455667788ull;
  }
  return h;
}

FrameHeader ack_header() {
  FrameHeader h;
  h.type = static_cast<uint8_t>(FrameType::kAck);
  h.cluster = tag();
  h.link = 9;
  h.seq = 12345;
  h.length = 512;
  h.sack = 0x8000000000000005ull;
  return h;
}

// A whole frame: Ethernet header, FrameHeader, `payload` bytes 0, 1, 2...
std::vector<uint8_t> frame_of(const FrameHeader& h, size_t payload) {
  std::vector<uint8_t> f(kFrameOverhead + payload);
  put_headers(f.data(), kDst, kSrc, h);
  for (size_t i = 0; i < payload; i++) f[kFrameOverhead + i] = static_cast<uint8_t>(i);
  return f;
}

Drop parse_of(const std::vector<uint8_t>& f, uint32_t cluster = tag()) {
  Parsed p;
  return parse(f.data(), f.size(), cluster, &p);
}

// h with one field changed by `edit`, as a frame with h's payload.
template <typename Edit>
Drop parse_edited(FrameHeader h, Edit edit) {
  edit(h);
  return parse_of(frame_of(h, h.type == uint8_t(FrameType::kData) ? h.length : 0));
}

TEST(DpdkFrame, HeaderIsTheWireLayout) {
  EXPECT_EQ(kFrameOverhead, 14u + 64u);
  FrameHeader h = ack_header();
  auto f = frame_of(h, 0);
  EXPECT_EQ(0, std::memcmp(f.data(), kDst, 6));
  EXPECT_EQ(0, std::memcmp(f.data() + 6, kSrc, 6));
  EXPECT_EQ(f[12], 0x88);  // the ethertype, big-endian as Ethernet has it
  EXPECT_EQ(f[13], 0xb5);
  EXPECT_EQ(0, std::memcmp(f.data() + 14, "GSDP", 4));  // the magic reads as ASCII
}

TEST(DpdkFrame, DataRoundTrips) {
  for (bool last : {false, true}) {
    FrameHeader h = data_header(1400, last);
    auto f = frame_of(h, h.length);
    Parsed p;
    ASSERT_EQ(parse(f.data(), f.size(), tag(), &p), Drop::kNone) << "last " << last;
    EXPECT_EQ(0, std::memcmp(p.src_mac, kSrc, 6));
    EXPECT_EQ(0, std::memcmp(&p.h, &h, sizeof h));
    EXPECT_EQ(p.payload, f.data() + kFrameOverhead);
    EXPECT_EQ(p.payload[1399], static_cast<uint8_t>(1399));
  }
}

TEST(DpdkFrame, AckRoundTrips) {
  FrameHeader h = ack_header();
  auto f = frame_of(h, 0);
  Parsed p;
  ASSERT_EQ(parse(f.data(), f.size(), tag(), &p), Drop::kNone);
  EXPECT_EQ(p.h.seq, 12345u);
  EXPECT_EQ(p.h.length, 512u);
  EXPECT_EQ(p.h.sack, 0x8000000000000005ull);
  EXPECT_EQ(p.h.link, 9u);
  EXPECT_EQ(0, std::memcmp(p.src_mac, kSrc, 6));
}

TEST(DpdkFrame, ZeroByteWriteIsOneLastPieceOfNoPayload) {
  FrameHeader h = data_header(0, true);
  h.write_len = 0;
  EXPECT_EQ(parse_of(frame_of(h, 0)), Drop::kNone);
  // A piece that is not the last carries bytes: an empty one is junk.
  EXPECT_EQ(parse_of(frame_of(data_header(0, false), 0)), Drop::kMalformed);
}

TEST(DpdkFrame, ForeignEthertype) {
  auto f = frame_of(ack_header(), 0);
  f[12] = 0x08;  // IPv4
  f[13] = 0x00;
  EXPECT_EQ(parse_of(f), Drop::kForeign);
  // Our ethertype byte-swapped is someone else's too.
  f[12] = 0xb5;
  f[13] = 0x88;
  EXPECT_EQ(parse_of(f), Drop::kForeign);
  // Only the Ethernet header is needed to tell.
  f.resize(kEtherHeaderBytes);
  EXPECT_EQ(parse_of(f), Drop::kForeign);
}

TEST(DpdkFrame, Truncated) {
  auto ack = frame_of(ack_header(), 0);
  for (size_t len : {size_t(0), size_t(13), kEtherHeaderBytes, kFrameOverhead - 1}) {
    std::vector<uint8_t> cut(ack.begin(), ack.begin() + len);
    EXPECT_EQ(parse_of(cut), Drop::kTruncated) << len << " bytes";
  }
  // A DATA frame shorter than the payload its header claims.
  auto data = frame_of(data_header(100, true), 100);
  data.pop_back();
  EXPECT_EQ(parse_of(data), Drop::kTruncated);
  data.resize(kFrameOverhead);
  EXPECT_EQ(parse_of(data), Drop::kTruncated);
}

TEST(DpdkFrame, Oversized) {
  auto ack = frame_of(ack_header(), 0);
  ack.push_back(0);
  EXPECT_EQ(parse_of(ack), Drop::kOversized);
  auto data = frame_of(data_header(100, false), 101);
  EXPECT_EQ(parse_of(data), Drop::kOversized);
}

TEST(DpdkFrame, MalformedHeaders) {
  const FrameHeader data = data_header(100, true);
  const FrameHeader ack = ack_header();
  EXPECT_EQ(parse_edited(data, [](FrameHeader& h) { h.magic ^= 1; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.version = 2; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.version = 0; }), Drop::kMalformed);
  for (uint8_t type : {0, 3, 255})
    EXPECT_EQ(parse_edited(ack, [&](FrameHeader& h) { h.type = type; }), Drop::kMalformed)
        << "type " << int(type);
  EXPECT_EQ(parse_edited(data, [](FrameHeader& h) { h.flags |= 2; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(data, [](FrameHeader& h) { h.reserved = 1; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.reserved = 0x80000000u; }), Drop::kMalformed);
}

TEST(DpdkFrame, AckCarriesNoDataFields) {
  const FrameHeader ack = ack_header();
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.flags = kFlagLast; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.region = 1; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.offset = kMaxAckWords + 1; }),
            Drop::kMalformed);
  // Bitmap words it says follow but does not carry.
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.offset = 1; }), Drop::kTruncated);
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.write_len = 1; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(ack, [](FrameHeader& h) { h.imm = 1; }), Drop::kMalformed);
}

TEST(DpdkFrame, InconsistentPieces) {
  const FrameHeader middle = data_header(100, false);
  const FrameHeader last = data_header(100, true);
  // A middle piece says nothing about its write.
  EXPECT_EQ(parse_edited(middle, [](FrameHeader& h) { h.write_len = 200; }), Drop::kMalformed);
  EXPECT_EQ(parse_edited(middle, [](FrameHeader& h) { h.imm = 1; }), Drop::kMalformed);
  // A last piece lies inside its write ...
  EXPECT_EQ(parse_edited(last, [](FrameHeader& h) { h.write_len = 99; }), Drop::kMalformed);
  // ... and its write does not start below offset 0.
  EXPECT_EQ(parse_edited(last, [](FrameHeader& h) {
              h.offset = 10;
              h.write_len = 111;
            }),
            Drop::kMalformed);
  EXPECT_EQ(parse_edited(last, [](FrameHeader& h) {
              h.offset = 10;
              h.write_len = 110;  // the write is [0, 110): fine
            }),
            Drop::kNone);
  // The payload's end does not wrap around 2^64 (it may be 2^64 - 1).
  EXPECT_EQ(parse_edited(middle, [](FrameHeader& h) { h.offset = UINT64_MAX - 100; }),
            Drop::kNone);
  EXPECT_EQ(parse_edited(middle, [](FrameHeader& h) { h.offset = UINT64_MAX - 99; }),
            Drop::kMalformed);
}

TEST(DpdkFrame, AnotherClustersTag) {
  EXPECT_NE(cluster_tag("prod-a"), cluster_tag("prod-b"));
  EXPECT_EQ(cluster_tag("prod-a"), cluster_tag(std::string("prod-") + "a"));
  auto f = frame_of(data_header(64, true), 64);
  EXPECT_EQ(parse_of(f, cluster_tag("prod-b")), Drop::kCluster);
  EXPECT_EQ(parse_of(frame_of(ack_header(), 0), cluster_tag("prod-b")), Drop::kCluster);
  EXPECT_EQ(parse_of(f, cluster_tag("prod-a")), Drop::kNone);
}

TEST(DpdkFrame, EveryDropHasAName) {
  for (int d = 0; d < int(Drop::kCount); d++)
    EXPECT_STRNE(drop_name(Drop(d)), "?") << d;
}

// ---------------------------------------------------------------- bootstrap

TEST(DpdkBootstrap, HelloRoundTrips) {
  Hello h{{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}, 0xdeadbeef, 1400, 512};
  std::string bytes = encode(h);
  EXPECT_EQ(bytes.size(), 1u + 6 + 4 + 4 + 4);
  EXPECT_EQ(bytes[0], 'H');
  Hello back;
  ASSERT_TRUE(decode(bytes, &back));
  EXPECT_EQ(0, std::memcmp(back.mac, h.mac, 6));
  EXPECT_EQ(back.link, h.link);
  EXPECT_EQ(back.payload, h.payload);
  EXPECT_EQ(back.window, h.window);
  Ready r;
  EXPECT_FALSE(decode(bytes, &r)) << "a HELLO is not a READY";
}

TEST(DpdkBootstrap, ReadyRoundTrips) {
  Ready m{7, 0xfffffffe};
  std::string bytes = encode(m);
  EXPECT_EQ(bytes.size(), 9u);
  EXPECT_EQ(bytes[0], 'R');
  Ready back;
  ASSERT_TRUE(decode(bytes, &back));
  EXPECT_EQ(back.from_link, 7u);
  EXPECT_EQ(back.to_link, 0xfffffffeu);
  Hello h;
  EXPECT_FALSE(decode(bytes, &h)) << "a READY is not a HELLO";
}

TEST(DpdkBootstrap, ShortOrLongIsRefused) {
  std::string hello = encode(Hello{{2, 0, 0, 0, 0, 1}, 5, 1400, 64});
  std::string ready = encode(Ready{1, 2});
  Hello h;
  Ready r;
  for (size_t n = 0; n < hello.size(); n++)
    EXPECT_FALSE(decode(std::string_view(hello).substr(0, n), &h)) << n << " bytes of a HELLO";
  for (size_t n = 0; n < ready.size(); n++)
    EXPECT_FALSE(decode(std::string_view(ready).substr(0, n), &r)) << n << " bytes of a READY";
  EXPECT_FALSE(decode(hello + '\0', &h));
  EXPECT_FALSE(decode(ready + '\0', &r));
}

TEST(DpdkBootstrap, HelloOfNothingIsRefused) {
  Hello h;
  EXPECT_FALSE(decode(encode(Hello{{2, 0, 0, 0, 0, 1}, 0, 1400, 64}), &h)) << "link 0";
  EXPECT_FALSE(decode(encode(Hello{{2, 0, 0, 0, 0, 1}, 5, 0, 64}), &h)) << "payload 0";
  EXPECT_FALSE(decode(encode(Hello{{2, 0, 0, 0, 0, 1}, 5, 1400, 0}), &h)) << "window 0";
}

}  // namespace
}  // namespace gsync::transport::dpdk
