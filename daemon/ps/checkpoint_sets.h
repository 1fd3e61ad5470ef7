// SPDX-License-Identifier: Apache-2.0
//
// Which checkpoint files a job keeps (docs/fault-tolerance.md, "Checkpoint
// sets"): pure, so that its rule is tested alone (tests/unit).
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace gsync::ps {

// The sets whole on every host (the clocks in every host's list), newest
// first.
std::vector<uint64_t> whole_everywhere(const std::vector<std::set<uint64_t>>& whole_by_host);

// The oldest clock whose files a shard keeps: that of the keep-th newest
// set whole on every host, or the oldest such set while there are fewer;
// 0 (nothing old goes) while no set is whole everywhere. A set whole on
// some hosts only never lets an older whole one go.
uint64_t keep_from(const std::vector<std::set<uint64_t>>& whole_by_host, int keep);

}  // namespace gsync::ps
