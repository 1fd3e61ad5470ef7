// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl trace's one clock (docs/operations.md, "Traces"). Every daemon
// times its ops on its machine's CLOCK_MONOTONIC, which machines do not
// share; the first daemon's `probe` (daemon/cluster/probe.h) measures each
// peer's CLOCK_REALTIME against its own by the midpoint method, and each
// daemon's `ops` reply says its CLOCK_REALTIME and CLOCK_MONOTONIC at one
// moment (realtime_ns, now_ns). Together they put another daemon's time t
// on the first one's monotonic clock:
//
//   t + (realtime_i - now_i) - offset_i - (realtime_0 - now_0)
//
// (offset_i: how far host i's wall clock runs ahead of the first's), good
// to the probe's uncertainty (half the fastest ping's round trip). On one
// machine the two differences are equal and the offset about 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/gsyncctl/trace.h"

namespace gsync::cli {

// How one daemon's times were put on the first daemon's clock.
struct ClockShift {
  bool applied = false;  // false: drawn on its own clock
  int64_t shift_ns = 0;  // added to each of its times
  std::string host;      // its host id ("" when it has none)
  std::string how;       // the figures it came from, or why there is no shift
  double offset_us = 0, uncertainty_us = 0;  // the probe's, when applied
};

// Whether the trace needs the first daemon's probe: another daemon is a
// different host of a cluster.
bool needs_probe(const std::vector<TraceSource>& sources);

// One shift per source, from every source's `ops` reply and the first
// one's `probe` reply (null when not asked; an {"error": ...} when it
// failed): the first is the reference (shift 0).
std::vector<ClockShift> clock_shifts(const std::vector<TraceSource>& sources,
                                     const nlohmann::json& probe);

// The trace file's "metadata" for them: the reference and each daemon's
// shift and how it was found.
nlohmann::json clock_metadata(const std::vector<TraceSource>& sources,
                              const std::vector<ClockShift>& shifts);

// A line per daemon after the first, for the terminal ("" for one daemon).
std::string clock_summary(const std::vector<TraceSource>& sources,
                          const std::vector<ClockShift>& shifts);

}  // namespace gsync::cli
