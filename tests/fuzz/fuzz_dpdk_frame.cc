// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider's wire formats (daemon/transport/dpdk/frame.h): parse()
// on a frame from the port, and the HELLO and READY decoders of the
// bootstrap link. Input: the cluster tag parse() checks against (4 bytes),
// then the frame; the same bytes go to both decoders.
// Properties: a frame that parses is exactly as long as its header says,
// is a DATA or an ACK of this cluster, its payload lies inside the frame,
// a last piece lies inside its write and no piece's end wraps around, an
// ACK has no data fields and carries at most kMaxAckWords further words of
// its selective bitmap (counted in `offset`), and put_headers() writes back exactly its bytes
// (the format has one spelling); a frame refused says one of the reasons
// parse() can give without a link's state. A HELLO or READY that decodes
// re-encodes to exactly its bytes.
#include <cstring>
#include <string>
#include <vector>

#include "daemon/transport/dpdk/frame.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace gsync::transport::dpdk;

void check_parsed(const uint8_t* frame, size_t len, uint32_t cluster, const Parsed& p) {
  const FrameHeader& h = p.h;
  bool data = h.type == static_cast<uint8_t>(FrameType::kData);
  FUZZ_CHECK(data || h.type == static_cast<uint8_t>(FrameType::kAck));
  FUZZ_CHECK(h.cluster == cluster && h.magic == kFrameMagic && h.version == kFrameVersion);
  FUZZ_CHECK(h.reserved == 0);
  // DATA carries its payload; an ACK the further words of its bitmap.
  FUZZ_CHECK(len == kFrameOverhead + (data ? h.length : h.offset * 8));
  FUZZ_CHECK(p.payload == frame + kFrameOverhead);
  if (data) {
    FUZZ_CHECK((h.flags & ~kFlagLast) == 0);
    FUZZ_CHECK(h.offset + h.length >= h.offset);  // no wrap around 2^64
    if (h.flags & kFlagLast) {
      FUZZ_CHECK(h.write_len >= h.length && h.offset + h.length >= h.write_len);
    } else {
      FUZZ_CHECK(h.length > 0 && h.write_len == 0 && h.imm == 0);
    }
    // The payload is readable to its end (ASan says so if not).
    uint8_t sum = 0;
    for (uint32_t i = 0; i < h.length; i++) sum ^= p.payload[i];
    (void)sum;
  } else {
    FUZZ_CHECK(h.flags == 0 && h.region == 0 && h.write_len == 0 && h.imm == 0);
    FUZZ_CHECK(h.offset <= kMaxAckWords);
  }
  std::vector<uint8_t> again(kFrameOverhead);
  put_headers(again.data(), frame, p.src_mac, h);
  FUZZ_CHECK(std::memcmp(again.data(), frame, kFrameOverhead) == 0);
}

void check_parse(std::string_view bytes, uint32_t cluster) {
  // A copy of exactly the frame's size: a read past it is ASan's to see.
  std::vector<uint8_t> frame(bytes.begin(), bytes.end());
  Parsed p;
  Drop d = parse(frame.data(), frame.size(), cluster, &p);
  FUZZ_CHECK(std::string(drop_name(d)) != "?");
  if (d == Drop::kNone) return check_parsed(frame.data(), frame.size(), cluster, p);
  FUZZ_CHECK(d == Drop::kForeign || d == Drop::kTruncated || d == Drop::kOversized ||
             d == Drop::kMalformed || d == Drop::kCluster);
  // Too short for an Ethernet header is truncated, not someone else's.
  if (d == Drop::kForeign) FUZZ_CHECK(frame.size() >= kEtherHeaderBytes);
}

void check_bootstrap(std::string_view bytes) {
  Hello h;
  if (decode(bytes, &h)) {
    FUZZ_CHECK(encode(h) == bytes);
    FUZZ_CHECK(h.link != 0 && h.payload > 0 && h.window > 0);
  }
  Ready r;
  if (decode(bytes, &r)) FUZZ_CHECK(encode(r) == bytes);
}

}  // namespace

GSYNC_FUZZ_TARGET(dpdk_frame) {
  gsync::fuzz::Input in(data, size);
  auto cluster = in.take<uint32_t>();
  std::string_view frame = in.rest();
  check_parse(frame, cluster);
  check_bootstrap(frame);
  return 0;
}
