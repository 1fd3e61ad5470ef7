// SPDX-License-Identifier: Apache-2.0
//
// A real gsyncd and real client processes: every result checked element by
// element against the reference in client_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

void expect_all_ok(const std::vector<ChildResult>& results) {
  for (size_t r = 0; r < results.size(); r++)
    EXPECT_EQ(results[r].code, 0) << "rank " << r << ": " << results[r].output;
}

// One rank: allreduce count elements of dtype/op, zero-copy or staged, check.
int allreduce_rank(const std::string& sock, const std::string& job, int world, int rank,
                   size_t count, int dtype, int op, bool zero_copy, uint64_t step = 0) {
  gsync_comm_t* comm = nullptr;
  size_t bytes = count * elem_size(dtype);
  uint64_t arena = std::max<uint64_t>(bytes + (4 << 20), 64 << 20);
  int rc = connect_rank(sock, job, world, rank, &comm, arena);
  RANK_CHECK(rc == 0, "connect: {} ({})", rc, gsync_last_error());
  void* buf = nullptr;
  std::vector<char> heap;
  if (zero_copy) {
    rc = gsync_alloc(comm, std::max<size_t>(bytes, 1), &buf);
    RANK_CHECK(rc == 0, "alloc {} bytes: {}", bytes, gsync_last_error());
  } else {
    heap.resize(std::max<size_t>(bytes, 1));
    buf = heap.data();
  }
  for (size_t i = 0; i < count; i++) store(buf, dtype, i, test_value(rank, i));
  gsync_request_t* req = nullptr;
  rc = gsync_allreduce(comm, 42, step, buf, count, dtype, op, rank + 1.0, &req);
  RANK_CHECK(rc == 0, "allreduce submit: {}", gsync_last_error());
  rc = gsync_wait(req, 60000);
  RANK_CHECK(rc == 0, "allreduce wait: {} {}", rc, gsync_request_error(req));
  gsync_request_free(req);
  size_t wrong = 0, first_wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (load(buf, dtype, i) != expected(dtype, op, world, i) && wrong++ == 0) first_wrong = i;
  }
  RANK_CHECK(wrong == 0, "{} of {} elements wrong, first at {}: got {} want {}", wrong, count,
             first_wrong, load(buf, dtype, first_wrong), expected(dtype, op, world, first_wrong));
  gsync_close(comm);
  return 0;
}

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, Fp32SumAcrossSizesZeroCopyAndStaged) {
  int world = GetParam();
  DaemonProcess d;
  int round = 0;
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}, size_t{(1 << 20) + 3}}) {
    for (bool zero_copy : {true, false}) {
      std::string job = fmt::format("sizes-{}", round++);
      auto res = run_ranks(world, [&](int r) {
        return allreduce_rank(d.socket(), job, world, r, count, GSYNC_FLOAT32, GSYNC_SUM,
                              zero_copy);
      });
      SCOPED_TRACE(fmt::format("count {} zero_copy {}", count, zero_copy));
      expect_all_ok(res);
    }
  }
  EXPECT_TRUE(d.alive());
}

INSTANTIATE_TEST_SUITE_P(Integration, Ranks, ::testing::Values(2, 4, 8));

TEST(Allreduce, Fp32Sum256MiBFourRanks) {
  DaemonProcess d;
  size_t count = (256u << 20) / 4;
  auto res = run_ranks(4, [&](int r) {
    return allreduce_rank(d.socket(), "big", 4, r, count, GSYNC_FLOAT32, GSYNC_SUM, true);
  }, 300);
  expect_all_ok(res);
}

TEST(Allreduce, EveryDtypeAndOp) {
  DaemonProcess d;
  const int world = 3;
  int step = 0;
  for (int dtype : {GSYNC_FLOAT32, GSYNC_FLOAT16, GSYNC_BFLOAT16, GSYNC_FLOAT64, GSYNC_INT32,
                    GSYNC_UINT8}) {
    for (int op : {GSYNC_SUM, GSYNC_AVG, GSYNC_WEIGHTED_AVG, GSYNC_MIN, GSYNC_MAX}) {
      if (!gsync::tools::defined_op(dtype, op)) continue;
      for (size_t count : {size_t{17}, size_t{300001}}) {
        SCOPED_TRACE(fmt::format("dtype {} op {} count {}", dtype, op, count));
        step++;
        std::string job = fmt::format("dtypes-{}", step);
        auto res = run_ranks(world, [&](int r) {
          return allreduce_rank(d.socket(), job, world, r, count, dtype, op, true,
                                static_cast<uint64_t>(step));
        });
        expect_all_ok(res);
      }
    }
  }
}

