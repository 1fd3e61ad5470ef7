// SPDX-License-Identifier: Apache-2.0
//
// A job's checkpoint sets (docs/fault-tolerance.md, "Checkpoint sets").
// Checkpoints are written per shard of each key; a job of several keys can
// resume only at a clock that every key holds whole on every host. So each
// file names its set - the keys of its job this host checkpointed at that
// clock (storage::CheckpointSet in its header) - and a clock is whole on a
// host when every key of its set has a file of it there that loads. At
// declaration a host lists, per key, only the clocks whole here (the
// newest first), and the hosts agree on the newest one every list holds
// (checkpoints.cc, resume): every key of the job then agrees on the same
// clock, whatever a crash or a damaged file left. While a job trains, a
// host tells the job's other hosts each set that becomes whole here
// (PsCheckpoint, kind 1), and a shard's files go only once `keep` newer
// sets are whole on every host (keep_from). The service's side of it is in
// checkpoints.cc; the rule is here, pure.
#include "daemon/ps/checkpoint_sets.h"

#include <algorithm>

namespace gsync::ps {

std::vector<uint64_t> whole_everywhere(const std::vector<std::set<uint64_t>>& whole_by_host) {
  std::vector<uint64_t> out;
  if (whole_by_host.empty()) return out;
  for (auto it = whole_by_host[0].rbegin(); it != whole_by_host[0].rend(); ++it)
    if (std::all_of(whole_by_host.begin() + 1, whole_by_host.end(),
                    [c = *it](const std::set<uint64_t>& s) { return s.count(c) > 0; }))
      out.push_back(*it);
  return out;
}

uint64_t keep_from(const std::vector<std::set<uint64_t>>& whole_by_host, int keep) {
  const std::vector<uint64_t> all = whole_everywhere(whole_by_host);
  if (all.empty()) return 0;
  return all[std::min(all.size(), size_t(std::max(keep, 1))) - 1];
}

}  // namespace gsync::ps
