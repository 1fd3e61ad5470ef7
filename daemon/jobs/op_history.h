// SPDX-License-Identifier: Apache-2.0
//
// The last ops this daemon finished, with their timelines: when each local
// rank handed its part in, when each pipeline stage began, first got input
// and finished, when the op ended and how. Bounded (the newest kCapacity).
// gsyncctl ops shows it beside the ops still in flight; a training step's
// breakdown (docs/performance.md) joins it with the client's own times by
// (job, key, step). Times are CLOCK_MONOTONIC nanoseconds, the clock every
// process and namespace of a machine shares (Python's time.monotonic_ns).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "daemon/core/clock.h"
#include "daemon/pipeline/pipeline.h"
#include "protocol/ops.h"

namespace gsync {

struct OpHistoryEntry {
  std::string job;
  proto::OpId id;
  proto::OpShape shape;
  int code = 0;        // 0 or the GSYNC_ERR_* it failed with
  std::string error;   // its text, when it failed
  std::vector<std::pair<int, Clock::time_point>> arrivals;  // (global rank, when), by local rank
  Clock::time_point finished{};
  pipeline::OpTimes pipeline;  // no stages when it never started
};

class OpHistory {
 public:
  static constexpr size_t kCapacity = 1024;
  void add(OpHistoryEntry e);
  nlohmann::json report() const;

 private:
  std::deque<OpHistoryEntry> entries_;
};

// CLOCK_MONOTONIC nanoseconds of t (0 for a time never set).
int64_t monotonic_ns(Clock::time_point t);

}  // namespace gsync