TEST(Allreduce, WeightedAverageOnIntegersIsRefusedAsUnsupported) {
  DaemonProcess d;
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "w", 2, r, &comm) == 0, "{}", gsync_last_error());
    int32_t* buf;
    RANK_CHECK(gsync_alloc(comm, 64, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    gsync_request_t* req = nullptr;
    int rc = gsync_allreduce(comm, 1, 0, buf, 16, GSYNC_INT32, GSYNC_WEIGHTED_AVG, 1.0, &req);
    if (rc == 0) rc = gsync_wait(req, 10000);
    RANK_CHECK(rc == GSYNC_ERR_UNSUPPORTED, "got {} ({})", rc, gsync_last_error());
    if (req) gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  expect_all_ok(res);
}

// Ranks submit the same tensors in different orders, all in flight at once.
TEST(Allreduce, RanksSubmitTensorsInDifferentOrders) {
  DaemonProcess d;
  const int world = 4, tensors = 24;
  auto res = run_ranks(world, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "order", world, r, &comm) == 0, "{}", gsync_last_error());
    std::vector<int> order(tensors);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(r) * 7919u));
    std::vector<float*> bufs(tensors);
    std::vector<gsync_request_t*> reqs(tensors);
    for (int t : order) {
      size_t count = 1000 + static_cast<size_t>(t) * 3001;
      RANK_CHECK(gsync_alloc(comm, count * 4, reinterpret_cast<void**>(&bufs[t])) == 0, "alloc");
      for (size_t i = 0; i < count; i++) bufs[t][i] = static_cast<float>(test_value(r, i + t));
      RANK_CHECK(gsync_allreduce(comm, static_cast<uint64_t>(t), 9, bufs[t], count, GSYNC_FLOAT32,
                                 GSYNC_SUM, 0, &reqs[t]) == 0,
                 "submit {}", gsync_last_error());
    }
    for (int t = 0; t < tensors; t++) {
      RANK_CHECK(gsync_wait(reqs[t], 30000) == 0, "tensor {}: {}", t, gsync_request_error(reqs[t]));
      gsync_request_free(reqs[t]);
      size_t count = 1000 + static_cast<size_t>(t) * 3001;
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int q = 0; q < world; q++) want += static_cast<float>(test_value(q, i + t));
        RANK_CHECK(bufs[t][i] == want, "tensor {} element {}: {} != {}", t, i, bufs[t][i], want);
      }
    }
    gsync_close(comm);
    return 0;
  });
  expect_all_ok(res);
}

TEST(Allreduce, TwoJobsAtOnceStayIsolated) {
  DaemonProcess d;
  // Job A has 2 ranks and job B 3: one fork set of 5 processes, both jobs
  // reducing the same keys and steps at the same time, with different data.
  auto res = run_ranks(5, [&](int p) {
    bool a = p < 2;
    int world = a ? 2 : 3, rank = a ? p : p - 2;
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), a ? "job-a" : "job-b", world, rank, &comm) == 0, "{}",
               gsync_last_error());
    for (uint64_t step = 0; step < 20; step++) {
      size_t count = 50000 + step;
      float* buf;
      RANK_CHECK(gsync_alloc(comm, count * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
      for (size_t i = 0; i < count; i++) buf[i] = static_cast<float>(test_value(rank, i));
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 1, step, buf, count, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
                 "{}", gsync_last_error());
      RANK_CHECK(gsync_wait(req, 30000) == 0, "{}", gsync_request_error(req));
      gsync_request_free(req);
      for (size_t i = 0; i < count; i++)
        RANK_CHECK(buf[i] == expected(GSYNC_FLOAT32, GSYNC_SUM, world, i), "step {} elem {}", step, i);
      gsync_free(comm, buf);
    }
    gsync_close(comm);
    return 0;
  });
  expect_all_ok(res);
}

TEST(Broadcast, FromEveryRoot) {
  DaemonProcess d;
  const int world = 4;
  auto res = run_ranks(world, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "bcast", world, r, &comm) == 0, "{}", gsync_last_error());
    for (int root = 0; root < world; root++) {
      size_t count = 777777;
      double* buf;
      RANK_CHECK(gsync_alloc(comm, count * 8, reinterpret_cast<void**>(&buf)) == 0, "alloc");
      for (size_t i = 0; i < count; i++) buf[i] = r == root ? double(i) * 0.5 + root : -1.0;
      gsync_request_t* req;
      RANK_CHECK(gsync_broadcast(comm, 5, static_cast<uint64_t>(root), buf, count, GSYNC_FLOAT64,
                                 root, &req) == 0, "{}", gsync_last_error());
      RANK_CHECK(gsync_wait(req, 30000) == 0, "{}", gsync_request_error(req));
      gsync_request_free(req);
      for (size_t i = 0; i < count; i++)
        RANK_CHECK(buf[i] == double(i) * 0.5 + root, "root {} element {}: {}", root, i, buf[i]);
      gsync_free(comm, buf);
    }
    RANK_CHECK(gsync_barrier(comm, 1, 30000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  });
  expect_all_ok(res);
}

