// SPDX-License-Identifier: Apache-2.0
//
// What the daemon counts of the ops that ended, over all jobs: completed
// and failed, bytes reduced, by label, the latency histogram and failures
// by error code - the metrics' gsync_ops_total, gsync_reduced_bytes_total,
// gsync_op_duration_seconds and gsync_op_failures_total (gsyncd_metrics.cc;
// docs/operations.md, "Metrics"). A subscriber of OpEnds (op_end.h).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <string_view>

#include "daemon/core/meter.h"
#include "daemon/records/op_end.h"
#include "protocol/ops.h"

namespace gsync {

// How long ops took from their first rank's submission to their end, by
// opcode (the metrics' gsync_op_duration_seconds).
struct OpLatency {
  static constexpr double kBounds[] = {1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03,
                                       0.1,  0.3,  1,    3,    10,   30};
  static constexpr size_t kBuckets = std::size(kBounds) + 1;  // the last: above them all
  uint64_t counts[kBuckets] = {};
  double sum_s = 0;
  void add(double s);
};

// The labels of gsync_ops_total and gsync_reduced_bytes_total: an op's
// dtype, the cross-host algorithm of its plan ("local": a job on this host
// alone; "ps": a parameter server's push or pull; "none": an op of several
// hosts that ended before it had a plan) and the codec it crossed between
// hosts in. Each a name from an enum: the label sets are bounded.
struct OpLabels {
  proto::DType dtype = proto::DType::kF32;
  std::string_view algorithm = "local";
  proto::Codec codec = proto::Codec::kNone;
  auto operator<=>(const OpLabels&) const = default;
};
OpLabels op_labels(const OpEnd& e);

struct OpCounts {
  uint64_t completed = 0, failed = 0, bytes_reduced = 0;
};

struct GlobalStats {
  uint64_t ops_completed = 0, ops_failed = 0, bytes_reduced = 0;
  std::map<OpLabels, OpCounts> by_labels;  // the same ops, by their labels
  RateMeter meter;
  std::map<proto::Opcode, OpLatency> latency;
  std::map<int, uint64_t> failures_by_code;  // GSYNC_ERR_* -> ops that ended with it

  // The subscriber: counts one op that ended. Bytes reduced: one rank's
  // tensor times the job's local ranks.
  void count(const OpEnd& e);
};

}  // namespace gsync
