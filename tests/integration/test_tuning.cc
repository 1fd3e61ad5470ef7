// SPDX-License-Identifier: Apache-2.0
//
// Choosing the plan (docs/algorithms.md, "Choosing per job" and "Tuning")
// on real daemons: a job's own algorithm and chunk size are what its ops
// run with on every host; ranks that disagree are refused (one host) or
// fail the op naming both plans (two hosts), never mixing them; a tuning
// table loaded with gsyncctl plans the jobs created after it and not the
// ones running, survives a restart of the daemon, and a bad or unwritable
// table is refused with the old one left in force.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using tools::run_command;

int connect_planned(const std::string& socket, const std::string& job, int world, int rank,
                    int local_rank, int local_size, const char* algo, uint64_t chunk,
                    gsync_comm_t** comm) {
  return connect_with(socket, job, world, rank, local_rank, local_size, comm,
                      [&](gsync_config_t& cfg) {
                        cfg.timeout_ms = 20000;
                        cfg.algorithm = algo;
                        cfg.chunk_bytes = chunk;
                      });
}

// One rank's allreduce of n floats (its rank + 1 everywhere) at step s:
// its status, and the error text when it failed.
int allreduce_once(gsync_comm_t* comm, std::vector<float>* buf, uint64_t s, std::string* err) {
  gsync_request_t* req = nullptr;
  int rc = gsync_allreduce(comm, 3, s, buf->data(), buf->size(), GSYNC_FLOAT32, GSYNC_SUM, 0, &req);
  if (rc != 0) {
    *err = gsync_last_error();
    return rc;
  }
  rc = gsync_wait(req, 30000);
  *err = gsync_request_error(req);
  gsync_request_free(req);
  return rc;
}

// The plans of job's recent ops on a daemon (gsyncctl ops), by step.
std::map<uint64_t, std::string> plans_of(const std::string& admin, const std::string& job) {
  std::map<uint64_t, std::string> out;
  nlohmann::json ops = admin_json(admin, "ops");
  if (!ops.is_object() || !ops["recent"].is_array()) return out;
  for (const auto& e : ops["recent"])
    if (e.value("job", "") == job) out[e.value("step", uint64_t{0})] = e.value("plan", "");
  return out;
}

TEST(JobPlan, TheJobsAlgorithmAndChunkRunOnEveryHost) {
  auto bed = make_bed({2}, "auto", 20000);
  ASSERT_TRUE(bed);
  const size_t n = 1 << 18;  // 1 MiB: the built-in rule would say ring
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_planned(bed->socket(r), "chosen", 2, r, 0, 1, "doubling", 65536, &comm) == 0,
               "{}", gsync_last_error());
    std::vector<float> buf(n, float(r + 1));
    std::string err;
    RANK_CHECK(allreduce_once(comm, &buf, 0, &err) == 0, "{}", err);
    for (size_t i = 0; i < n; i += 4099) RANK_CHECK(buf[i] == 3.0f, "element {}: {}", i, buf[i]);
    RANK_CHECK(gsync_barrier(comm, 1, 20000) == 0, "{}", gsync_last_error());
    gsync_close(comm);
    return 0;
  });
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
  for (int h = 0; h < 2; h++) {
    auto plans = plans_of(bed->admin_socket(h), "chosen");
    ASSERT_TRUE(plans.count(0)) << admin_query(bed->admin_socket(h), "ops");
    EXPECT_EQ(plans[0], "doubling, 16 chunks of 65536 bytes; job") << "host " << h;
  }
}

