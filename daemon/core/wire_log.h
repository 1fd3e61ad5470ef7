// SPDX-License-Identifier: Apache-2.0
//
// What one op moved on each peer link, for the trace (docs/operations.md,
// "Traces"): every transfer of its cross-host schedule that this host
// issued to a peer, with when the transport said it was done, and every
// transfer that landed here from a peer. The engine (collective/) records
// into it, the pipeline hands it on with the op's times, the op history
// (jobs/) reports it; it lives here because all three see core/.
//
// Bounded: an op keeps its first kMaxEvents transfers and only counts the
// rest, so a tensor of many thousand chunks costs the same as one of a few
// hundred. The pipeline hands each op a log whose vector is already
// reserved (its spares are reused, op after op), so recording allocates
// nothing per chunk, nor per op once the daemon runs; with [trace] record
// = false no op gets a log and the engine records nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/core/clock.h"

namespace gsync {

struct WireEvent {
  Clock::time_point at{};    // sent: when it was issued; arrived: when it was seen here
  Clock::time_point done{};  // sent: when its completion was seen; {} if none comes (a message)
  const char* what = "";     // what it carried: a literal ("partial sum")
  uint32_t chunk = 0;
  int16_t peer = -1;  // the other end, a cluster index
  bool sent = false;  // true: this host -> peer; false: peer -> this host
};

class WireLog {
 public:
  // The most transfers an op keeps. A send's ref rides in 10 bits of its
  // write's cookie (collective/engine_op.h), so at most 1023.
  static constexpr uint32_t kMaxEvents = 512;

  // Empty, for a new op: the memory stays (reserved once).
  void reset() {
    events_.clear();
    dropped_ = 0;
    events_.reserve(kMaxEvents);
  }
  // A transfer: its ref for done() (from 1), or 0 when the log is full
  // and it was only counted.
  uint32_t add(bool sent, int peer, uint32_t chunk, const char* what, Clock::time_point at) {
    if (events_.size() >= kMaxEvents) {
      dropped_++;
      return 0;
    }
    events_.push_back({at, {}, what, chunk, static_cast<int16_t>(peer), sent});
    return static_cast<uint32_t>(events_.size());
  }
  // The send add() returned ref for completed at `at` (ref 0: not kept).
  void done(uint32_t ref, Clock::time_point at) {
    if (ref > 0 && ref <= events_.size()) events_[ref - 1].done = at;
  }
  const std::vector<WireEvent>& events() const { return events_; }
  uint64_t dropped() const { return dropped_; }
  bool reserved() const { return events_.capacity() >= kMaxEvents; }

 private:
  std::vector<WireEvent> events_;
  uint64_t dropped_ = 0;
};

}  // namespace gsync
