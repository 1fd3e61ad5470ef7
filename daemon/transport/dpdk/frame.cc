// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/dpdk/frame.h"

#include <cstring>
#include <iterator>

#include <xxhash.h>

#include "daemon/transport/peering/frame.h"

namespace gsync::transport::dpdk {

const char* drop_name(Drop d) {
  switch (d) {
    case Drop::kNone: return "none";
    case Drop::kForeign: return "not gsync's (ethertype)";
    case Drop::kTruncated: return "truncated";
    case Drop::kOversized: return "oversized";
    case Drop::kMalformed: return "malformed";
    case Drop::kCluster: return "another cluster's";
    case Drop::kLink: return "no such link (stale or junk)";
    case Drop::kWindow: return "outside the receive window";
    case Drop::kRegion: return "outside its region";
    case Drop::kInjected: return "dropped by the test hook";
    case Drop::kCount: break;
  }
  return "?";
}

const char* drop_key(Drop d) {
  static constexpr const char* kKeys[] = {"none",      "foreign", "truncated", "oversized",
                                          "malformed", "cluster", "link",      "window",
                                          "region",    "injected"};
  static_assert(std::size(kKeys) == size_t(Drop::kCount));
  return d < Drop::kCount ? kKeys[size_t(d)] : "?";
}

namespace {

bool data_fields_ok(const FrameHeader& h) {
  if ((h.flags & ~kFlagLast) != 0) return false;
  if (h.offset > UINT64_MAX - h.length) return false;
  if (!(h.flags & kFlagLast)) return h.length > 0 && h.write_len == 0 && h.imm == 0;
  // The last piece lies inside its write: the write starts at
  // offset + length - write_len, which must not be below 0.
  return h.write_len >= h.length && h.offset + h.length >= h.write_len;
}

bool ack_fields_ok(const FrameHeader& h) {
  return h.flags == 0 && h.region == 0 && h.offset <= kMaxAckWords && h.write_len == 0 &&
         h.imm == 0;
}

}  // namespace

Drop parse(const uint8_t* frame, size_t len, uint32_t cluster, Parsed* out) {
  if (len < kEtherHeaderBytes) return Drop::kTruncated;
  uint16_t type_be;
  std::memcpy(&type_be, frame + 12, 2);
  if (type_be != __builtin_bswap16(kEtherType)) return Drop::kForeign;
  if (len < kFrameOverhead) return Drop::kTruncated;
  FrameHeader& h = out->h;
  std::memcpy(&h, frame + kEtherHeaderBytes, sizeof h);
  if (h.magic != kFrameMagic || h.version != kFrameVersion || h.reserved != 0)
    return Drop::kMalformed;
  size_t payload = 0;
  if (h.type == static_cast<uint8_t>(FrameType::kData)) {
    if (!data_fields_ok(h)) return Drop::kMalformed;
    payload = h.length;
  } else if (h.type == static_cast<uint8_t>(FrameType::kAck)) {
    if (!ack_fields_ok(h)) return Drop::kMalformed;
    payload = size_t(h.offset) * 8;
  } else {
    return Drop::kMalformed;
  }
  if (len - kFrameOverhead < payload) return Drop::kTruncated;
  if (len - kFrameOverhead > payload) return Drop::kOversized;
  if (h.cluster != cluster) return Drop::kCluster;
  std::memcpy(out->src_mac, frame + 6, 6);
  out->payload = frame + kFrameOverhead;
  return Drop::kNone;
}

void put_headers(uint8_t* out, const uint8_t dst[6], const uint8_t src[6], const FrameHeader& h) {
  std::memcpy(out, dst, 6);
  std::memcpy(out + 6, src, 6);
  uint16_t type_be = __builtin_bswap16(kEtherType);
  std::memcpy(out + 12, &type_be, 2);
  std::memcpy(out + kEtherHeaderBytes, &h, sizeof h);
}

uint32_t cluster_tag(std::string_view cluster_name) {
  return static_cast<uint32_t>(XXH64(cluster_name.data(), cluster_name.size(), 0x67737964));
}

// ---------------------------------------------------------------- bootstrap

std::string encode(const Hello& m) {
  return peering::Writer(static_cast<uint8_t>(Tag::kHello))
      .bytes(m.mac, 6)
      .put(m.link)
      .put(m.payload)
      .put(m.window)
      .take();
}

std::string encode(const Ready& m) {
  return peering::Writer(static_cast<uint8_t>(Tag::kReady)).put(m.from_link).put(m.to_link).take();
}

bool decode(std::string_view in, Hello* m) {
  if (in.empty() || static_cast<Tag>(in[0]) != Tag::kHello) return false;
  peering::Reader r(in);
  return r.bytes(m->mac, 6) && r.get(&m->link) && r.get(&m->payload) && r.get(&m->window) &&
         r.done() && m->link != 0 && m->payload > 0 && m->window > 0;
}

bool decode(std::string_view in, Ready* m) {
  if (in.empty() || static_cast<Tag>(in[0]) != Tag::kReady) return false;
  peering::Reader r(in);
  return r.get(&m->from_link) && r.get(&m->to_link) && r.done();
}

}  // namespace gsync::transport::dpdk
