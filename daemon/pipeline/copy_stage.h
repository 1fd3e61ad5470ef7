// SPDX-License-Identifier: Apache-2.0
//
// The copies between device memory and its staging in pinned host memory
// around the cross-host stage of an op over device buffers (docs/gpu.md,
// "Across hosts from device memory"):
//
//   Fold (GPU) -> ToHost -> CrossHost (staging) -> ToDevice -> Store (GPU)
//
// Each range its upstream finishes is copied in pieces of the downstream's
// unit (the cross-host plan's chunk) on the daemon's stream of the GPU, so
// the copy engine and the wire overlap chunk by chunk; a piece is passed on
// once it and every piece before it have landed. A broadcast moves the
// root's data only: the host without the root copies nothing to the host
// (its staging is written by the wire), the root's host nothing back.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "daemon/pipeline/op.h"
#include "daemon/pipeline/stage.h"

namespace gsync::pipeline {

class CopyStage final : public Stage {
 public:
  enum class Way : uint8_t { kToHost, kToDevice };
  // unit: the pieces' size in elements (0: a range at once); pass_through:
  // copy nothing, pass the ranges on as they come.
  CopyStage(StageLink link, Way way, uint64_t unit, bool pass_through);
  const char* name() const override { return way_ == Way::kToHost ? "to_host" : "to_device"; }
  void ready(uint64_t begin, uint64_t end) override;
  void input_done() override;
  void abort(const Status& why) override;
  void task_done(uint64_t task) override;
  uint64_t unit() const override { return unit_; }
  std::string waiting_for() const override;

 private:
  struct Piece {
    uint64_t task = 0;
    uint64_t begin = 0, end = 0;
    bool done = false;
  };
  void emit_landed();
  void maybe_finish();

  Way way_;
  uint64_t unit_;
  bool pass_through_;
  const void* src_ = nullptr;
  void* dst_ = nullptr;
  int device_ = -1;
  std::deque<Piece> pieces_;  // in flight, in order
  bool input_done_ = false, aborting_ = false, finished_ = false;
};

}  // namespace gsync::pipeline
