// SPDX-License-Identifier: Apache-2.0
//
// An elastic job's world as a rank learns it (gsync_world, docs/membership.md,
// "Elastic jobs"). The daemon answers a kWorld submission once the job has
// a world; the completion's message carries it as one line of text
// ("epoch 8195 world 6 rank 3 local 1 of 2 hosts 3"), which stays readable
// in a log and needs no struct layout shared across versions. Shared by
// libgsync and the daemon; the client trusts its daemon, and still refuses
// a line that does not parse.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gsync::proto {

// The most hosts an elastic job may ask for (a cluster's slots).
constexpr int kMaxElasticHosts = 4096;

struct WorldView {
  uint64_t epoch = 0;
  int32_t world_size = 0, rank = 0, local_rank = 0, local_size = 0, hosts = 0;
};

inline std::string to_text(const WorldView& w) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "epoch %" PRIu64 " world %d rank %d local %d of %d hosts %d",
                w.epoch, w.world_size, w.rank, w.local_rank, w.local_size, w.hosts);
  return buf;
}

inline bool world_from_text(const std::string& text, WorldView* out) {
  WorldView w;
  int used = 0;
  if (std::sscanf(text.c_str(), "epoch %" SCNu64 " world %d rank %d local %d of %d hosts %d%n",
                  &w.epoch, &w.world_size, &w.rank, &w.local_rank, &w.local_size, &w.hosts,
                  &used) != 6 ||
      static_cast<size_t>(used) != text.size())
    return false;
  if (w.world_size < 1 || w.rank < 0 || w.rank >= w.world_size || w.local_size < 1 ||
      w.local_rank < 0 || w.local_rank >= w.local_size || w.hosts < 1 ||
      w.hosts > kMaxElasticHosts)
    return false;
  *out = w;
  return true;
}

}  // namespace gsync::proto
