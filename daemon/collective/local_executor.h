// SPDX-License-Identifier: Apache-2.0
//
// Runs an op once every local rank of the job has arrived: the local reduce
// (all ranks' arena tensors folded and stored back into every one of them in
// a single pass), the broadcast copy, or nothing for a barrier. Small ops run
// inline on the event thread (a hop to a worker costs more than the work);
// large ones are cut into grains for the work pool.
//
// Seam for the multi-host path: a job that spans hosts will hand the host's
// local sum to the cross-host step (daemon/collective/, see docs/algorithms.md)
// between the fold and the store; in a single-host world the fold result is
// final and is stored at once.
#pragma once

#include <cstdint>

#include "daemon/collective/work_pool.h"
#include "daemon/jobs/job.h"

namespace gsync {

class LocalExecutor {
 public:
  LocalExecutor(WorkPool& pool, uint64_t inline_bytes) : pool_(pool), inline_bytes_(inline_bytes) {}

  // Starts op (all arrivals present). Returns 0 when it finished inline,
  // else the pool task id that will be reported by the pool when done.
  uint64_t start(Op& op);
  // The store of elements [begin, end) only, whatever the op's stage (a
  // pipelined store: the rest of the tensor may still be on the network and
  // its fold still running). The first call sets the store's storage up for
  // all later ones. Returns as start().
  uint64_t start_store(Op& op, size_t begin, size_t end);

 private:
  struct Plan;
  // What the op's stage `stage` does; false when it has nothing to do.
  bool plan(Op& op, Op::Stage stage, Plan* p) const;
  uint64_t run(Op& op, const Plan& p, size_t begin, size_t end, size_t progress);

  WorkPool& pool_;
  uint64_t inline_bytes_;
};

}  // namespace gsync
