// SPDX-License-Identifier: Apache-2.0
//
// Elastic jobs on one daemon without a cluster (docs/membership.md,
// "Elastic jobs"): the world is this host, formed once every local rank is
// connected. What a rank sees of the contract: an op before it asked for
// the world is refused naming gsync_world; the world numbers the ranks and
// GSYNC_AVG divides by it; the parameter server is refused; a rank that
// dies takes the host out of the world until its slot is taken again, and
// then a new world forms. A fixed job's gsync_world is its own shape.
// Shapes that cannot be are refused at connect, naming the field.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

int connect_elastic(const DaemonProcess& d, const std::string& job, int local_rank,
                    int local_size, gsync_comm_t** comm, int min_hosts = 1) {
  return connect_with(d.socket(), job, 0, 0, local_rank, local_size, comm,
                      [&](gsync_config_t& cfg) { cfg.min_hosts = min_hosts; });
}

// One allreduce of 64 floats of `value` (key 1): its code, the result in *out.
int allreduce_of(gsync_comm_t* comm, uint64_t step, float value, int op, float* out,
                 std::string* err) {
  std::vector<float> buf(64, value);
  gsync_request_t* req;
  if (int rc = gsync_allreduce(comm, 1, step, buf.data(), buf.size(), GSYNC_FLOAT32, op, 0, &req))
    return rc;
  int rc = gsync_wait(req, 20000);
  *err = gsync_request_error(req);
  gsync_request_free(req);
  *out = buf[5];
  return rc;
}

TEST(Elastic, OneHostsWorldNumbersItsRanksAndFormsAgainAfterADeath) {
  DaemonProcess d;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  // The first world, two ranks: ops refused until the world is asked for,
  // then numbered by it; the parameter server refused.
  auto first_world = [&](gsync_comm_t* comm, int local, gsync_world_t* w) {
    float v = 0;
    std::string err;
    RANK_CHECK(allreduce_of(comm, 0, 1, GSYNC_SUM, &v, &err) == GSYNC_ERR_WORLD_CHANGED, "{}",
               err);
    RANK_CHECK(err.find("call gsync_world") != std::string::npos, "{}", err);
    RANK_CHECK(gsync_world(comm, w, 20000) == 0, "{}", gsync_last_error());
    RANK_CHECK(w->world_size == 2 && w->hosts == 1 && w->rank == local && w->local_size == 2 &&
                   w->epoch != 0,
               "world {} hosts {} rank {} epoch {}", w->world_size, w->hosts, w->rank, w->epoch);
    RANK_CHECK(allreduce_of(comm, 1, float(w->rank + 1), GSYNC_SUM, &v, &err) == 0, "{}", err);
    RANK_CHECK(v == 3.0f, "sum {}", v);
    RANK_CHECK(allreduce_of(comm, 2, float(w->rank + 1), GSYNC_AVG, &v, &err) == 0, "{}", err);
    RANK_CHECK(v == 1.5f, "average {}", v);
    // A broadcast's root is a rank of the world (the library learned it
    // from gsync_world); from a buffer of the caller's (the copy path, where
    // only the root's data goes in).
    std::vector<int32_t> b(32, w->rank == 1 ? 77 : -1);
    gsync_request_t* breq;
    RANK_CHECK(gsync_broadcast(comm, 2, 1, b.data(), b.size(), GSYNC_INT32, 1, &breq) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(breq, 20000) == 0, "{}", gsync_request_error(breq));
    gsync_request_free(breq);
    RANK_CHECK(b[0] == 77 && b[31] == 77, "broadcast from rank 1 gave {} {}", b[0], b[31]);
    // The parameter server keeps per-host state: not in an elastic job.
    std::vector<float> p(16, 0.0f);
    gsync_request_t* req;
    RANK_CHECK(gsync_ps_declare(comm, 9, p.data(), p.size(), GSYNC_FLOAT32, nullptr, &req) == 0,
               "{}", gsync_last_error());
    RANK_CHECK(gsync_wait(req, 20000) == GSYNC_ERR_UNSUPPORTED, "{}", gsync_request_error(req));
    gsync_request_free(req);
    return 0;
  };
  auto res = run_ranks(3, [&](int r) {
    // Ranks 0 and 1 run the job; rank 2 takes local slot 1 after rank 1
    // dies, and starts at the world it joins.
    const int local = r == 2 ? 1 : r;
    if (r == 2 && !read_byte(go[0], 60000)) return 1;
    gsync_comm_t* comm;
    RANK_CHECK(connect_elastic(d, "el1", local, 2, &comm) == 0, "{}", gsync_last_error());
    gsync_world_t w{};
    w.struct_size = sizeof w;
    float v = 0;
    std::string err;
    if (r != 2 && first_world(comm, local, &w) != 0) return 1;
    if (r == 1) _exit(0);  // dies without closing: its slot is dead
    if (r == 0) {
      // Its host left the world when rank 1 died: ops are refused until a
      // new world forms with the slot taken again (rank 2), and then run.
      RANK_CHECK(allreduce_of(comm, 3, 1, GSYNC_SUM, &v, &err) != 0, "an op ran without rank 1");
      RANK_CHECK(write(go[1], "x", 1) == 1, "pipe");
    }
    const uint64_t before = w.epoch;
    do {
      RANK_CHECK(gsync_world(comm, &w, 20000) == 0, "{}", gsync_last_error());
    } while (w.epoch == before && r == 0);
    RANK_CHECK(w.world_size == 2 && w.epoch > before, "world {} epoch {} after {}",
               w.world_size, w.epoch, before);
    RANK_CHECK(allreduce_of(comm, 4, float(w.rank + 1), GSYNC_SUM, &v, &err) == 0, "{}", err);
    RANK_CHECK(v == 3.0f, "sum {} in the new world", v);
    report(fmt::format("epoch {}\n", w.epoch));
    gsync_close(comm);
    return 0;
  });
  for (int r : {0, 2}) EXPECT_EQ(res[size_t(r)].code, 0) << res[size_t(r)].output;
  EXPECT_EQ(res[0].output, res[2].output) << "both ranks in the same world";
  EXPECT_NE(d.log().find("job el1: this host's 2 ranks are 0..1 in world epoch"),
            std::string::npos)
      << d.log();
}

