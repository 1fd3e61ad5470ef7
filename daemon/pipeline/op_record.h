// SPDX-License-Identifier: Apache-2.0
//
// The pipeline's record of one op (pipeline.h): its request, its stages
// and their states, what it reports when it ends. Private to the
// pipeline's own files (pipeline.cc, device_memory.cc); stages see an op
// through their StageLink only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/pipeline/pipeline.h"

namespace gsync::pipeline {

// The pipeline's record of one op.
class Op {
 public:
  enum class State : uint8_t { kIdle, kActive, kFinished, kAborting, kQuiet };
  struct StageState {
    State state = State::kIdle;
    StageTimes times;
  };

  Op(Pipeline& p, uint64_t serial, OpRequest req, Pipeline::Done done)
      : pipeline(p), serial(serial), req(std::move(req)), done(std::move(done)),
        started(Clock::now()) {}

  Pipeline& pipeline;
  const uint64_t serial;
  // Changed only by its staging (Pipeline::stage_device_memory), before
  // its stages are built; they read it through StageLink::request().
  OpRequest req;
  Pipeline::Done done;
  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<StageState> states;
  Status status;
  bool failing = false, ended = false;
  // Pinned buffers the op waits for (and 1 while they are being asked
  // for): its stages are built once none are left.
  int staging = 0;
  bool waited = false;  // for any: its stages begin when they were built
  double weight_total = 0;
  uint64_t value = 0;
  OpRoute route;
  Clock::time_point started;
  std::string plan;  // OpTimes::plan
  WireLog wire;      // OpTimes::wire; the cross-host stage records into it
  HostArrivals hosts;  // OpTimes::hosts; the cross-host stage records into it

  // Stages built after a first one of their own (CopyStage through host
  // memory) count from link_offset.
  StageLink link(int index) { return StageLink(*this, index + link_offset); }
  int link_offset = 0;
  // The first stage not finished; -1 when all are.
  int current() const {
    for (size_t i = 0; i < states.size(); i++)
      if (states[i].state != State::kFinished) return static_cast<int>(i);
    return -1;
  }
};

}  // namespace gsync::pipeline
