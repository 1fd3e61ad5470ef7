// SPDX-License-Identifier: Apache-2.0
//
// The TCP provider's wire format: every frame is a fixed 48-byte header and
// `length` payload bytes. The header alone says where a WRITE's payload goes,
// so the receiver can check it against its region table and then receive the
// payload straight into the region, with no staging copy. docs/transport.md
// lists the fields and the handshake.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/transport/transport.h"

namespace gsync::transport::tcp {

// Fields are sent in host order; the cluster is x86-64 and aarch64, both
// little-endian. A big-endian port would swap here and in the hello codec.
static_assert(std::endian::native == std::endian::little, "the frame format is little-endian");

constexpr uint32_t kFrameMagic = 0x54535347;  // "GSST" on the wire
// 2: HELLO carries a nonce, HELLO_ACK a proof, and AUTH is new (the cluster
// key's challenge-response). A daemon of version 1 is refused naming both.
constexpr uint16_t kFrameVersion = 2;

enum class FrameType : uint8_t {
  kHello = 1,      // connector -> acceptor, first frame of every connection
  kHelloAck = 2,   // acceptor -> connector: its hello and its proof of the key
  kRefuse = 3,     // acceptor -> connector: payload is the reason, then close
  kControl = 4,    // payload <= kMaxControl, stream 0 only
  kWrite = 5,      // payload lands in region at offset
  kHeartbeat = 6,  // no payload; keeps an idle link alive
  kAuth = 7,       // connector -> acceptor, after HELLO_ACK: its proof of the key
};

// The handshake's challenge and response (tcp/auth.h computes them).
constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;  // HMAC-SHA-256
using Nonce = std::array<uint8_t, kNonceBytes>;

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint8_t type = 0;
  uint8_t flags = 0;  // none defined; must be 0
  uint16_t version = kFrameVersion;
  uint32_t region = 0;     // WRITE: the receiver's region id
  uint32_t length = 0;     // payload bytes after this header
  uint64_t offset = 0;     // WRITE: where this piece lands in the region
  uint64_t imm = 0;        // WRITE: the immediate handed to on_write
  uint64_t write_id = 0;   // WRITE: the write this piece belongs to (per link)
  uint64_t write_len = 0;  // WRITE: bytes of the whole write, all pieces
};
static_assert(sizeof(FrameHeader) == 48 && offsetof(FrameHeader, write_len) == 40,
              "FrameHeader is the wire layout; do not let it change by accident");

// A HELLO or HELLO_ACK payload: who is speaking, and which connection of
// which link this is. The acceptor answers with its own Hello in HELLO_ACK so
// the connector can check it reached the daemon it meant to; HELLO_ACK's
// payload is that hello followed by the acceptor's kProofBytes proof.
struct Hello {
  Identity identity;
  uint32_t host_index = 0;
  std::string host_id;
  uint32_t stream = 0;
  uint32_t streams = 0;
  // Names one connection attempt (all its streams). The acceptor gathers
  // streams by link id, so stragglers of an older attempt cannot mix in.
  uint64_t link_id = 0;
  // Random per process: tells a restarted daemon from a reconnecting one.
  uint64_t instance_id = 0;
  // Fresh per connection: the other side's proof covers it, so a proof
  // recorded from one connection is worth nothing on another.
  Nonce nonce{};
};

constexpr size_t kMaxHelloString = 1024;
constexpr size_t kMaxHello = 3 * (2 + kMaxHelloString) + 32 + kNonceBytes;
constexpr size_t kMaxHelloAck = kMaxHello + kProofBytes;
constexpr size_t kMaxRefuse = 4096;

std::string encode_hello(const Hello& h);
// False with *why set when the payload is not a well-formed Hello.
bool decode_hello(const uint8_t* data, size_t len, Hello* out, std::string* why);

std::string_view frame_type_name(uint8_t type);

}  // namespace gsync::transport::tcp
