// SPDX-License-Identifier: Apache-2.0
#include "daemon/jobs/job.h"

#include <fmt/format.h>

namespace gsync {

bool BspPolicy::ready(const Job& job, const ops::Op& op) const {
  if (op.arrived() != job.expected_ranks()) return false;
  return !job.leasing || !proto::is_push(op.shape().opcode) || job.clock_pushed(op.id().step);
}

int Job::expected_ranks() const {
  int n = local_size;
  for (const auto& s : slots)
    if (s.departed) n--;
  return n;
}

bool Job::clock_pushed(uint64_t clock) const {
  auto it = clock_pushes.find(clock);
  if (it == clock_pushes.end() || ps_keys.empty()) return false;
  for (size_t l = 0; l < slots.size(); l++)
    if (!slots[l].departed && it->second[l] < ps_keys.size()) return false;
  return true;
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
    if (t.id == id && t.world == world_epoch()) return &t;
  return nullptr;
}

}  // namespace gsync
