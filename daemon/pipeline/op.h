// SPDX-License-Identifier: Apache-2.0
//
// What the op pipeline is handed: an operation of one job whose local ranks
// have all arrived, with the buffers they gave. Buffers, not clients: the
// jobs layer above turned each rank's arena offset into a Buffer, and
// nothing below it knows what a session is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/tuning/tune_table.h"
#include "protocol/ops.h"
#include "protocol/guard.h"
#include "protocol/plan_choice.h"
#include "protocol/ps.h"

namespace gsync::pipeline {

// Where a buffer's bytes live: host memory (a client's arena), or device
// memory a client shared with the daemon (its mapping in the daemon's
// address space on GPU `device`), which the local stages reduce on the GPU
// (gpu_work.h).
enum class MemoryKind : uint8_t { kHost = 0, kDevice = 1 };

struct Buffer {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // kDevice: the GPU (the daemon's CUDA ordinal)
  uint64_t device_access = 0;  // kDevice: the GPUs whose kernels reach it (bit d: GPU d)
  uint8_t* ptr = nullptr;
  uint64_t bytes = 0;
  // Keeps the mapping the bytes are in (a client's arena, or its device
  // memory's mapping) alive while a
  // stage or a cached plan still uses them, even after the client is gone.
  std::shared_ptr<const void> owner;
  // The mapping's name (a session id): plans over buffers in it are
  // evicted when it goes (Pipeline::arena_closed).
  uint64_t arena = 0;
};

// One local rank's part of the op.
struct Contribution {
  Buffer buf;
  double weight = 0;  // GSYNC_WEIGHTED_AVG
  int rank = -1;      // global rank
};

using proto::OpShape;

struct OpRequest {
  std::string job;
  proto::OpId id;
  OpShape shape;
  std::vector<Contribution> locals;  // by local rank
  int world_size = 0;
  // A job on several hosts: the op's hosts (cluster indices, in cluster
  // order) and, for a broadcast, the host that has the root rank. Empty for
  // a job on this host alone.
  std::vector<int> hosts;
  int root_host = -1;
  uint64_t epoch = 0;  // the membership epoch the hosts were read in
  proto::Sync sync;    // the job's (parameter-server ops)
  proto::Guard guard;  // the job's anomaly guard (allreduces)
  proto::PlanChoice plan;  // the job's algorithm and chunk size (auto: not chosen)
  // Set by the pipeline for ops over device memory (docs/gpu.md):
  // on the GPU path across hosts, the pinned host memory the cross-host
  // stage sends from and receives into (null ptr otherwise);
  Buffer staging;
  // through host memory, the ranks' device buffers by local rank (kHost
  // where a rank gave host memory), each replaced in locals by a pinned
  // stand-in (empty otherwise).
  std::vector<Buffer> device_locals;
  // The tuning table in force when the job was created (null: none).
  std::shared_ptr<const tuning::TuneTable> tuning;

  bool multi_host() const { return !hosts.empty(); }
  std::string describe() const;  // "job j allreduce key 3 step 7"
};

}  // namespace gsync::pipeline
