// SPDX-License-Identifier: Apache-2.0
//
// What stays the same across the steps of one tensor's cross-host op: the
// algorithm, the chunking, the per-chunk schedule, whether it goes eagerly,
// and the resources the schedule needs (scratch slots and the regions peers
// write into). Built once by build_plan(), given its resources by
// Engine::prepare(), run by the engine step after step, and retired by
// Engine::retire() when the plan cache lets it go (docs/architecture.md,
// "The plan cache").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/collective/schedule.h"
#include "daemon/collective/scratch_pool.h"
#include "daemon/reduce/codec.h"
#include "protocol/ops.h"

namespace gsync::collective {

using proto::OpShape;

struct PlanInputs {
  OpShape shape;
  std::vector<Participant> parts;  // the op's hosts, in cluster order
  int self = -1;                   // participant index of this host
  int root_participant = -1;       // broadcast: the participant with the root rank
  std::string algorithm = "auto";  // config: auto or one algorithm's name
  uint64_t chunk_bytes = 0;        // config: 0 picks per tensor
};

struct Plan {
  OpShape shape;
  std::vector<int> hosts;  // participants' cluster indices, in cluster order
  int self = -1;
  int root_participant = -1;  // broadcast
  Algo algo = Algo::kRing;
  uint64_t chunk_elems = 0, chunk_bytes = 0;
  size_t nchunks = 0;
  // hier: chunks more than this past the lowest unfinished one wait
  // (docs/algorithms.md, "Window"); nchunks elsewhere.
  size_t window = 0;
  // Small ops go eagerly: every transfer is one control message that
  // carries the data (collective/eager.cc); no rendezvous regions.
  bool eager = false;
  int slots = 0;  // scratch slots of the schedule, each as large as the tensor

  // The schedule of a tree depends on the op's root, which rotates with
  // the step (tree_root); one per root, built the first time it is used.
  const Schedule& schedule(uint64_t key, uint64_t step);
  Schedule fixed;                       // every algorithm but kTree
  std::vector<std::unique_ptr<Schedule>> by_root;  // kTree
  std::vector<Participant> parts;

  // Resources (Engine::prepare, Engine::retire).
  Scratch scratch;               // rendezvous: slots x slot_bytes, registered
  uint32_t scratch_region = 0;
  uint64_t slot_bytes = 0;       // scratch slot stride
  std::vector<uint8_t> eager_scratch;  // eager: slot j at j * slot_bytes
  uint32_t data_region = 0;      // peers write final values here
  uint8_t* data_base = nullptr;  // the buffer data_region covers
  std::shared_ptr<const void> data_owner;  // keeps that buffer mapped while registered
  bool prepared = false;

  // Compression (compress_schedule.h, docs/compression.md, "The engine").
  // packed: the op is compressed (whether or not this host's own schedule
  // packs a phase: every host of the op lays out its scratch alike). Then the
  // scratch region is a copy slot (final values that arrive encoded) and
  // `slots` scratch slots after it, each holding per chunk a landing area
  // of land_stride bytes (an encoding may be longer than the chunk) and
  // the block maxima area of maxima_stride bytes after it; `local` (not
  // registered: no peer writes there) holds per chunk this host's send
  // buffer and its own maxima, in the same strides.
  reduce::CodecParams codec;  // kNone: not compressed
  bool packed = false;
  uint64_t land_stride = 0, maxima_stride = 0;
  Scratch local;
  // Error buffers, kept from step to step while the plan lives: buffer e
  // of chunk c at residuals + e * shape.count + c * chunk_elems.
  std::vector<float> residuals;
  int residual_buffers = 0;

  uint64_t chunk_len(size_t c) const;  // bytes of chunk c
  uint64_t chunk_count(size_t c) const;  // elements of chunk c
  // A packed plan's stride of one chunk in a scratch slot (and in local).
  uint64_t chunk_stride() const { return land_stride + maxima_stride; }
  // Where a transfer of chunk c lands in the receiver's scratch region
  // (slot_bytes: the receiver's); kCopy in a packed phase only (a raw final
  // value lands in the data region at c * chunk_bytes).
  uint64_t land_offset(Xfer kind, uint8_t slot, size_t c, uint64_t slot_bytes) const;
  // Error buffers for a schedule that uses n of them (a tree's schedule
  // per root may use more than the first): grown, zero, never shrunk.
  void ensure_residuals(int n);
  std::string describe() const;        // "ring, 8 chunks of 1 MiB"
};

// The algorithm, chunking and schedule for an op; no resources yet.
std::unique_ptr<Plan> build_plan(const PlanInputs& in);
// Whether plan was built for these participants (the shape is the cache's
// key; which hosts take part can change within an epoch when a job's ranks
// move).
bool plan_fits(const Plan& plan, const PlanInputs& in);

}  // namespace gsync::collective
