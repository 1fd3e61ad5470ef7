// SPDX-License-Identifier: Apache-2.0
#include "daemon/jobs/job.h"

#include <fmt/format.h>

namespace gsync {

std::string JobOp::describe(const std::string& job) const {
  return fmt::format("job {} {} key {} step {}", job, proto::name(shape.opcode), id.key, id.step);
}

bool BspPolicy::ready(const Job& job, const JobOp& op) const {
  return op.arrived == job.local_size;
}

int Job::live_ranks() const {
  int n = 0;
  for (const auto& s : slots)
    if (s.session) n++;
  return n;
}

std::vector<int> Job::live_rank_ids() const {
  std::vector<int> ranks;
  for (const auto& s : slots)
    if (s.session) ranks.push_back(s.session->rank);
  return ranks;
}

const RankSlot* Job::first_dead() const {
  for (const auto& s : slots)
    if (s.dead) return &s;
  return nullptr;
}

const Job::Tombstone* Job::find_tombstone(const OpId& id) const {
  for (const auto& t : tombstones)
    if (t.id == id) return &t;
  return nullptr;
}

}  // namespace gsync
