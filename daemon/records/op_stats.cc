// SPDX-License-Identifier: Apache-2.0
#include "daemon/records/op_stats.h"

#include <chrono>

namespace gsync {

void OpLatency::add(double s) {
  size_t b = 0;
  while (b < std::size(kBounds) && s > kBounds[b]) b++;
  counts[b]++;
  sum_s += s;
}

OpLabels op_labels(const OpEnd& e) {
  OpLabels l;
  l.dtype = e.shape.dtype;
  if (e.times) l.codec = e.times->route.codec;
  if (!e.multi_host)
    l.algorithm = "local";
  else if (e.times && e.times->route.algorithm)
    l.algorithm = e.times->route.algorithm;
  else
    l.algorithm = proto::is_ps(e.shape.opcode) ? "ps" : "none";
  return l;
}

void GlobalStats::count(const OpEnd& e) {
  latency[e.shape.opcode].add(std::chrono::duration<double>(e.ended - e.started).count());
  OpCounts& c = by_labels[op_labels(e)];
  if (!e.status) {
    failures_by_code[e.status.code()]++;
    ops_failed++;
    c.failed++;
    return;
  }
  const uint64_t bytes = e.bytes() * static_cast<uint64_t>(e.local_size);
  ops_completed++;
  bytes_reduced += bytes;
  c.completed++;
  c.bytes_reduced += bytes;
  meter.add(bytes, e.ended);
}

}  // namespace gsync
