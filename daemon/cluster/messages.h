// SPDX-License-Identifier: Apache-2.0
//
// Control messages between daemons (transport send_control): the control
// plane's own (which local ranks of a job each host has, and their
// leaving), the framing every layer's messages share (a type byte first,
// fixed structs, decode checks the length, strings NUL-terminated on
// read), and the protocol's version. docs/protocol.md, "Daemon to daemon".
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "protocol/ops.h"

namespace gsync::cluster {

// The daemon-to-daemon protocol's version, checked in the transport's
// handshake (a mismatch is refused naming both). Separate from the client
// protocol (protocol/wire.h): these messages change without the clients.
// 2: JobLeave lists the open ops; OpData (type 5) replaced OpResult.
// 3: the handshake proves the cluster key (HELLO's nonce, HELLO_ACK's proof,
//    AUTH; docs/transport.md, "Authentication").
// 4: OpReady carries the op's compression (protocol/compression.h) where it
//    had padding; a write's immediate has a 2-bit transfer kind.
// 5: the parameter server's messages (types 6-8, daemon/ps/messages.h);
//    an immediate with bit 63 set is the parameter server's.
// 6: PsPush names the region of the worker's tensor (replies go straight
//    into it); PsRegions lost its reply region and carries the options as
//    the client's 64-byte declaration header; pushes and replies are
//    written in kPsChunkBytes pieces.
// 7: PsRegions carries the clocks of the checkpoints the host can resume
//    from; PsCheckpoint (type 9) asks every shard for one at a clock;
//    PsNorm (type 10) carries a shard's part of a clock's gradient norm.
// 8: batch leases (types 11-14, daemon/leases/messages.h).
// 9: HostInfo (type 15: a daemon's version and build id, sent when a link
//    comes up) and the probe's messages (types 16-17, cluster/probe.h).
// 10: JobAnnounce's padding carries the digest of the job's tuning table.
// 11: ElasticJoin and ElasticWorld (elastic jobs).
constexpr uint32_t kProtocolVersion = 11;

// The control plane's own message types. The numbers between are the
// cross-host services' (services.h), each declared in its own layer and
// claimed from gsyncd.cc, where the registry refuses a number taken twice:
// 3-5 the collective engine's (collective/messages.h), 6-10 the parameter
// server's (ps/messages.h), 11-14 batch leases' (leases/messages.h). A new
// service takes the next free number, 20 and up.
enum MsgType : uint8_t {
  kJobAnnounce = 1,
  kJobLeave = 2,
  // A daemon's version and build id; the probe gsyncctl doctor asks for
  // (daemon/cluster/probe_messages.h).
  kHostInfo = 15,
  kProbe = 16,
  kProbeReply = 17,
  // Elastic jobs (daemon/cluster/elastic_messages.h): a host's ranks of a
  // job are all there (or gone), and the world its leader formed.
  kElasticJoin = 18,
  kElasticWorld = 19,
};
inline constexpr uint8_t kControlPlaneTypes[] = {kJobAnnounce, kJobLeave,    kHostInfo,
                                                 kProbe,       kProbeReply,  kElasticJoin,
                                                 kElasticWorld};

constexpr size_t kJobMax = 64;
constexpr size_t kMaxRanksPerHost = 4096;

struct JobAnnounce {
  uint8_t type = kJobAnnounce;
  // The digest of the tuning table the host's job plans with, 24 bits
  // little-endian (tuning::TuneTable::digest; 0: none). Hosts whose jobs
  // hold different tables plan by the built-in rule (docs/algorithms.md,
  // "Tuning"); a collision only leaves the rendezvous check to catch it.
  uint8_t tuning[3] = {};
  int32_t world_size = 0;
  int32_t nranks = 0;  // followed by nranks int32 global ranks
  char job[kJobMax] = {};
};

// Followed by nopen proto::OpId (key, step): the ops of the job this host has begun and not
// finished when the rank left. Those it still finishes (it holds the data);
// any other op of the job can never get its part. Peers need the list
// because in a tree they do not all hear from this host directly: one
// whose op waits only for its parent cannot otherwise tell "this host's
// part is in" from "never will be".
struct JobLeave {
  uint8_t type = kJobLeave;
  uint8_t pad[3] = {};
  int32_t rank = -1;
  int32_t pid = 0;
  uint32_t nopen = 0;
  char job[kJobMax] = {};
  char reason[160] = {};
};

// On the wire as they are in memory: (key, step), 16 bytes each.
static_assert(sizeof(proto::OpId) == 16 && std::is_trivially_copyable_v<proto::OpId>);
// More open ops than this are not listed; peers then treat the unlisted
// ones as never joined and fail them (never a partial sum).
constexpr size_t kMaxLeaveOps = 2048;

template <class T>
std::string_view as_bytes(const T& m) {
  return {reinterpret_cast<const char*>(&m), sizeof m};
}

// Copies a fixed-size message out of msg; false if too short.
template <class T>
bool decode(std::string_view msg, T* out) {
  if (msg.size() < sizeof(T)) return false;
  std::memcpy(out, msg.data(), sizeof(T));
  return true;
}

// Exactly one message of type T: false for any other length.
template <class T>
bool decode_exact(std::string_view msg, T* out) {
  return msg.size() == sizeof(T) && decode(msg, out);
}

inline std::string field(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

inline void set_field(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(s.size(), n - 1));
}

inline std::string encode_announce(const std::string& job, int world, const std::vector<int>& ranks,
                                   uint32_t tuning = 0) {
  JobAnnounce a;
  for (int i = 0; i < 3; i++) a.tuning[i] = static_cast<uint8_t>(tuning >> (8 * i));
  a.world_size = world;
  a.nranks = static_cast<int32_t>(ranks.size());
  set_field(a.job, sizeof a.job, job);
  std::string out(as_bytes(a));
  if (!ranks.empty())
    out.append(reinterpret_cast<const char*>(ranks.data()), ranks.size() * sizeof(int));
  return out;
}

inline uint32_t announce_tuning(const JobAnnounce& a) {
  return uint32_t{a.tuning[0]} | uint32_t{a.tuning[1]} << 8 | uint32_t{a.tuning[2]} << 16;
}

inline bool decode_announce(std::string_view msg, JobAnnounce* a, std::vector<int>* ranks) {
  if (!decode(msg, a) || a->nranks < 0 || static_cast<size_t>(a->nranks) > kMaxRanksPerHost ||
      msg.size() != sizeof(JobAnnounce) + sizeof(int32_t) * static_cast<size_t>(a->nranks))
    return false;
  ranks->resize(static_cast<size_t>(a->nranks));
  // Not with an empty list: memcpy to the null data() of an empty vector
  // is undefined even for 0 bytes (found by tests/fuzz, UBSan).
  if (!ranks->empty())
    std::memcpy(ranks->data(), msg.data() + sizeof(JobAnnounce), ranks->size() * sizeof(int32_t));
  return true;
}

inline std::string encode_leave(const JobLeave& head, const std::vector<proto::OpId>& open) {
  JobLeave m = head;
  m.nopen = static_cast<uint32_t>(std::min(open.size(), kMaxLeaveOps));
  std::string out(as_bytes(m));
  if (m.nopen > 0)
    out.append(reinterpret_cast<const char*>(open.data()), m.nopen * sizeof(proto::OpId));
  return out;
}

inline bool decode_leave(std::string_view msg, JobLeave* m, std::vector<proto::OpId>* open) {
  if (!decode(msg, m) || m->nopen > kMaxLeaveOps ||
      msg.size() != sizeof(JobLeave) + sizeof(proto::OpId) * m->nopen)
    return false;
  open->resize(m->nopen);
  if (!open->empty())
    std::memcpy(open->data(), msg.data() + sizeof(JobLeave), open->size() * sizeof(proto::OpId));
  return true;
}

}  // namespace gsync::cluster
