// SPDX-License-Identifier: Apache-2.0
//
// One op's state in the engine, shared by its files (engine.cc: the
// rendezvous and the op's life; chunks.cc: the chunk schedule; eager.cc:
// transfers that ride in control messages). Private to daemon/collective/.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "daemon/collective/engine.h"

namespace gsync::collective {

namespace xop {
// Immediate of a write: the receiver's op token (bits 32-63), the transfer's
// kind (30-31), the chunk (8-29: Plan's kMaxChunks) and the scratch slot
// (0-7).
constexpr uint64_t imm_of(uint32_t token, size_t chunk, Xfer kind, uint8_t slot) {
  return (uint64_t{token} << 32) | (uint64_t{static_cast<uint8_t>(kind) & 3u} << 30) |
         (uint64_t{chunk & 0x3fffff} << 8) | slot;
}
constexpr size_t imm_chunk(uint64_t imm) { return (imm >> 8) & 0x3fffff; }
constexpr uint8_t imm_slot(uint64_t imm) { return static_cast<uint8_t>(imm & 0xff); }
// The kind bits; false for the one value that names no kind.
constexpr bool imm_kind(uint64_t imm, Xfer* out) {
  const auto k = static_cast<uint8_t>((imm >> 30) & 3);
  if (k > static_cast<uint8_t>(Xfer::kMaxima)) return false;
  *out = static_cast<Xfer>(k);
  return true;
}
// The cookie of a write: the sender's op token (bits 32-62), the ref of
// the write in the op's wire log (22-31; 0: not recorded) and the chunk
// (0-21, as in the immediate).
static_assert(WireLog::kMaxEvents < (1u << 10), "a wire log ref has 10 bits of the cookie");
constexpr uint64_t cookie_of(uint32_t token, uint32_t wire_ref, size_t chunk) {
  return (uint64_t{token} << 32) | (uint64_t{wire_ref & 0x3ffu} << 22) | (chunk & 0x3fffff);
}
constexpr size_t cookie_chunk(uint64_t cookie) { return cookie & 0x3fffff; }
constexpr uint32_t cookie_wire_ref(uint64_t cookie) {
  return static_cast<uint32_t>((cookie >> 22) & 0x3ff);
}
// A transfer that landed, as a chunk's `arrived` list keeps it.
constexpr uint32_t arrival_code(int peer, Xfer kind, uint8_t slot) {
  return (static_cast<uint32_t>(peer) << 10) | (uint32_t{static_cast<uint8_t>(kind)} << 8) | slot;
}
// How long messages for an op this host has not begun are kept.
constexpr auto kEarlyLife = std::chrono::seconds(120);
}  // namespace xop

// A transfer that landed and that no phase has taken yet.
struct Engine::Arrived {
  uint32_t code;  // arrival_code
  uint64_t len;   // bytes that landed (an encoding's length varies)
  bool in_data = false;  // a final value into the data region, not scratch
  bool operator==(uint32_t c) const { return code == c; }
};

struct Engine::Chunk {
  size_t phase = 0;
  bool sent = false, done = false;
  int pending_sends = 0;
  std::vector<Arrived> arrived;  // the transfers that landed, not yet taken by a phase
  // Compressed plans: the length of this host's last encoding (its send
  // buffer, which a symmetric phase folds too) and of the final value that
  // landed encoded in the copy slot (forwarded as it came).
  uint64_t send_len = 0, copy_len = 0;
};

struct Engine::XOp : std::enable_shared_from_this<Engine::XOp> {
  std::string job;
  proto::OpId id;
  uint32_t token = 0;
  std::shared_ptr<Plan> plan;  // alive as long as the op, even once retired
  const Schedule* sched = nullptr;
  uint8_t* data = nullptr;
  uint8_t* scratch = nullptr;  // slot j at j * plan->slot_bytes
  double weight_local = 0, weight_total = 0;
  struct PeerReady {
    bool seen = false;
    OpReady msg;
  };
  std::vector<PeerReady> ready;  // by participant
  int ready_count = 0;
  bool local_ready = false, running = false, finished = false;
  uint64_t local_elems = 0;  // [0, local_elems) of data holds the local fold
  // Eager: the weight of what landed in each slot, and of what data holds.
  std::vector<double> slot_weight;
  double weight_acc = 0;
  std::vector<Chunk> chunks;
  size_t chunks_done = 0;
  // Chunks from done_prefix (the lowest chunk not done yet) + window on
  // wait to start their schedule (Engine::window_end).
  size_t done_prefix = 0;
  EngineCallbacks cb;
  Clock::time_point started;
  WireLog* wire = nullptr;  // EngineOp::wire; null once the op is complete
  HostArrivals* hosts = nullptr;  // EngineOp::hosts; null once the op is complete

  const Plan& p() const { return *plan; }
  std::string describe() const {
    return proto::describe_op(job, plan->shape.opcode, id);
  }
  int participant_of(int host) const {
    auto it = std::find(plan->hosts.begin(), plan->hosts.end(), host);
    return it == plan->hosts.end() ? -1 : static_cast<int>(it - plan->hosts.begin());
  }
  std::shared_ptr<XOp> hold() { return shared_from_this(); }
};

}  // namespace gsync::collective
