// SPDX-License-Identifier: Apache-2.0
//
// The last ops this daemon finished, with their timelines: when each local
// rank handed its part in, when each pipeline stage began, first got input
// and finished, when the op ended and how. A ring of the newest
// [trace] ring_ops (1024 by default); [trace] record = false keeps none.
// gsyncctl ops shows it beside the ops still in flight; a training step's
// breakdown (docs/performance.md) joins it with the client's own times by
// (job, key, step). Times are CLOCK_MONOTONIC nanoseconds, the clock every
// process and namespace of a machine shares (Python's time.monotonic_ns).
//
// The ring's slots are reused in place: once it has gone round, an op is
// recorded into the oldest slot over the strings and vectors it already
// holds, so recording allocates nothing per op in the steady state
// (docs/performance.md, "What recording ops costs"). A cross-host op also
// has its transfers on each peer link (core/wire_log.h), at most
// WireLog::kMaxEvents of them, the rest counted.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "daemon/core/clock.h"
#include "daemon/core/wire_log.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/records/op_end.h"
#include "protocol/ops.h"

namespace gsync {

using PipelineTimes = pipeline::OpTimes;

struct OpHistoryEntry {
  std::string job;
  proto::OpId id;
  proto::OpShape shape;
  int code = 0;        // 0 or the GSYNC_ERR_* it failed with
  std::string error;   // its text, when it failed
  std::vector<std::pair<int, Clock::time_point>> arrivals;  // (global rank, when), by local rank
  Clock::time_point finished{};
  // What the history shows of the pipeline's times: not all of them (the
  // straggler report's host arrivals are 650 bytes an op it never shows).
  // No stages when the op never started.
  struct Times {
    Clock::time_point started{};
    std::vector<PipelineTimes::Stage> stages;
    std::string plan;
    WireLog wire;
  } pipeline;
  // Its times from the pipeline's (null: the op never started), assigned
  // over what the slot held, reusing its memory.
  void take_times(const PipelineTimes* times);
};

class OpHistory {
 public:
  // capacity: the ops kept, at least 1; record false: none are.
  OpHistory(size_t capacity, bool record);
  bool recording() const { return record_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return slots_.size(); }
  // The slot to record the op that just ended in, filled by the caller:
  // the oldest op's once the ring is full, its contents still there to be
  // overwritten (assign every field). Only while recording().
  OpHistoryEntry& next();
  // The subscriber (op_end.h): the op that ended into next(), while
  // recording().
  void record(const OpEnd& e);
  // The ops kept, oldest first (gsyncctl ops' "recent"). hosts: the
  // cluster's host ids by index, self: this host's index, to name the
  // peer links of the ops' transfers (none: "host 2").
  nlohmann::json report(const std::vector<std::string>& hosts = {}, int self = -1) const;

 private:
  size_t capacity_;
  bool record_;
  std::vector<OpHistoryEntry> slots_;  // grows to capacity_, then wraps
  size_t next_ = 0;                    // the slot next() hands out once full
};

// CLOCK_MONOTONIC nanoseconds of t (0 for a time never set).
int64_t monotonic_ns(Clock::time_point t);
// CLOCK_REALTIME nanoseconds now: how this machine's monotonic times map
// to the wall clock, which the probe compares between hosts.
int64_t realtime_ns();

}  // namespace gsync
