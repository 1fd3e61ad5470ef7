// SPDX-License-Identifier: Apache-2.0
//
// The parameter server's messages between daemons (docs/parameter-server.md,
// "Messages"; the types are cluster/messages.h's 6-8). Fixed little-endian
// structs; every decode checks the length, and strings are read up to
// their field's end (cluster::field).
//
//   PsRegions  after a declaration, to every host of the job: the tensor's
//              shape and options (hosts that disagree find out), and where
//              this host takes pushes (as a server)
//   PsPush     a worker to a server, per op: clock, weight, learning rate,
//              what it wants (push, pull or both), the op's token and, for a
//              pull, the region of the op's own tensor; a push's
//              data follows as one-sided writes of kPsChunkBytes (the last
//              shorter) into the server's slot for this worker, immediate
//              kPsWriteBit | token << 32 | clock; they may land in any order
//              (pieces.h)
//   PsAck      a server to a worker: its push without a pull was applied
//              (code 0), or its request was refused (a clock out of order,
//              a shape that differs) with the reason
//   PsNorm     a server to every other server of a key with the anomaly
//              guard: its shard's sum of squares of a clock's gradient;
//              each server answers the clock's pulls once it has all
//              (docs/fault-tolerance.md)
//   PsCheckpoint  to every host of a key (the sender too): take a
//              checkpoint at the first clock reached at or after `at`
//              (docs/fault-tolerance.md); sent by the key's first host
//              when its time cadence is due, and by any host that
//              gsyncctl checkpoint asks. Of kind kSetWhole, to the job's
//              other hosts: the job's checkpoint set of clock `at` is
//              whole on the sender (checkpoint_sets.cc)
//
// A server's reply is writes of its shard's values into the region the
// PsPush named (the worker's tensor, registered while it is the key's) at
// the shard's offset, in pieces of kPsChunkBytes from the shard's start,
// immediate kPsWriteBit | token << 32 | clock: no message goes with it,
// and nothing is copied on either side. The worker counts the bytes.
#pragma once

#include <cstdint>
#include <string_view>

#include "daemon/cluster/messages.h"
#include "protocol/ps.h"

namespace gsync::ps {

// The parameter server's message types (cluster/messages.h says which
// numbers are whose) and the tag of its one-sided writes: bit 63 of the
// immediate and of the cookie set (the engine's have it clear); claimed
// from gsyncd.cc (cluster/services.h).
constexpr uint8_t kPsRegions = 6;
constexpr uint8_t kPsPush = 7;
constexpr uint8_t kPsAck = 8;
constexpr uint8_t kPsCheckpoint = 9;
constexpr uint8_t kPsNorm = 10;
inline constexpr uint8_t kPsMessages[] = {kPsRegions, kPsPush, kPsAck, kPsCheckpoint, kPsNorm};
constexpr uint64_t kPsWriteBit = uint64_t{1} << 63;

struct PsRegions {
  uint8_t type = kPsRegions;
  uint8_t dtype = 0;  // proto::DType
  uint8_t pad[2] = {};
  uint32_t sync = 0;  // proto::to_wire(Sync)
  char job[cluster::kJobMax] = {};
  uint64_t key = 0, count = 0;
  // The optimizer and its options as a rank declared them
  // (proto::to_header / from_header, the client's own encoding).
  proto::PsDeclareHeader options = {};
  uint32_t push_region = 0;  // this host's, as a server: a slot per worker
  uint32_t hosts = 0;        // the job's hosts as this one sees them
  // The clocks of the checkpoints of its shard this host can resume from,
  // newest first (docs/fault-tolerance.md, "Recovery").
  uint32_t n_clocks = 0;  // <= kMaxResumeClocks; more is malformed
  uint32_t pad2 = 0;
  uint64_t clocks[8] = {};
};
constexpr uint32_t kMaxResumeClocks = 8;

// The anomaly guard (bsp): a server's shard of a clock's gradient, squared
// and summed, to every other server of the key once its update is applied.
struct PsNorm {
  uint8_t type = kPsNorm;
  uint8_t pad[3] = {};
  // Whose gradient made the shard's sum not finite: the first rank a fold
  // marked (reduce/nonfinite.h), plus one; 0: none (or a finite sum).
  int32_t marked = 0;
  char job[cluster::kJobMax] = {};
  uint64_t key = 0;
  uint64_t clock = 0;
  double sum_squares = 0;
};

struct PsCheckpoint {
  static constexpr uint8_t kTake = 0;      // take one at the first clock reached >= at
  static constexpr uint8_t kSetWhole = 1;  // the job's set of clock `at` is whole on the sender
  uint8_t type = kPsCheckpoint;
  uint8_t kind = kTake;
  uint8_t pad[6] = {};
  char job[cluster::kJobMax] = {};
  uint64_t key = 0;  // kSetWhole: 0 (the set is the job's)
  uint64_t at = 0;   // the clock
};

struct PsPush {
  uint8_t type = kPsPush;
  uint8_t opcode = 0;  // proto::Opcode: kPush, kPull or kPushPull
  uint8_t pad[2] = {};
  uint32_t token = 0;  // the worker's op, in the immediate of the reply
  char job[cluster::kJobMax] = {};
  uint64_t key = 0, clock = 0, count = 0;
  double weight = 0;  // the worker's share of the step (its ranks' weights)
  float lr = 0;       // 0: the declared one
  uint32_t reply_region = 0;  // a pull's: where the shard's values go (its whole tensor)
};

struct PsAck {
  uint8_t type = kPsAck;
  uint8_t pad[3] = {};
  int32_t code = 0;  // 0: applied; else a GSYNC_ERR_* code, and why in message
  uint32_t token = 0;
  uint32_t pad2 = 0;
  char job[cluster::kJobMax] = {};
  uint64_t key = 0, clock = 0;
  char message[240] = {};
};

using cluster::decode_exact;

// A push's data and a reply go as writes of at most this many bytes, so
// that a bsp server folds, steps and sends back a shard's first ranges
// while its last still come, as a ring pipelines its chunks.
constexpr uint64_t kPsChunkBytes = uint64_t{1} << 20;

// The immediate of a push's data and of a reply.
constexpr uint64_t imm_of(uint32_t token, uint64_t clock) {
  return kPsWriteBit | (uint64_t{token & 0x7fffffffu} << 32) | (clock & 0xffffffffu);
}
// A write's cookie: a worker's push (its op's token), or a server's reply
// (the key's id and the worker's participant index).
constexpr uint64_t kReplyBit = uint64_t{1} << 62;
constexpr uint64_t push_cookie(uint32_t token) { return kPsWriteBit | (token & 0x7fffffffu); }
constexpr uint64_t reply_cookie(uint32_t key_id, int worker) {
  return kPsWriteBit | kReplyBit | (uint64_t(worker & 0xffff) << 32) | key_id;
}
constexpr bool is_reply(uint64_t cookie) { return (cookie & kReplyBit) != 0; }
constexpr uint32_t cookie_token(uint64_t cookie) { return static_cast<uint32_t>(cookie & 0x7fffffffu); }
constexpr uint32_t cookie_key(uint64_t cookie) { return static_cast<uint32_t>(cookie); }
constexpr int cookie_worker(uint64_t cookie) { return static_cast<int>((cookie >> 32) & 0xffff); }
constexpr uint32_t imm_token(uint64_t imm) { return static_cast<uint32_t>(imm >> 32) & 0x7fffffffu; }
constexpr uint32_t imm_clock(uint64_t imm) { return static_cast<uint32_t>(imm); }

}  // namespace gsync::ps
