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
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gsync/gsync.h"
#include "tools/common/procs.h"
#include "tools/common/reference.h"
#include "tests/util/admin_schema.h"

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
using tools::read_byte;
using tools::wait_until;

// The admin socket's reply to cmd as JSON (null if it is not JSON).
inline nlohmann::json admin_json(const std::string& admin, const std::string& cmd) {
  return nlohmann::json::parse(admin_query(admin, cmd), nullptr, false);
}

// How many submissions the daemon has taken from rank `rank` of job, from
// its admin "clients" report: what a test waits on before it makes the next
// thing happen.
inline uint64_t submitted(const std::string& admin, const std::string& job, int rank) {
  nlohmann::json c = admin_json(admin, "clients");
  if (!c.is_object() || !c["clients"].is_array()) return 0;
  for (const auto& s : c["clients"])
    if (s.value("job", "") == job && s.value("rank", -1) == rank) return s.value("ops_submitted", 0);
  return 0;
}

// The daemon's count of failed ops since it started (admin "status"): never
// goes down, unlike a job's, which goes with the job when its ranks leave.
inline int64_t daemon_ops_failed(const std::string& admin) {
  nlohmann::json j = admin_json(admin, "status");
  if (!j.is_object() || !j["ops"].is_object() || !j["ops"]["failed"].is_number()) return 0;
  return j["ops"]["failed"].get<int64_t>();
}

// job's row in the admin "jobs" report (null while the job is not there).
// Every reply is checked against the report's schema on the way
// (tests/util/admin_schema.h): a field the schema does not name fails the
// test.
inline nlohmann::json job_row(const std::string& admin, const std::string& job) {
  nlohmann::json j = admin_json(admin, "jobs");
  if (!j.is_object() || !j["jobs"].is_array()) return nullptr;
  if (std::string unknown = gsync::test::unknown_jobs_fields(j); !unknown.empty())
    ADD_FAILURE() << "the jobs report has fields protocol/admin_jobs.h does not name: " << unknown;
  for (const auto& row : j["jobs"])
    if (row.value("job", "") == job) return row;
  return nullptr;
}

// A counter of job's row in the admin "jobs" report (ops_completed,
// ops_failed, ...); 0 while the job or the field is not there.
inline int64_t job_count(const std::string& admin, const std::string& job,
                         const std::string& field) {
  nlohmann::json row = job_row(admin, job);
  if (row.is_object() && row.contains(field) && row[field].is_number())
    return row[field].get<int64_t>();
  return 0;
}

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

// Connects rank `rank` (local rank `local_rank` of `local_size` on this
// daemon) of job; `set` fills in whatever else the test's job says.
template <class Set>
int connect_with(const std::string& socket, const std::string& job, int world, int rank,
                 int local_rank, int local_size, gsync_comm_t** comm, Set set) {
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.socket_path = socket.c_str();
  cfg.job_id = job.c_str();
  cfg.world_size = world;
  cfg.rank = rank;
  cfg.local_rank = local_rank;
  cfg.local_size = local_size;
  set(cfg);
  return gsync_connect(&cfg, comm);
}

inline int connect_rank(const std::string& socket, const std::string& job, int world, int rank,
                        gsync_comm_t** comm, uint64_t arena = 0, uint32_t timeout_ms = 0) {
  return connect_with(socket, job, world, rank, rank, world, comm, [&](gsync_config_t& cfg) {
    cfg.arena_bytes = arena;
    cfg.timeout_ms = timeout_ms;
  });
}

}  // namespace gsync::test
