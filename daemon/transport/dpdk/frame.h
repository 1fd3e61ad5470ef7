// SPDX-License-Identifier: Apache-2.0
//
// The DPDK provider's two message formats. On the Ethernet port: every
// frame is an Ethernet header (ethertype kEtherType), a fixed 64-byte
// header, and for DATA its payload; the header alone says where the payload
// lands (region, offset), so the receiver checks it and copies it straight
// from the receive buffer into the region. On the bootstrap TCP link (in
// order with the peering context's messages): HELLO, which says this
// side's MAC and link id, and READY. docs/transport.md, "The DPDK provider".
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gsync::transport::dpdk {

static_assert(std::endian::native == std::endian::little, "the frame format is little-endian");

// IEEE 802 "local experimental ethertype 1": never routed, never anyone
// else's on a real network.
constexpr uint16_t kEtherType = 0x88b5;
constexpr size_t kEtherHeaderBytes = 14;
constexpr uint32_t kFrameMagic = 0x50445347;  // "GSDP" on the wire
constexpr uint8_t kFrameVersion = 1;

enum class FrameType : uint8_t {
  kData = 1,  // a piece of a write: payload lands at (region, offset)
  kAck = 2,   // cumulative ack, selective ack bitmap, receive window
};
constexpr uint16_t kFlagLast = 1;  // DATA: the last piece of its write

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint8_t version = kFrameVersion;
  uint8_t type = 0;
  uint16_t flags = 0;
  uint32_t cluster = 0;  // the cluster's tag (cluster_tag): frames of another cluster are dropped
  uint32_t link = 0;     // the receiver's link id for this peer: its current incarnation
  uint32_t seq = 0;      // DATA: this frame's number; ACK: the next one expected (cumulative)
  uint32_t length = 0;   // DATA: payload bytes; ACK: frames the receiver takes past `seq`
  uint64_t sack = 0;     // ACK: bit i set = frame seq+1+i has arrived (more words follow: offset)
  uint32_t region = 0;   // DATA: the receiver's region id
  uint32_t reserved = 0; // must be 0
  uint64_t offset = 0;   // DATA: where this payload lands in the region; ACK: the bitmap's
                         // further words after the header (0 to kMaxAckWords), 8 bytes each
  uint64_t write_len = 0;  // DATA, last piece: bytes of the whole write
  uint64_t imm = 0;        // DATA, last piece: the immediate handed to on_write
};
static_assert(sizeof(FrameHeader) == 64 && offsetof(FrameHeader, imm) == 56,
              "FrameHeader is the wire layout; do not let it change by accident");
constexpr size_t kFrameOverhead = kEtherHeaderBytes + sizeof(FrameHeader);
// An ACK's selective bitmap beyond the header's word (window.h, kSackWords).
constexpr uint64_t kMaxAckWords = 7;

// Why a frame from the port was not taken; each reason has its counter
// (gsyncctl peers, the provider's log).
enum class Drop : uint8_t {
  kNone = 0,
  kForeign,    // not our ethertype: other traffic on the port
  kTruncated,  // shorter than its headers, or than the payload it claims
  kOversized,  // longer than the frame it claims to be (trailing bytes beyond padding)
  kMalformed,  // bad magic, version, type, flags or fields
  kCluster,    // another cluster's tag
  kLink,       // no current link has that id (a stale incarnation, or junk)
  kWindow,     // a sequence number outside the receive window
  kRegion,     // DATA outside the bounds of its region
  kInjected,   // the test hook dropped it (drop_ppm)
  kCount
};
const char* drop_name(Drop d);
// A short key for each ("foreign", "truncated", ...): gsyncctl peers --json.
const char* drop_key(Drop d);

// A decoded frame from the port. payload points into the frame.
struct Parsed {
  uint8_t src_mac[6] = {};
  FrameHeader h;
  const uint8_t* payload = nullptr;
};

// Checks everything that can be checked without the link's state: the
// ethertype, sizes (a frame is exactly its headers and payload: every one is
// above Ethernet's 60-byte minimum, so none is padded), magic, version,
// type, flags and field
// consistency (a last piece lies inside its write, a write's end does not
// overflow). Never reads outside [frame, frame+len).
Drop parse(const uint8_t* frame, size_t len, uint32_t cluster, Parsed* out);

// Writes the Ethernet header and h at out (kFrameOverhead bytes).
void put_headers(uint8_t* out, const uint8_t dst[6], const uint8_t src[6], const FrameHeader& h);

// The cluster's 32-bit tag in every frame (from its name).
uint32_t cluster_tag(std::string_view cluster_name);

// ---------------------------------------------------------------- bootstrap

enum class Tag : uint8_t {
  kHello = 'H',  // this side's MAC, link id, frame size and window
  kReady = 'R',  // this side knows your link id: send
};

struct Hello {
  uint8_t mac[6] = {};
  uint32_t link = 0;     // put this in every frame to the sender of the HELLO
  uint32_t payload = 0;  // the largest DATA payload it takes
  uint32_t window = 0;   // frames it takes in flight
};
struct Ready {
  uint32_t from_link = 0;  // the sender's link id ...
  uint32_t to_link = 0;    // ... knows this one of yours
};

std::string encode(const Hello& m);
std::string encode(const Ready& m);
bool decode(std::string_view in, Hello* m);
bool decode(std::string_view in, Ready* m);

}  // namespace gsync::transport::dpdk
