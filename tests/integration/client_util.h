// SPDX-License-Identifier: Apache-2.0
//
// What the rank processes of the integration tests share: connecting through
// the public C API, deterministic test data, and the reference results
// computed here independently of the daemon's kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "gsync/gsync.h"
#include "tools/common/procs.h"
#include "tools/common/reference.h"

namespace gsync::test {

using tools::ChildResult;
using tools::DaemonProcess;
using tools::admin_query;
using tools::report;
using tools::run_ranks;
using tools::spawn;
using tools::test_value;
using tools::expected;
using tools::elem_size;
using tools::store;
using tools::load;

// In a child: report what failed and return from the rank function.
#define RANK_CHECK(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      ::gsync::test::report(fmt::format("rank check failed at {}:{}: {}: ", __FILE__, __LINE__, \
                                        #cond) +                                \
                            fmt::format(__VA_ARGS__) + "\n");                   \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

inline int connect_rank(const std::string& socket, const std::string& job, int world, int rank,
                        gsync_comm_t** comm, uint64_t arena = 0, uint32_t timeout_ms = 0) {
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.socket_path = socket.c_str();
  cfg.job_id = job.c_str();
  cfg.world_size = world;
  cfg.rank = rank;
  cfg.local_rank = rank;
  cfg.local_size = world;
  cfg.arena_bytes = arena;
  cfg.timeout_ms = timeout_ms;
  return gsync_connect(&cfg, comm);
}

}  // namespace gsync::test
