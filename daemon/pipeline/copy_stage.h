// SPDX-License-Identifier: Apache-2.0
//
// Copies between device memory and pinned host memory, as stages of an op
// over device buffers (docs/gpu.md):
//
//   across hosts, on the GPU path (the wire on pinned staging):
//     Fold (GPU) -> ToHost -> CrossHost (staging) -> ToDevice -> Store (GPU)
//   through host memory (what the GPU path does not take: GPUs without
//   peer access, host and device memory in one op, float64 and int32, an
//   anomaly guard), every device buffer with a pinned stand-in:
//     ToHost (each rank's) -> the host stages -> ToDevice (each rank's)
//
// Each range its upstream finishes is copied in pieces of the downstream's
// unit (the cross-host plan's chunk) on the daemon's streams, so the copy
// engines and the wire overlap chunk by chunk; a piece is passed on once
// its copies and every piece before it have landed. What the upstream
// finished without saying which ranges (a local stage, the store) is
// copied at its end. GPU work on either side is ordered on the device:
// copies out follow the fold's kernels (ready_queued), and a piece copied
// back goes to the store (on the GPU) as soon as it is queued. A broadcast moves the root's data only: on the wire
// path the host without the root copies nothing to the host (its staging
// is written by the wire), the root's host nothing back.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "daemon/pipeline/op.h"
#include "daemon/pipeline/stage.h"

namespace gsync::pipeline {

class CopyStage final : public Stage {
 public:
  enum class Way : uint8_t { kToHost, kToDevice };
  // One buffer's copy: between device memory on `device` and its pinned
  // host counterpart.
  struct Pair {
    uint8_t* device_ptr = nullptr;
    uint8_t* host_ptr = nullptr;
    int device = -1;
  };
  // unit: the pieces' size in elements (0: a range at once); pass_through:
  // copy nothing, pass the ranges on as they come.
  CopyStage(StageLink link, Way way, std::vector<Pair> pairs, uint64_t unit, bool pass_through);
  const char* name() const override { return way_ == Way::kToHost ? "to_host" : "to_device"; }
  void ready(uint64_t begin, uint64_t end) override;
  // A range whose upstream GPU work (the fold) is queued: its copies are
  // ordered after that work on the device.
  bool takes_queued() const override { return !pass_through_ && !pairs_.empty(); }
  void ready_queued(uint64_t begin, uint64_t end, const std::vector<uint64_t>& gpu_tasks) override;
  void input_done() override;
  void abort(const Status& why) override;
  void task_done(uint64_t task) override;
  uint64_t unit() const override { return unit_; }
  std::string waiting_for() const override;

  // The pairs of the wire path (the host buffer and the staging) and of
  // the path through host memory (every rank's device buffer and its
  // stand-in).
  static std::vector<Pair> wire_pair(const OpRequest& r);
  static std::vector<Pair> local_pairs(const OpRequest& r, Way way);

 private:
  struct Piece {
    uint64_t begin = 0, end = 0;
    int copies_left = 0;
    bool passed = false;  // passed on queued (emit_queued), not at landing
  };
  void copy(uint64_t begin, uint64_t end, const std::vector<uint64_t>& after);
  void emit_landed();
  void maybe_finish();

  Way way_;
  std::vector<Pair> pairs_;
  uint64_t unit_;
  bool pass_through_;
  std::deque<Piece> pieces_;             // in flight, in order
  std::map<uint64_t, uint64_t> task_of_;  // task -> the begin of its piece
  uint64_t received_upto_ = 0;
  bool input_done_ = false, aborting_ = false, finished_ = false;
};

}  // namespace gsync::pipeline
