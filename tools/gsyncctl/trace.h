// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl trace (docs/operations.md, "Traces"): the daemons' recent ops
// (their `ops` reports: each op's ranks' arrivals and its pipeline stages,
// CLOCK_MONOTONIC nanoseconds) as a Chrome trace / Perfetto JSON file. One
// process per daemon; in it a track per rank (an instant when it handed its
// part in), one for the ops (from the first arrival to the end) and one per
// stage (fold, cross, guard, store, ...). Daemons on one machine share the
// clock, so their tracks line up as they are; daemons on several machines
// are drawn each on its own clock (offsets are not estimated yet).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gsync::cli {

struct TraceSource {
  std::string name;        // the process's name: the admin socket, or a host id
  nlohmann::json ops;      // its `ops` reply
};

// job: only its ops ("" for all); seconds > 0: only ops that ended in the
// last that many seconds of their daemon's clock. *ops gets the ops drawn.
nlohmann::json chrome_trace(const std::vector<TraceSource>& sources, const std::string& job,
                            double seconds, size_t* ops);

}  // namespace gsync::cli
