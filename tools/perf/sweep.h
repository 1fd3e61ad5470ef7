// SPDX-License-Identifier: Apache-2.0
//
// What the size sweep's two halves share: sweep.cc runs the ranks and turns
// their reports into rows, sweep_print.cc prints the rows (perf.h's
// run_sweep). Internal to gsync-perf's sweep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/common/procs.h"
#include "tools/perf/perf.h"

namespace gsync::perf {

// The runs of each size: the allreduce once per codec and, with --ps, a
// parameter server's push_pull (which takes no codec: codec 0 is "none").
struct Variant {
  bool push_pull = false;
  size_t codec = 0;
  bool reproducible = false;  // with the uncompressed codec
};

std::vector<Variant> variants_of(const Options& o);

// Per rank, its reports of the rows it finished, as numbers (collect()).
using Reports = std::vector<std::vector<std::vector<double>>>;

// One row of the sweep (a size, a codec) over all ranks.
struct SweepRow {
  double us = 0;       // median over samples of the slowest rank's time per op
  uint64_t wrong = 0;  // elements wrong (for a codec: all, if its bound was broken)
  double rel_error = 0;  // the worst rank's relative error (a codec's first op)
  bool same_bits = true;  // every rank got the same bits
  double wire = 0, logical = 0;  // bytes per host on the compressed hop, one op
  int reported = 0;  // ranks that finished the row (and checked its first op)
  double cpu_s = 0;  // ranks' and daemons' CPU over the samples; -1: a daemon's unknown
  double cpu_ranks = 0, cpu_daemons = 0;  // its two parts
};

// The reports' fields: bytes, codec, wrong, error, hash hi, hash lo, wire,
// logical, rank cpu, daemon cpu, then the samples' times.
constexpr size_t kFirstTime = 10;

// Row r (size x variants + variant) of every rank's reports.
SweepRow sweep_row(const Options& o, const Reports& rows, size_t r, int samples);

// The sweep's rank processes over these sizes, each reporting a "size"
// line per row.
std::vector<tools::ChildResult> run_sweep_ranks(const Options& o,
                                                const std::vector<uint64_t>& sizes);

}  // namespace gsync::perf
