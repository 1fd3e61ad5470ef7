// SPDX-License-Identifier: Apache-2.0
//
// The end of an op as an event (docs/architecture.md, "An op's end").
// The jobs layer publishes one OpEnd when an op ends - completed, failed,
// timed out, aborted - after it has answered the op's ranks; everything
// that keeps a record of ops subscribes instead of being called from one
// function: the counters and latency histogram (op_stats.h), the history
// (op_history.h), and, in the jobs layer, the job's own counters, its
// straggler books, lease settlement, the parameter keys declared and the
// tombstones of failed ops. Subscribers run in the order they subscribed,
// on the event thread, and must not throw (they record; they decide
// nothing about the op, which has ended).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/status.h"
#include "daemon/pipeline/pipeline.h"
#include "protocol/ops.h"

namespace gsync {

// The job (jobs/job.h) and the op (ops/op.h), for the subscribers above
// this layer; opaque here.
struct Job;
namespace ops {
class Op;
}

// One local rank's part: its global rank and when it handed its part in
// (rank -1: it did not).
struct RankArrival {
  int rank = -1;
  Clock::time_point at{};
};

struct OpEnd {
  std::string_view job;  // the job's id
  proto::OpId id;
  proto::OpShape shape;
  Status status;
  const pipeline::OpTimes* times = nullptr;  // null: it never ran
  Clock::time_point started{}, ended{};      // its first rank's arrival; its end
  std::span<const RankArrival> arrivals;     // by local rank
  int arrived = 0;                           // ranks that handed their part in
  int local_size = 0;
  bool multi_host = false;
  uint64_t world = 0;  // an elastic job's world epoch it was submitted in
  Job* owner = nullptr;
  const ops::Op* op = nullptr;

  bool all_arrived() const { return arrived == local_size; }
  // One rank's tensor, in bytes.
  uint64_t bytes() const { return shape.bytes(); }
};

class OpEnds {
 public:
  using Subscriber = std::function<void(const OpEnd&)>;
  // name: what it records, for a reader of the code and the tests.
  void subscribe(std::string name, Subscriber s) {
    subs_.push_back({std::move(name), std::move(s)});
  }
  void publish(const OpEnd& e) const {
    for (const auto& s : subs_) s.fn(e);
  }
  std::vector<std::string_view> names() const {
    std::vector<std::string_view> out;
    for (const auto& s : subs_) out.push_back(s.name);
    return out;
  }

 private:
  struct Sub {
    std::string name;
    Subscriber fn;
  };
  std::vector<Sub> subs_;
};

}  // namespace gsync