TEST(JobPlan, RanksThatDisagreeAreRefusedOrFailTheOpNamingBothPlans) {
  // On one host: the second rank is refused at connect.
  DaemonProcess d;
  gsync_comm_t *a = nullptr, *b = nullptr;
  ASSERT_EQ(connect_planned(d.socket(), "mixed", 2, 0, 0, 2, "ring", 0, &a), 0) << gsync_last_error();
  EXPECT_EQ(connect_planned(d.socket(), "mixed", 2, 1, 1, 2, "direct", 0, &b), GSYNC_ERR_REFUSED);
  EXPECT_NE(std::string(gsync_last_error()).find("chose the plan 'ring', but rank 1 says 'direct'"),
            std::string::npos)
      << gsync_last_error();
  EXPECT_EQ(connect_planned(d.socket(), "mixed", 2, 1, 1, 2, "fastest", 0, &b), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("'fastest' is not auto, ring"), std::string::npos)
      << gsync_last_error();
  EXPECT_EQ(connect_planned(d.socket(), "mixed", 2, 1, 1, 2, "ring", 5000, &b), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("not a multiple of 4096"), std::string::npos)
      << gsync_last_error();
  gsync_close(a);

  // On two hosts: each daemon admits its rank; the op fails on both,
  // naming both plans, and the next job on the same daemons is fine.
  auto bed = make_bed({2}, "auto", 20000);
  ASSERT_TRUE(bed);
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_planned(bed->socket(r), "split", 2, r, 0, 1, r ? "direct" : "ring", 0,
                               &comm) == 0,
               "{}", gsync_last_error());
    std::vector<float> buf(1 << 16, 1.0f);
    std::string err;
    int rc = allreduce_once(comm, &buf, 0, &err);
    RANK_CHECK(rc == GSYNC_ERR_MISMATCH, "got {}: {}", rc, err);
    RANK_CHECK(err.find("ring") != std::string::npos && err.find("direct") != std::string::npos,
               "{}", err);
    gsync_close(comm);
    RANK_CHECK(connect_planned(bed->socket(r), "agreed", 2, r, 0, 1, "ring", 0, &comm) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(allreduce_once(comm, &buf, 0, &err) == 0, "{}", err);
    RANK_CHECK(buf[0] == 2.0f, "{}", buf[0]);
    gsync_close(comm);
    return 0;
  });
  for (auto& c : res) EXPECT_EQ(c.code, 0) << c.output;
}

// A table for the bed's two hosts: doubling up to 64 KiB, ring in 256 KiB
// chunks for 4 MiB.
std::string table_for(const testbed::Testbed& bed) {
  return fmt::format(R"({{"format": 1, "entries": [
    {{"hosts": ["{0}", "{1}"], "bytes": 65536, "algorithm": "doubling", "us": 50}},
    {{"hosts": ["{0}", "{1}"], "bytes": 4194304, "algorithm": "ring", "chunk_bytes": 262144}}]}})",
                     bed.host_id(0), bed.host_id(1));
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Job `job` on the bed's two hosts: one allreduce of each size, step by step.
int run_job(const testbed::Testbed& bed, const std::string& job, int r, gsync_comm_t** keep = nullptr) {
  gsync_comm_t* comm;
  RANK_CHECK(connect_planned(bed.socket(r), job, 2, r, 0, 1, nullptr, 0, &comm) == 0, "{}",
             gsync_last_error());
  uint64_t step = 0;
  for (size_t n : {size_t(1) << 14, size_t(1) << 20}) {
    std::vector<float> buf(n, 1.0f);
    std::string err;
    RANK_CHECK(allreduce_once(comm, &buf, step++, &err) == 0, "{}", err);
    RANK_CHECK(buf[n - 1] == 2.0f, "{}", buf[n - 1]);
  }
  if (keep) *keep = comm;
  else gsync_close(comm);
  return 0;
}