TEST(Admin, StatusJobsAndClientsReportTheJob) {
  DaemonProcess d;
  auto res = run_ranks(2, [&](int r) {
    return allreduce_rank(d.socket(), "admin-job", 2, r, 4096, GSYNC_FLOAT32, GSYNC_SUM, true);
  });
  expect_all_ok(res);
  std::string status = admin_query(d.admin_socket(), "status");
  EXPECT_NE(status.find("\"completed\":1"), std::string::npos) << status;
  EXPECT_NE(status.find("\"bytes_reduced\":32768"), std::string::npos) << status;
  EXPECT_NE(admin_query(d.admin_socket(), "jobs").find("\"jobs\":[]"), std::string::npos)
      << "job should be gone once its ranks left";
  EXPECT_NE(admin_query(d.admin_socket(), "bogus").find("unknown admin command 'bogus'"),
            std::string::npos);
}

using tools::run_command;

// The admin "ops" report: an op waiting for a rank says which, and once
// done its timeline is there (arrivals, the pipeline's stage, the end), in
// the clock every process of the machine shares.
TEST(Admin, OpsShowWhoHasNotArrivedThenTheTimeline) {
  DaemonProcess d;
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "ops-job", 2, r, &comm) == 0, "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    int64_t before = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    if (r == 1) {
      // Rank 0's part is in and the daemon says rank 1's is missing.
      RANK_CHECK(wait_until([&] {
                   auto ops = admin_json(d.admin_socket(), "ops")["in_flight"];
                   return ops.is_array() && ops.size() == 1 && ops[0]["not_arrived"].size() == 1 &&
                          ops[0]["not_arrived"][0]["rank"] == 1;
                 }),
                 "{}", admin_query(d.admin_socket(), "ops"));
    }
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 5, 9, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "submit");
    RANK_CHECK(gsync_wait(req, 10000) == 0, "{}", gsync_request_error(req));
    gsync_request_free(req);
    if (r == 1) {
      auto recent = admin_json(d.admin_socket(), "ops")["recent"];
      RANK_CHECK(recent.is_array() && !recent.empty(), "{}", recent.dump());
      const auto& op = recent.back();
      RANK_CHECK(op["key"] == 5 && op["step"] == 9 && op["code"] == 0, "{}", op.dump());
      RANK_CHECK(op["arrivals"].size() == 2, "{}", op.dump());
      RANK_CHECK(op["stages"].size() == 1 && op["stages"][0]["stage"] == "local", "{}", op.dump());
      int64_t last = std::max(op["arrivals"][0]["ns"].get<int64_t>(), op["arrivals"][1]["ns"].get<int64_t>());
      RANK_CHECK(last > before && op["finished_ns"].get<int64_t>() >= last &&
                     op["stages"][0]["finished_ns"].get<int64_t>() >= last,
                 "times out of order: {}", op.dump());
    }
    gsync_close(comm);
    return 0;
  });
  for (auto& r : res) EXPECT_EQ(r.code, 0) << r.output;
}

// gsyncctl against a live daemon with a live job: the tables and the JSON
// show the job, its ranks and their pids.
TEST(Admin, GsyncctlShowsALiveJob) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  DaemonProcess d;
  int go[2], ready[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(ready), 0);
  std::vector<pid_t> ranks;
  for (int r = 0; r < 2; r++) {
    ranks.push_back(spawn([&, r] {
      gsync_comm_t* comm;
      if (connect_rank(d.socket(), "ctl-job", 2, r, &comm) != 0) return 1;
      float* buf;
      gsync_alloc(comm, 4096, reinterpret_cast<void**>(&buf));
      gsync_request_t* req;
      gsync_allreduce(comm, 1, 0, buf, 1024, GSYNC_FLOAT32, GSYNC_SUM, 0, &req);
      int rc = gsync_wait(req, 10000);
      char c = 'r';
      [[maybe_unused]] ssize_t n = write(ready[1], &c, 1);
      n = read(go[0], &c, 1);  // hold the session open while the parent looks
      gsync_close(comm);
      return rc == 0 ? 0 : 1;
    }));
  }
  // Only the children write "ready" and read "go": a child that dies is EOF
  // here, and a parent that fails releases them, instead of a hang.
  close(ready[1]);
  close(go[0]);
  ASSERT_TRUE(read_byte(ready[0])) << "rank not ready";
  ASSERT_TRUE(read_byte(ready[0])) << "rank not ready";
  std::string base = fmt::format("{} --socket {} ", ctl, d.admin_socket());
  std::string jobs = run_command(base + "jobs");
  std::string clients_json = run_command(base + "--json clients");
  std::string status = run_command(base + "status");
  ASSERT_EQ(write(go[1], "gg", 2), 2);
  for (pid_t p : ranks) {
    int st;
    waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  EXPECT_NE(jobs.find("ctl-job"), std::string::npos) << jobs;
  EXPECT_NE(clients_json.find(fmt::format("\"pid\": {}", ranks[1])), std::string::npos)
      << clients_json;
  EXPECT_NE(status.find("1 completed"), std::string::npos) << status;
  EXPECT_NE(status.find("clients:        2"), std::string::npos) << status;
}

}  // namespace
}  // namespace gsync::test
