// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl trace (docs/operations.md, "Traces"): the daemons' recent ops
// (their `ops` reports: each op's ranks' arrivals and its pipeline stages,
// CLOCK_MONOTONIC nanoseconds) as a Chrome trace / Perfetto JSON file. One
// process per daemon; in it a track per rank (an instant when it handed its
// part in), one for the ops (from the first arrival to the end), one per
// stage (fold, cross, guard, store, ...) and one per peer link ("h1 -> h2":
// each chunk's transfer, from when it was issued to when its completion or
// its arrival was seen). Daemons on other machines are put on the first
// daemon's clock with the offsets of its probe (trace_clock.h).
//
// recent_ops() is the one reading of an `ops` reply's recent timelines;
// gsyncctl report (report.h) draws the same ops.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gsync::cli {

struct TraceSource {
  std::string name;    // the process's name: the admin socket, or a host id
  nlohmann::json ops;  // its `ops` reply
};

// One finished op of an `ops` reply, times in its daemon's CLOCK_MONOTONIC
// nanoseconds (0 where the reply had none).
struct OpTimeline {
  struct Arrival {
    int64_t rank = -1;
    int64_t ns = 0;
  };
  struct Stage {
    std::string stage;
    int64_t begun_ns = 0, finished_ns = 0;
    bool valid() const { return begun_ns > 0 && finished_ns >= begun_ns; }
  };
  // A transfer on a peer link: on a link from this daemon's host, a send
  // (issued at ns, its completion seen at done_ns; 0 for a message, which
  // has none); on a link to it, an arrival (seen at ns).
  struct WireChunk {
    uint64_t chunk = 0;
    std::string what;  // "partial sum", "final sum", "block maxima"
    int64_t ns = 0, done_ns = 0;
  };
  struct Link {
    std::string from, to;  // host ids
    std::vector<WireChunk> chunks;  // in the order they happened
  };
  std::string job, op;
  uint64_t key = 0, step = 0, bytes = 0;
  int code = 0;
  std::string error;
  int64_t begin_ns = 0;  // the first arrival (the end when none came)
  int64_t end_ns = 0;
  std::vector<Arrival> arrivals;  // in the reply's order
  std::vector<Stage> stages;
  std::vector<Link> links;
  uint64_t wire_dropped = 0;  // transfers past the daemon's bound, counted only
  // "allreduce key 7 step 3"
  std::string what() const;
};

// The recent ops of one `ops` reply, oldest first. job: only its ops (""
// for all); seconds > 0: only ops that ended in the last that many seconds
// of the daemon's clock (the reply's now_ns).
std::vector<OpTimeline> recent_ops(const nlohmann::json& ops_reply, const std::string& job,
                                   double seconds);

struct ClockShift;

// job: only its ops ("" for all); seconds > 0: only ops that ended in the
// last that many seconds of their daemon's clock. *ops gets the ops drawn.
// shifts: one per source (trace_clock.h), added to its times and named in
// the file's metadata; empty: every daemon on its own clock.
nlohmann::json chrome_trace(const std::vector<TraceSource>& sources, const std::string& job,
                            double seconds, size_t* ops,
                            const std::vector<ClockShift>& shifts = {});

}  // namespace gsync::cli
