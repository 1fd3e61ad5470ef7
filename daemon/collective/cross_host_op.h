// SPDX-License-Identifier: Apache-2.0
//
// One op's cross-host state, shared by the files of CrossHost
// (cross_host.cc: rendezvous and one-sided writes; cross_host_eager.cc:
// small ops whose transfers ride in control messages). Private to
// daemon/collective/.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "daemon/collective/cross_host.h"
#include "protocol/wire.h"

namespace gsync {

using collective::Algo;
using collective::Phase;
using collective::Xfer;

namespace xop {
// Immediate of a write: the receiver's op token, the chunk, and what the
// write is (kind bit and scratch slot).
constexpr uint64_t imm_of(uint32_t token, size_t chunk, Xfer kind, uint8_t slot) {
  return (uint64_t{token} << 32) | (uint64_t{chunk & 0xffffff} << 8) |
         (uint64_t{kind == Xfer::kCopy} << 7) | (slot & 0x7f);
}
// A transfer that landed, as a chunk's `arrived` list keeps it.
constexpr uint16_t arrival_code(int peer, Xfer kind, uint8_t slot) {
  return static_cast<uint16_t>((peer << 8) | ((kind == Xfer::kCopy) << 7) | (slot & 0x7f));
}
// How long messages for an op this host has not begun are kept.
constexpr auto kEarlyLife = std::chrono::seconds(120);
}  // namespace xop

struct CrossHost::XOp : std::enable_shared_from_this<CrossHost::XOp> {
  std::string job;
  OpId id;
  uint32_t token = 0;
  std::vector<int> hosts;  // participants' cluster indices, in cluster order
  int self = -1;
  uint8_t opcode = 0, dtype = 0, redop = 0;
  int32_t root = -1;
  uint64_t count = 0, bytes = 0, chunk_bytes = 0, chunk_elems = 0;
  size_t elem = 0, nchunks = 0;
  uint8_t* data = nullptr;
  uint32_t data_region = 0;
  Scratch scratch;
  uint32_t scratch_region = 0;
  uint64_t slot_bytes = 0;
  collective::Schedule sched;
  double weight_local = 0, weight_total = 0;
  std::vector<PeerReady> ready;
  int ready_count = 0;
  bool local_ready = false, running = false, finished = false;
  uint64_t local_elems = 0;  // [0, local_elems) of data holds the local fold (pipelined)
  // Small ops go eagerly (cross_host_eager.cc): each transfer of the
  // schedule is one OpData message carrying the data, no rendezvous.
  bool eager = false;
  std::vector<uint8_t> eager_scratch;  // slot j at j * slot_bytes
  std::vector<double> slot_weight;     // the weight of what landed in each slot
  double weight_acc = 0;               // the weight of what data holds now
  std::vector<Chunk> chunks;
  size_t chunks_done = 0;
  // Chunks from done_prefix (the lowest chunk not done yet) + window on
  // wait to start their schedule (CrossHost::window_end).
  size_t done_prefix = 0;
  size_t window = 0;
  Done done;
  ChunkDone chunk_done;
  Clock::time_point started;

  std::string describe() const {
    return fmt::format("job {} {} key {} step {}", job, opcode_name(opcode), id.key, id.step);
  }
  int participant_of(int host) const {
    auto it = std::find(hosts.begin(), hosts.end(), host);
    return it == hosts.end() ? -1 : static_cast<int>(it - hosts.begin());
  }
};


}  // namespace gsync
