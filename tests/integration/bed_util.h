// SPDX-License-Identifier: Apache-2.0
//
// What the multi-host integration tests share: a test bed of racks of the
// given sizes (tools/testbed), and where each global rank runs on it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gsync/gsync.h"
#include "tools/testbed/testbed.h"

namespace gsync::test {

// A test bed with racks of these sizes, daemons with this algorithm and op
// timeout (and extra arguments); null, with a test failure, if it cannot
// be built.
inline std::unique_ptr<testbed::Testbed> make_bed(const std::vector<int>& racks,
                                                  const std::string& algo, int op_timeout_ms,
                                                  std::vector<std::string> extra = {}) {
  testbed::Options o;
  o.rack_sizes = racks;
  o.log_level = "info";
  o.daemon_args = {"--op-timeout-ms", std::to_string(op_timeout_ms), "--algo",
                   algo.empty() ? "auto" : algo};
  o.daemon_args.insert(o.daemon_args.end(), extra.begin(), extra.end());
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  EXPECT_TRUE(st) << st.message();
  return bed;
}

// Rank placement: global rank -> (host, local rank, local size).
struct Place {
  int host, local_rank, local_size;
};
inline std::vector<Place> places(const std::vector<int>& per_host) {
  std::vector<Place> out;
  for (size_t h = 0; h < per_host.size(); h++)
    for (int k = 0; k < per_host[h]; k++) out.push_back({int(h), k, per_host[h]});
  return out;
}

// Connects global rank `rank` of job to its host's daemon, as p places it;
// `set` fills in whatever else the test's job says.
template <class Set>
int connect_place_with(const testbed::Testbed& bed, const std::string& job,
                       const std::vector<Place>& p, int rank, gsync_comm_t** comm, Set set) {
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  std::string sock = bed.socket(p[size_t(rank)].host);
  cfg.socket_path = sock.c_str();
  cfg.job_id = job.c_str();
  cfg.world_size = static_cast<int>(p.size());
  cfg.rank = rank;
  cfg.local_rank = p[size_t(rank)].local_rank;
  cfg.local_size = p[size_t(rank)].local_size;
  set(cfg);
  return gsync_connect(&cfg, comm);
}

// The same with the job's arena, timeout and sync mode (the parameter
// server's tests).
inline int connect_place(const testbed::Testbed& bed, const std::string& job,
                         const std::vector<Place>& p, int rank, gsync_comm_t** comm,
                         uint64_t arena = 0, uint32_t timeout_ms = 0,
                         int32_t sync_mode = GSYNC_SYNC_BSP, uint32_t staleness = 0) {
  return connect_place_with(bed, job, p, rank, comm, [&](gsync_config_t& cfg) {
    cfg.arena_bytes = arena;
    cfg.timeout_ms = timeout_ms;
    cfg.sync_mode = sync_mode;
    cfg.staleness = staleness;
  });
}

}  // namespace gsync::test
