// SPDX-License-Identifier: Apache-2.0
//
// The tuning table: for a set of hosts and a band of tensor sizes, the
// cross-host algorithm and chunk size that measured fastest
// (docs/algorithms.md, "Tuning"). `gsync-perf --tune` measures it and loads
// it into every daemon (`gsyncctl tune load`); the daemon keeps it in its
// state directory. Every host of an op must plan the op alike, so a table
// only changes the plans of jobs that start after it is loaded: a job takes
// the table in force when it is created and keeps it (its results' bits do
// not change within the job), and daemons that disagree fail the op naming
// both plans (collective/op_checks.cc), never mixing them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "daemon/core/status.h"
#include "protocol/plan_choice.h"

namespace gsync::tuning {

// A table's file holds at most this many entries (a few per size band and
// host set is what the tuner writes; this only bounds what a file costs).
constexpr size_t kMaxEntries = 4096;
constexpr size_t kMaxFileBytes = 4 << 20;

// ceil(log2(bytes)): 4 KiB is band 12, 256 MiB band 28; 0 and 1 are band 0.
uint8_t size_band(uint64_t bytes);

struct TuneEntry {
  std::vector<std::string> hosts;  // the op's hosts by id, in cluster order
  uint8_t band = 0;
  proto::PlanChoice choice;  // algo set; chunk_bytes 0: the algorithm's own rule
  double us = 0;             // what it measured, per op (informational)
};

class TuneTable {
 public:
  // The file's text: {"format": 1, "entries": [{"hosts": [...], "bytes": N,
  // "algorithm": "ring", "chunk_bytes": N, "us": T}, ...]}. An error names
  // the entry and field; it never quotes the text (the admin may point the
  // daemon at any file it can read).
  static Status parse(std::string_view text, TuneTable* out);
  std::string to_json() const;
  nlohmann::json report() const;  // gsyncctl status

  // The tuned plan for an op of `bytes` among `hosts`: the entry of the
  // nearest size band for exactly these hosts (the smaller band on a tie),
  // or nothing when the table has none for them.
  std::optional<proto::PlanChoice> lookup(const std::vector<std::string>& hosts,
                                          uint64_t bytes) const;
  // 24 bits of the table's text's hash, never 0 (0 means "no table"), for
  // daemons to tell whether their jobs plan with the same table.
  uint32_t digest() const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

 private:
  std::vector<TuneEntry> entries_;  // sorted by (hosts, band), one per pair
};

}  // namespace gsync::tuning
