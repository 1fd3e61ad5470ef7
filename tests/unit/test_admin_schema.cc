// SPDX-License-Identifier: Apache-2.0
//
// The jobs report's schema (protocol/admin_jobs.h) and the check the
// integration tests run on every jobs reply they fetch
// (tests/util/admin_schema.h): each name once, and a field the schema does
// not name found at its path, while the per-host maps' keys (host ids) are
// let through.
#include <gtest/gtest.h>

#include <set>
#include <string_view>

#include "tests/util/admin_schema.h"

namespace gsync {
namespace {

namespace k = admin::jobs;
using nlohmann::json;

TEST(AdminSchema, EachNameOnce) {
  std::set<std::string_view> seen;
  for (const char* n : k::kAll) EXPECT_TRUE(seen.insert(n).second) << n << " twice";
  for (const char* n : k::kHostMaps) EXPECT_TRUE(seen.count(n)) << n << " not in kAll";
}

TEST(AdminSchema, AFieldOutsideTheSchemaIsFoundAtItsPath) {
  json key = {{k::kKey, 3}, {k::kWorkerClocks, {{"h1", 4}, {"h2", 5}}}, {k::kCheckpoint, nullptr}};
  json reply = {{k::kJobs, json::array({{{k::kJob, "j"}, {k::kParameters, json::array({key})}}})}};
  EXPECT_EQ(test::unknown_jobs_fields(reply), "");
  reply[k::kJobs][0][k::kParameters][0]["clocks"] = 1;
  reply[k::kJobs][0]["world_sizes"] = 2;
  EXPECT_EQ(test::unknown_jobs_fields(reply),
            ".jobs[].parameters[].clocks, .jobs[].world_sizes");
}

}  // namespace
}  // namespace gsync
