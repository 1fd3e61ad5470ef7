// SPDX-License-Identifier: Apache-2.0
//
// The stages that run on this host's memory alone, with the reduce kernels
// (daemon/reduce/): small ranges inline on the event thread (a hop to a
// worker costs more than the work), large ones cut into grains for the work
// pool so one big tensor uses every core.
//
//   LocalReduce  a job on this host only: every rank's tensor folded and
//                stored back into every one of them in one pass (or the
//                root's copied, for a broadcast); the whole op
//   Fold         a job on several hosts: the local ranks folded into the
//                host's contribution (sums stay sums, weights applied but
//                not normalized), reported chunk by chunk as it goes
//   Store        the final value copied into the other local ranks, an
//                average divided by the world once, a weighted average
//                scaled by 1 / the sum of all weights; chunk by chunk as
//                the cross-host stage finishes them
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/pipeline/gpu_work.h"
#include "daemon/pipeline/op.h"
#include "daemon/pipeline/stage.h"
#include "daemon/pipeline/work_pool.h"
#include "daemon/reduce/reduce.h"

namespace gsync::pipeline {

// Runs reduce or copy work inline or on the pool, for one stage, and counts
// the tasks in flight. Pointer arrays it is given stay valid meanwhile: the
// stage that owns this keeps them.
class LocalWork {
 public:
  LocalWork(WorkPool& pool, uint64_t inline_bytes) : pool_(pool), inline_bytes_(inline_bytes) {}
  // The buffers are device memory on these GPUs (each reaching every
  // buffer): the work goes to their streams, a slice each (always tasks,
  // never inline; progress is reported at their end only).
  void use_gpu(GpuWork* gpu, std::vector<int> devices) {
    gpu_ = gpu;
    devices_ = std::move(devices);
  }
  // Elements [begin, end) of a; copy_src set: plain copies into a.outputs
  // instead. mark_ranks (the inputs' ranks) set: a NaN or an Inf of an
  // input is marked in the output with its rank (nonfinite.h). after (on
  // the GPU): the GPU tasks this work follows, waited for on the device
  // (gpu_work.h). Returns the pool task, or 0 when it ran inline.
  // note false (on the GPU): its tasks end with the next noted work of
  // their streams (GpuWork::submit).
  uint64_t run(const reduce::ReduceArgs& a, const void* copy_src, uint64_t begin, uint64_t end,
               uint64_t progress_step, uint64_t tag, std::vector<int> mark_ranks = {},
               const std::vector<uint64_t>& after = {}, bool note = true);
  bool on_gpu() const { return gpu_ != nullptr; }
  // On one GPU only: the work that follows it on the device stays on that
  // GPU's streams. Across GPUs it is ordered through the event thread - a
  // fault on one GPU must not leave another's stream waiting forever on
  // an event that will never come.
  bool on_one_gpu() const { return gpu_ != nullptr && devices_.size() == 1; }
  // The GPU tasks of the last run (a slice per GPU): what work that
  // follows it names as `after`.
  const std::vector<uint64_t>& last_gpu_tasks() const { return last_gpu_tasks_; }
  int in_flight() const { return in_flight_; }
  void task_done() { in_flight_--; }

 private:
  WorkPool& pool_;
  uint64_t inline_bytes_;
  GpuWork* gpu_ = nullptr;
  std::vector<int> devices_;
  std::vector<uint64_t> last_gpu_tasks_;
  int in_flight_ = 0;
};

// Common to the three: the pointer storage, abort and quiet.
class LocalStage : public Stage {
 public:
  LocalStage(StageLink link, WorkPool& pool, uint64_t inline_bytes);
  void abort(const Status& why) override;
  void task_done(uint64_t task) override;
  std::string waiting_for() const override;

 protected:
  // A task (or an inline run) of this stage ended; true when the op is
  // being aborted and the stage is quiet now.
  virtual void on_task_done() {}
  reduce::ReduceArgs args_;
  std::vector<const void*> inputs_;
  std::vector<void*> outputs_;
  std::vector<double> weights_;
  const void* copy_src_ = nullptr;
  LocalWork work_;
  bool aborting_ = false;
  bool input_done_ = false;
};

class LocalReduceStage final : public LocalStage {
 public:
  LocalReduceStage(StageLink link, WorkPool& pool, uint64_t inline_bytes);
  const char* name() const override { return "local"; }
  void ready(uint64_t begin, uint64_t end) override;
  void input_done() override;

 private:
  void on_task_done() override;
};

class FoldStage final : public LocalStage {
 public:
  // unit: the downstream's granularity (progress is reported by it).
  FoldStage(StageLink link, WorkPool& pool, uint64_t inline_bytes, uint64_t unit);
  const char* name() const override { return "fold"; }
  void ready(uint64_t begin, uint64_t end) override;
  void input_done() override;
  void task_progress(uint64_t task, uint64_t done) override;

  // Whether a multi-host op needs a fold at all (one local rank and no
  // weight to apply: its tensor already is the host's contribution).
  static bool needed(const OpRequest& req);

 private:
  void on_task_done() override;
  // On the GPU with a downstream that takes queued ranges (the copy to
  // the staging): the fold queued chunk by chunk, each passed on at once.
  bool fold_queued(uint64_t count);
  uint64_t unit_;
  uint64_t emitted_ = 0;
};

class StoreStage final : public LocalStage {
 public:
  StoreStage(StageLink link, WorkPool& pool, uint64_t inline_bytes);
  const char* name() const override { return "store"; }
  void ready(uint64_t begin, uint64_t end) override;
  // On the GPU: a range whose copy back is queued, not landed, is stored
  // after it on the device.
  bool takes_queued() const override { return work_.on_one_gpu(); }
  void ready_queued(uint64_t begin, uint64_t end, const std::vector<uint64_t>& gpu_tasks) override;
  void input_done() override;

 private:
  void on_task_done() override;
  void store(uint64_t begin, uint64_t end, const std::vector<uint64_t>& after);
  void plan_once();
  bool planned_ = false;
  bool nothing_ = false;  // no buffer needs the result written
};

// The tensor that holds this host's contribution and, after the cross-host
// stage, its result: local rank 0's, or the broadcast root's where the root
// is on this host.
const Buffer& host_buffer(const OpRequest& req);
// What the cross-host stage moves between hosts: the host buffer, or where
// that is device memory, its staging in pinned host memory.
inline const Buffer& wire_buffer(const OpRequest& req) {
  return req.staging.ptr != nullptr ? req.staging : host_buffer(req);
}
// A broadcast, or a declaration (rank 0's initial values to every rank).
inline bool copies_from_root(const OpRequest& req) {
  return req.shape.opcode == proto::Opcode::kBroadcast ||
         req.shape.opcode == proto::Opcode::kPsDeclare;
}

}  // namespace gsync::pipeline