TEST(Elastic, AFixedJobsWorldIsItsOwnShape) {
  DaemonProcess d;
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), "fixed", 2, r, &comm) == 0, "{}", gsync_last_error());
    gsync_world_t w{};
    w.struct_size = sizeof w;
    RANK_CHECK(gsync_world(comm, &w, 5000) == 0, "{}", gsync_last_error());
    RANK_CHECK(w.epoch == 0 && w.world_size == 2 && w.rank == r && w.hosts == 1, "epoch {} "
               "world {} rank {} hosts {}", w.epoch, w.world_size, w.rank, w.hosts);
    gsync_world_t small{};
    small.struct_size = 8;
    RANK_CHECK(gsync_world(comm, &small, 5000) == GSYNC_ERR_INVALID, "a short struct taken");
    gsync_close(comm);
    return 0;
  });
  for (const auto& c : res) EXPECT_EQ(c.code, 0) << c.output;
}

TEST(Elastic, ShapesThatCannotBeAreRefusedAtConnect) {
  DaemonProcess d;
  gsync_comm_t* comm = nullptr;
  auto with = [&](auto set) {
    return connect_with(d.socket(), "bad", 0, 0, 0, 1, &comm, set);
  };
  EXPECT_EQ(with([](gsync_config_t& c) {
              c.min_hosts = 1;
              c.world_size = 4;
            }),
            GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("leaves world_size and rank 0"),
            std::string::npos)
      << gsync_last_error();
  EXPECT_EQ(with([](gsync_config_t& c) {
              c.min_hosts = 3;
              c.max_hosts = 2;
            }),
            GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("max_hosts 2 is below min_hosts 3"),
            std::string::npos)
      << gsync_last_error();
  EXPECT_EQ(with([](gsync_config_t& c) { c.max_hosts = 2; }), GSYNC_ERR_INVALID);
  // An id too long for its worlds' names, refused by the daemon.
  EXPECT_EQ(connect_with(d.socket(), std::string(50, 'j'), 0, 0, 0, 1, &comm,
                         [](gsync_config_t& c) { c.min_hosts = 1; }),
            GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("at most 46 bytes"), std::string::npos)
      << gsync_last_error();
}

}  // namespace
}  // namespace gsync::test
