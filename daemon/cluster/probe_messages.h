// SPDX-License-Identifier: Apache-2.0
//
// What daemons tell each other for `gsyncctl doctor` (docs/protocol.md,
// "Daemon to daemon", types 15-17; docs/operations.md, "Doctor"):
//
//   HostInfo    sent to a peer when its link comes up: the sender's
//               version, build id and pid, for the peers report
//   Probe       a ping (no payload) or one chunk of a data burst; carries
//               the asker's CLOCK_REALTIME for the clock estimate
//   ProbeReply  the answer to a ping, or to a burst's last chunk (control
//               messages of one peer arrive in order, so the last chunk
//               means the whole burst is in): the probe's time echoed, and
//               the answerer's CLOCK_REALTIME when the probe came and when
//               it answered
//
// Fixed little-endian structs, as messages.h; a Probe is followed by its
// payload. Every decode checks the length, the kind and that a chunk lies
// inside its burst; the answerer keeps no state, so a peer's probe costs
// only the reply.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/cluster/messages.h"
#include "daemon/transport/transport.h"

namespace gsync::cluster {

// One data probe's payload at most: a control message's size (kMaxControl)
// with room for the header.
constexpr size_t kProbeChunkBytes = 64 << 10;
// A burst's bytes at most.
constexpr uint64_t kMaxProbeBytes = 64ull << 20;

enum ProbeKind : uint8_t { kProbePing = 0, kProbeData = 1 };

struct HostInfo {
  uint8_t type = kHostInfo;
  uint8_t pad[3] = {};
  uint32_t pid = 0;
  char version[32] = {};
  char build_id[80] = {};  // lower-case hex (a SHA-256 build id is 64 characters)
};

struct Probe {
  uint8_t type = kProbe;
  uint8_t kind = kProbePing;
  uint8_t pad[2] = {};
  uint32_t seq = 0;
  uint64_t id = 0;      // the asking daemon's probe run
  int64_t sent_ns = 0;  // the asker's CLOCK_REALTIME when it sent this
  // Data: this chunk's payload is bytes [offset, offset + payload) of a
  // burst of total bytes. Both 0 in a ping.
  uint64_t offset = 0, total = 0;
};

struct ProbeReply {
  uint8_t type = kProbeReply;
  uint8_t kind = kProbePing;
  uint8_t pad[2] = {};
  uint32_t seq = 0;
  uint64_t id = 0;
  int64_t sent_ns = 0;      // the probe's, echoed
  int64_t received_ns = 0;  // the answerer's CLOCK_REALTIME when the probe came
  int64_t replied_ns = 0;   // and when it answered
  uint64_t bytes = 0;       // data: the burst's total, all of it received; 0 for a ping
};

// The layouts docs/protocol.md gives (no padding the compiler chose).
static_assert(sizeof(HostInfo) == 120 && sizeof(Probe) == 40 && sizeof(ProbeReply) == 48);
static_assert(sizeof(Probe) + kProbeChunkBytes <= transport::kMaxControl);

inline std::string encode_probe(const Probe& head, size_t payload) {
  std::string out(as_bytes(head));
  out.append(payload, '\0');
  return out;
}

// A Probe and its payload's length; false, with why, for anything else.
inline bool decode_probe(std::string_view msg, Probe* p, size_t* payload, std::string* why) {
  if (!decode(msg, p)) {
    *why = "shorter than its header";
    return false;
  }
  *payload = msg.size() - sizeof(Probe);
  if (p->kind == kProbePing) {
    if (*payload == 0 && p->offset == 0 && p->total == 0) return true;
    *why = "a ping with a payload or a burst";
    return false;
  }
  if (p->kind != kProbeData) {
    *why = "of unknown kind " + std::to_string(p->kind);
    return false;
  }
  if (*payload == 0 || *payload > kProbeChunkBytes || p->total > kMaxProbeBytes ||
      p->offset > p->total || *payload > p->total - p->offset) {
    *why = "a data chunk of " + std::to_string(*payload) + " bytes at " +
           std::to_string(p->offset) + " does not fit a burst of " + std::to_string(p->total);
    return false;
  }
  return true;
}

inline bool decode_probe_reply(std::string_view msg, ProbeReply* r, std::string* why) {
  if (!decode_exact(msg, r)) {
    *why = "not " + std::to_string(sizeof(ProbeReply)) + " bytes long";
    return false;
  }
  if ((r->kind == kProbePing && r->bytes == 0) ||
      (r->kind == kProbeData && r->bytes > 0 && r->bytes <= kMaxProbeBytes))
    return true;
  *why = "of kind " + std::to_string(r->kind) + " with " + std::to_string(r->bytes) + " bytes";
  return false;
}

// The answer to a well-formed probe: a ping's at once, a burst's to its
// last chunk only.
inline std::optional<ProbeReply> answer_probe(const Probe& p, size_t payload, int64_t received_ns,
                                              int64_t replied_ns) {
  if (p.kind == kProbeData && p.offset + payload != p.total) return std::nullopt;
  ProbeReply r;
  r.kind = p.kind;
  r.seq = p.seq;
  r.id = p.id;
  r.sent_ns = p.sent_ns;
  r.received_ns = received_ns;
  r.replied_ns = replied_ns;
  r.bytes = p.kind == kProbeData ? p.total : 0;
  return r;
}

// The midpoint method (NTP's, RFC 5905 section 8) on one round trip: t1
// sent and t4 back on our clock, t2 received and t3 answered on the
// peer's. The peer's clock runs `offset` ahead of ours, give or take
// half the time on the wire (rtt / 2): the estimate is exact when the
// two directions take equally long.
struct ClockSample {
  double offset_ns = 0, rtt_ns = 0;
};
inline ClockSample midpoint(int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
  // Differences first, exact, in wrapping arithmetic (t2 and t3 are a
  // peer's: any value); doubles of whole timestamps would lose ~256 ns.
  auto diff = [](int64_t a, int64_t b) {
    return static_cast<double>(static_cast<int64_t>(static_cast<uint64_t>(a) -
                                                    static_cast<uint64_t>(b)));
  };
  return {(diff(t2, t1) + diff(t3, t4)) / 2, diff(t4, t1) - diff(t3, t2)};
}

}  // namespace gsync::cluster
