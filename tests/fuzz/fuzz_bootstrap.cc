// SPDX-License-Identifier: Apache-2.0
//
// The messages on the bootstrap link of the peering context and the
// verbs provider (daemon/transport/peering/frame.h, verbs/frame.h), and
// the reassembly of a user message sent in parts. Input: a sequence of
// messages, each a 2-byte length and that many bytes (or, with the top bit
// of the length set, a tag and one byte repeated), decoded by its tag as
// PeeringContext::on_internal and the verbs pair do. Properties: what
// decodes re-encodes to its bytes; a message in parts is never buffered
// past kMaxControl and comes out whole or not at all.
#include <cstring>

#include "daemon/transport/peering/frame.h"
#include "daemon/transport/transport.h"
#include "daemon/transport/verbs/frame.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace gsync::transport;

void check_peering(std::string_view msg, peering::UserReassembly& parts) {
  auto tag = static_cast<peering::Ctl>(msg[0]);
  if (tag == peering::Ctl::kCaps) {
    peering::Caps caps;
    if (peering::decode(msg, &caps)) FUZZ_CHECK(peering::encode(caps) == msg);
  } else if (tag == peering::Ctl::kRetire || tag == peering::Ctl::kRetireAck) {
    uint32_t id = 0;
    if (peering::decode_id(msg, &id)) FUZZ_CHECK(peering::encode_id(tag, id) == msg);
  } else if (tag == peering::Ctl::kUser || tag == peering::Ctl::kUserPart) {
    std::string_view whole;
    auto r = parts.add(msg.substr(1), tag == peering::Ctl::kUser, &whole);
    FUZZ_CHECK(parts.buffered() <= kMaxControl);
    if (r == peering::UserReassembly::Result::kWhole) FUZZ_CHECK(whole.size() <= kMaxControl);
  }
}

void check_verbs(std::string_view msg) {
  switch (static_cast<verbs::Tag>(msg[0])) {
    case verbs::Tag::kQpInfo: {
      verbs::QpInfo m;
      if (verbs::decode(msg, &m)) FUZZ_CHECK(verbs::encode(m) == msg);
      return;
    }
    case verbs::Tag::kReady: {
      verbs::Ready m;
      if (verbs::decode(msg, &m)) FUZZ_CHECK(verbs::encode(m) == msg);
      return;
    }
    case verbs::Tag::kRegion: {
      verbs::RegionInfo m;
      if (verbs::decode(msg, &m)) FUZZ_CHECK(verbs::encode(m) == msg);
      return;
    }
  }
}

}  // namespace

GSYNC_FUZZ_TARGET(bootstrap) {
  gsync::fuzz::Input in(data, size);
  peering::UserReassembly parts;
  while (in.left() > 0) {
    uint16_t len = in.take<uint16_t>();
    std::string msg;
    if (len & 0x8000) {
      // A long message cheaply: a tag byte, then one byte repeated up to
      // 128 KiB, so that parts reach kMaxControl from a short input.
      char tag = static_cast<char>(in.byte()), fill = static_cast<char>(in.byte());
      msg.assign(1, tag);
      msg.append((len & 0x7fffu) * 4u, fill);
    } else {
      msg = std::string(in.rest().substr(0, len));
      for (size_t i = 0; i < msg.size(); i++) in.byte();
    }
    if (msg.empty()) continue;
    if (peering::is_peering_tag(static_cast<uint8_t>(msg[0]))) {
      check_peering(msg, parts);
    } else {
      check_verbs(msg);
    }
  }
  return 0;
}