TEST(Tuning, ALoadedTablePlansNewJobsOnlyAndOutlivesARestart) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  auto bed = make_bed({2}, "auto", 20000);
  ASSERT_TRUE(bed);
  const std::string sockets = bed->admin_socket(0) + " " + bed->admin_socket(1);
  const std::string file = bed->dir() + "/table.json";
  write(file, table_for(*bed));
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* before = nullptr;
    if (run_job(*bed, "before", r, &before) != 0) return 1;
    // Both hosts' ranks wait here until the table is in (rank 0 loads it).
    if (r == 0) {
      std::string out = run_command(fmt::format("{} tune load {} {} 2>&1", ctl, file, sockets));
      RANK_CHECK(out.find("loaded 2 entries") != std::string::npos, "{}", out);
    }
    RANK_CHECK(gsync_barrier(before, 9, 20000) == 0, "{}", gsync_last_error());
    // The running job keeps the rule; a new one plans with the table.
    std::vector<float> buf(1 << 14, 1.0f);
    std::string err;
    RANK_CHECK(allreduce_once(before, &buf, 2, &err) == 0, "{}", err);
    gsync_close(before);
    return run_job(*bed, "after", r);
  });
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
  for (int h = 0; h < 2; h++) {
    auto old_plans = plans_of(bed->admin_socket(h), "before");
    auto new_plans = plans_of(bed->admin_socket(h), "after");
    EXPECT_EQ(old_plans[2], "direct (eager), 1 chunk of 65536 bytes; rule") << "host " << h;
    // What was done: the 64 KiB tensor as one chunk of its own size (the
    // chunk size, doubling's own rule of 256 KiB, is larger; issue #38,
    // item 8).
    EXPECT_EQ(new_plans[0], "doubling (eager), 1 chunk of 65536 bytes; tuned") << "host " << h;
    EXPECT_EQ(new_plans[1], "ring, 16 chunks of 262144 bytes; tuned") << "host " << h;
  }
  std::string shown = run_command(fmt::format("{} -s {} status", ctl, bed->admin_socket(1)));
  EXPECT_NE(shown.find("doubling"), std::string::npos) << shown;
  EXPECT_NE(shown.find("256.0 KiB"), std::string::npos) << shown;

  // A restart keeps it: the daemon reads its own copy.
  bed->kill_daemon(1);
  ASSERT_TRUE(bed->start_daemon(1));
  nlohmann::json status = admin_json(bed->admin_socket(1), "status");
  EXPECT_EQ(status["tuning"]["entries"].size(), 2u) << status["tuning"].dump();

  // Refused, naming what is wrong; the table in force stays.
  write(file, R"({"format": 1, "entries": [{"hosts": ["x"], "bytes": 8, "algorithm": "best"}]})");
  std::string out = run_command(fmt::format("{} tune load {} {} 2>&1; echo rc=$?", ctl, file,
                                            bed->admin_socket(0)));
  EXPECT_NE(out.find("entry 0: \"algorithm\" must be"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
  EXPECT_EQ(admin_json(bed->admin_socket(0), "status")["tuning"]["entries"].size(), 2u);
  // Cleared: new jobs plan by the rule again, on both hosts.
  out = run_command(fmt::format("{} tune clear {} 2>&1", ctl, sockets));
  EXPECT_NE(out.find("cleared"), std::string::npos) << out;
  res = run_ranks(2, [&](int r) { return run_job(*bed, "cleared", r); });
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(plans_of(bed->admin_socket(0), "cleared")[1],
            "ring, 16 chunks of 262144 bytes; rule");
}

// A table on one host only (loaded there alone): the hosts' jobs announce
// different tables, so both plan by the rule and the ops run.
TEST(Tuning, HostsWhoseTablesDifferPlanByTheRule) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  auto bed = make_bed({2}, "auto", 20000);
  ASSERT_TRUE(bed);
  const std::string file = bed->dir() + "/table.json";
  write(file, table_for(*bed));
  std::string out = run_command(fmt::format("{} -s {} tune load {} 2>&1", ctl, bed->admin_socket(0), file));
  ASSERT_NE(out.find("loaded 2 entries"), std::string::npos) << out;
  auto res = run_ranks(2, [&](int r) { return run_job(*bed, "half", r); });
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(plans_of(bed->admin_socket(0), "half")[1],
            "ring, 16 chunks of 262144 bytes; rule (the hosts' tuning tables differ)");
  EXPECT_EQ(plans_of(bed->admin_socket(1), "half")[1], "ring, 16 chunks of 262144 bytes; rule");
}

// Where the daemon cannot keep a new table (its folder is a file), the
// load fails saying so and the table in force does not change.
TEST(Tuning, ATableThatCannotBeKeptIsNotLoaded) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  char dir[] = "/tmp/gsync-tuning-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string not_a_dir = std::string(dir) + "/file";
  DaemonProcess d({"--tuning-table", not_a_dir + "/tuning.json"});
  write(not_a_dir, "x");  // after the start, which found no table (and that is fine)
  const std::string file = std::string(dir) + "/t.json";
  write(file, R"({"format": 1, "entries": [{"hosts": ["a"], "bytes": 8, "algorithm": "tree"}]})");
  std::string out = run_command(fmt::format("{} -s {} tune load {} 2>&1", ctl, d.admin_socket(), file));
  EXPECT_NE(out.find("cannot write it"), std::string::npos) << out;
  EXPECT_NE(out.find("the table in force is unchanged"), std::string::npos) << out;
  EXPECT_TRUE(admin_json(d.admin_socket(), "status")["tuning"]["entries"].empty());
  run_command(fmt::format("rm -rf {}", dir));
}

}  // namespace
}  // namespace gsync::test
