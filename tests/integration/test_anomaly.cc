// SPDX-License-Identifier: Apache-2.0
//
// The anomaly guard (docs/fault-tolerance.md) on real daemons: 100 faults
// injected into a job on three hosts (a NaN, an Inf, a 100x spike of one
// rank's gradient) each fail the op on every rank of every host alike with
// GSYNC_ERR_ANOMALY naming the step, while every clean step passes and the
// daemons count what they found; 10^4 clean steps whose norms drift and
// jitter as training's do raise at most one false alarm; ranks that
// disagree on the guard are refused naming both.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tests/integration/ps_util.h"

namespace gsync::test {
namespace {

int connect_guarded(const std::string& socket, const std::string& job, int world, int rank,
                    int local_rank, int local_size, gsync_comm_t** comm, bool guard = true,
                    uint32_t sigmas = 0) {
  return connect_with(socket, job, world, rank, local_rank, local_size, comm,
                      [&](gsync_config_t& cfg) {
                        cfg.timeout_ms = 60000;
                        cfg.anomaly_guard = guard ? 1 : 0;
                        cfg.anomaly_sigmas = sigmas;
                      });
}

// Rank r's gradient at step s: noise whose scale drifts down and jitters,
// as a training run's does.
void fill(float* buf, size_t n, int r, uint64_t s) {
  std::mt19937 rng(uint32_t(r * 1000003 + s));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scale = (1.0f + 0.05f * normal(rng)) / (1.0f + 0.0005f * float(s));
  for (size_t i = 0; i < n; i++) buf[i] = scale * normal(rng);
}

enum class Fault { kNone, kNaN, kInf, kSpike };
Fault fault_at(uint64_t s) {
  if (s < 20 || (s - 20) % 4 != 0 || (s - 20) / 4 >= 100) return Fault::kNone;
  switch ((s - 20) / 4 % 3) {
    case 0: return Fault::kNaN;
    case 1: return Fault::kInf;
    default: return Fault::kSpike;
  }
}

TEST(AnomalyGuard, HundredFaultsFailEveryRankAlikeAndCleanStepsPass) {
  auto bed = make_bed({3}, "ring", 60000);
  ASSERT_TRUE(bed);
  auto p = places({2, 1, 1});
  const size_t n = 8192;
  const uint64_t steps = 420;
  auto res = run_ranks(4, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_guarded(bed->socket(p[size_t(r)].host), "guard", 4, r,
                               p[size_t(r)].local_rank, p[size_t(r)].local_size, &comm) == 0,
               "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, n * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    int anomalies = 0;
    for (uint64_t s = 0; s < steps; s++) {
      fill(buf, n, r, s);
      const Fault f = fault_at(s);
      const int culprit = int(s / 4 % 4);
      if (r == culprit && f == Fault::kNaN) buf[s % n] = std::numeric_limits<float>::quiet_NaN();
      if (r == culprit && f == Fault::kInf) buf[s % n] = std::numeric_limits<float>::infinity();
      if (r == culprit && f == Fault::kSpike)
        for (size_t i = 0; i < n; i++) buf[i] *= 100.0f;
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 7, s, buf, n, GSYNC_FLOAT32, GSYNC_AVG, 0, &req) == 0,
                 "submit: {}", gsync_last_error());
      int rc = gsync_wait(req, 60000);
      std::string err = gsync_request_error(req);
      gsync_request_free(req);
      if (f == Fault::kNone) {
        RANK_CHECK(rc == 0, "clean step {} failed: {}", s, err);
        for (size_t i = 0; i < n; i += 1024) RANK_CHECK(std::isfinite(buf[i]), "step {}", s);
        continue;
      }
      RANK_CHECK(rc == GSYNC_ERR_ANOMALY, "faulty step {} got {}: {}", s, rc, err);
      RANK_CHECK(err.find(fmt::format("anomaly at step {}", s)) != std::string::npos, "{}", err);
      if (f != Fault::kSpike) {
        RANK_CHECK(err.find("NaN or an Inf") != std::string::npos, "{}", err);
        // Whose it was, the same on every rank of every host.
        RANK_CHECK(err.find(fmt::format("the first non-finite value is rank {}'s", culprit)) !=
                       std::string::npos,
                   "{}", err);
      } else {
        RANK_CHECK(err.find("above the threshold") != std::string::npos, "{}", err);
        RANK_CHECK(err.find("non-finite value is rank") == std::string::npos, "{}", err);
      }
      anomalies++;
    }
    report(fmt::format("anomalies {}\n", anomalies));
    // This host's count is whole once its last op completed (before its
    // ranks leave and the job with them).
    const std::string admin = bed->admin_socket(p[size_t(r)].host);
    RANK_CHECK(job_count(admin, "guard", "anomalies") == 100, "host {} counted {}: {}",
               p[size_t(r)].host, job_count(admin, "guard", "anomalies"),
               admin_query(admin, "jobs"));
    RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 600);
  for (size_t r = 0; r < res.size(); r++) {
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
    EXPECT_NE(res[r].output.find("anomalies 100"), std::string::npos) << res[r].output;
  }
}

// Whose gradient held the NaN or the Inf, in float32, float16 and
// bfloat16: named alike on both hosts; a sum that overflows from finite
// gradients names nobody.
TEST(AnomalyGuard, TheNonFiniteGradientsRankIsNamedAndAnOverflowNamesNone) {
  auto bed = make_bed({2}, "ring", 60000);
  ASSERT_TRUE(bed);
  auto p = places({1, 2});
  const size_t n = 3000;
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_guarded(bed->socket(p[size_t(r)].host), "whose", 3, r,
                               p[size_t(r)].local_rank, p[size_t(r)].local_size, &comm) == 0,
               "{}", gsync_last_error());
    void* mem;
    RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "alloc");
    uint64_t step = 0;
    auto run = [&](int dtype, int culprit, bool overflow, std::string* err) {
      auto* f = static_cast<float*>(mem);
      auto* h = static_cast<uint16_t*>(mem);
      const bool half = dtype != GSYNC_FLOAT32;
      for (size_t i = 0; i < n; i++) {
        if (half) h[i] = dtype == GSYNC_FLOAT16 ? 0x3c00 : 0x3f80;  // 1.0
        else f[i] = 1.0f;
      }
      const size_t at = 1000 + size_t(r);
      if (overflow && !half) f[at - size_t(r)] = 3e38f;  // finite, the sum is not
      if (r == culprit) {
        if (half) h[at] = dtype == GSYNC_FLOAT16 ? 0x7c00 : 0x7f80;  // +Inf
        else f[at] = std::numeric_limits<float>::quiet_NaN();
      }
      gsync_request_t* req;
      if (gsync_allreduce(comm, uint64_t(dtype), step++, mem, n, dtype, GSYNC_SUM, 0, &req) != 0)
        return -100;
      int rc = gsync_wait(req, 60000);
      *err = gsync_request_error(req);
      gsync_request_free(req);
      return rc;
    };
    std::string err;
    for (int dtype : {GSYNC_FLOAT32, GSYNC_FLOAT16, GSYNC_BFLOAT16}) {
      for (int culprit = 0; culprit < 3; culprit++) {
        RANK_CHECK(run(dtype, culprit, false, &err) == GSYNC_ERR_ANOMALY, "{}", err);
        RANK_CHECK(err.find(fmt::format("the first non-finite value is rank {}'s", culprit)) !=
                       std::string::npos,
                   "dtype {}: {}", dtype, err);
      }
    }
    RANK_CHECK(run(GSYNC_FLOAT32, -1, true, &err) == GSYNC_ERR_ANOMALY, "{}", err);
    RANK_CHECK(err.find("no rank's gradient was non-finite itself") != std::string::npos, "{}",
               err);
    RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  });
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
}

TEST(AnomalyGuard, AtMostOneFalseAlarmInTenThousandCleanSteps) {
  DaemonProcess d({}, "", "warn");
  const size_t n = 1024;
  const uint64_t steps = 10000;
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_guarded(d.socket(), "clean", 2, r, r, 2, &comm) == 0, "{}",
               gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, n * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    int alarms = 0;
    for (uint64_t s = 0; s < steps; s++) {
      fill(buf, n, r, s);
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 3, s, buf, n, GSYNC_FLOAT32, GSYNC_AVG, 0, &req) == 0,
                 "submit: {}", gsync_last_error());
      int rc = gsync_wait(req, 60000);
      RANK_CHECK(rc == 0 || rc == GSYNC_ERR_ANOMALY, "step {}: {}", s, gsync_request_error(req));
      if (rc != 0) report(fmt::format("false alarm: {}\n", gsync_request_error(req)));
      alarms += rc != 0;
      gsync_request_free(req);
    }
    report(fmt::format("alarms {}\n", alarms));
    RANK_CHECK(alarms <= 1, "{} false alarms in {} clean steps", alarms, steps);
    gsync_close(comm);
    return 0;
  }, 600);
  for (auto& r : res) EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(res[0].output, res[1].output);  // the same verdicts on both ranks
}

TEST(AnomalyGuard, RanksThatDisagreeOnTheGuardAreRefusedNamingBoth) {
  DaemonProcess d({}, "", "warn");
  gsync_comm_t* a;
  ASSERT_EQ(connect_guarded(d.socket(), "mixed", 2, 0, 0, 2, &a, true, 6), 0) << gsync_last_error();
  gsync_comm_t* b = nullptr;
  EXPECT_EQ(connect_guarded(d.socket(), "mixed", 2, 1, 1, 2, &b, true, 9), GSYNC_ERR_REFUSED);
  std::string err = gsync_last_error();
  EXPECT_NE(err.find("6 sigmas over 128 steps"), std::string::npos) << err;
  EXPECT_NE(err.find("9 sigmas over 128 steps"), std::string::npos) << err;
  gsync_comm_t* c = nullptr;
  EXPECT_EQ(connect_guarded(d.socket(), "mixed", 2, 1, 1, 2, &c, true, 200), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("anomaly_sigmas 200"), std::string::npos)
      << gsync_last_error();
  gsync_close(a);
}

// The parameter server's guard: a bsp job on three hosts, 100 faults in
// 300 clocks (a worker's NaN, Inf or 100x gradient in turn). Every faulty
// clock is rolled back on every shard from memory, so the parameters the
// workers pull are always finite and at the end they are bit for bit those
// of the optimizer run over the clean clocks alone; each host counts 100.
// Each worker's request says whether its clock was rolled back, and for a
// NaN or an Inf whose gradient held it (gsync_ps_rolled_back).
TEST(AnomalyGuard, ParameterServerRollsBackEveryFaultyClockExactly) {
  auto bed = make_bed({3}, "ring", 60000);
  ASSERT_TRUE(bed);
  const std::vector<int> per_host{1, 1, 1};
  auto p = places(per_host);
  const size_t n = 20000;
  const uint64_t clocks = 300;
  auto faulty = [](uint64_t c) { return c >= 20 && (c - 20) % 2 == 0 && (c - 20) / 2 < 100; };
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  std::vector<bool> applied(clocks);
  for (uint64_t c = 0; c < clocks; c++) applied[c] = !faulty(c);
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_guarded(bed->socket(p[size_t(r)].host), "ps-guard", 3, r, 0, 1, &comm) == 0,
               "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, n * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (size_t i = 0; i < n; i++) buf[i] = r == 0 ? init(i) : -1.0f;
    gsync_request_t* req;
    RANK_CHECK(gsync_ps_declare(comm, 9, buf, n, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 60000) == 0, "declare: {}", gsync_request_error(req));
    gsync_request_free(req);
    gsync_push_opts_t po;
    gsync_push_opts_init(&po);
    po.weight = weight_of(r);
    for (uint64_t c = 0; c < clocks; c++) {
      for (size_t i = 0; i < n; i++) buf[i] = grad(r, c, i);
      if (faulty(c) && r == int(c / 2 % 3)) {
        switch ((c - 20) / 2 % 3) {
          case 0: buf[c % n] = std::numeric_limits<float>::quiet_NaN(); break;
          case 1: buf[c % n] = -std::numeric_limits<float>::infinity(); break;
          default: for (size_t i = 0; i < n; i++) buf[i] *= 100.0f;
        }
      }
      RANK_CHECK(gsync_ps_push_pull(comm, 9, c, buf, n, GSYNC_FLOAT32, &po, &req) == 0, "{}",
                 gsync_last_error());
      RANK_CHECK(gsync_wait(req, 60000) == 0, "clock {}: {}", c, gsync_request_error(req));
      // The worker is told (issue #38, item 4), with whose gradient it was.
      const char* why = nullptr;
      const int rolled = gsync_ps_rolled_back(req, &why);
      const std::string text = why ? why : "(null)";
      RANK_CHECK(rolled == (faulty(c) ? 1 : 0), "clock {}: gsync_ps_rolled_back {} ({})", c,
                 rolled, text);
      if (rolled == 1) {
        const std::string names = fmt::format("job ps-guard parameter key 9: clock {} rolled back", c);
        RANK_CHECK(text.find(names) != std::string::npos, "'{}' not in '{}'", names, text);
        if ((c - 20) / 2 % 3 < 2) {  // a NaN or an Inf: whose
          const std::string whose =
              fmt::format("the first non-finite value is rank {}'s", int(c / 2 % 3));
          RANK_CHECK(text.find(whose) != std::string::npos, "'{}' not in '{}'", whose, text);
        }
      } else {
        RANK_CHECK(text.empty(), "clock {}: applied, yet the text is '{}'", c, text);
      }
      gsync_request_free(req);
      for (size_t i = 0; i < n; i++)
        RANK_CHECK(std::isfinite(buf[i]), "clock {}: element {} is {}", c, i, buf[i]);
    }
    std::vector<float> want = reference(s, per_host, n, clocks, applied);
    for (size_t i = 0; i < n; i++)
      RANK_CHECK(std::memcmp(&buf[i], &want[i], 4) == 0, "element {}: got {:.9g}, want {:.9g}",
                 i, buf[i], want[i]);
    nlohmann::json j = admin_json(bed->admin_socket(p[size_t(r)].host), "jobs");
    uint64_t found = 0;
    for (const auto& row : j["jobs"])
      if (row.value("job", "") == "ps-guard")
        for (const auto& k : row["parameters"]) found = k.value("anomalies", 0ull);
    RANK_CHECK(found == 100, "host {} rolled back {} clocks: {}", p[size_t(r)].host, found,
               j.dump());
    RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 600);
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
}

// A guarded key smaller than 16 elements a host: shards are whole 16-element
// units, so two of three hosts serve none. Their norm is 0 and known from
// the start (it never comes as a message): clean clocks pass and a NaN
// clock is rolled back, on every worker alike, instead of waiting forever.
TEST(AnomalyGuard, AKeyWithEmptyShardsIsJudgedToo) {
  auto bed = make_bed({3}, "ring", 20000);
  ASSERT_TRUE(bed);
  const std::vector<int> per_host{1, 1, 1};
  auto p = places(per_host);
  const size_t n = 16;
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  auto res = run_ranks(3, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_guarded(bed->socket(p[size_t(r)].host), "ps-tiny", 3, r, 0, 1, &comm) == 0,
               "{}", gsync_last_error());
    float* buf;
    RANK_CHECK(gsync_alloc(comm, n * 4, reinterpret_cast<void**>(&buf)) == 0, "alloc");
    for (size_t i = 0; i < n; i++) buf[i] = init(i);
    gsync_request_t* req;
    RANK_CHECK(gsync_ps_declare(comm, 2, buf, n, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 20000) == 0, "declare: {}", gsync_request_error(req));
    gsync_request_free(req);
    for (uint64_t c = 0; c < 6; c++) {
      for (size_t i = 0; i < n; i++) buf[i] = grad(r, c, i);
      if (c == 4 && r == 1) buf[3] = std::numeric_limits<float>::quiet_NaN();
      RANK_CHECK(gsync_ps_push_pull(comm, 2, c, buf, n, GSYNC_FLOAT32, nullptr, &req) == 0, "{}",
                 gsync_last_error());
      RANK_CHECK(gsync_wait(req, 20000) == 0, "clock {}: {}", c, gsync_request_error(req));
      const int rolled = gsync_ps_rolled_back(req, nullptr);
      gsync_request_free(req);
      // Told on the host that serves the key (the only one with a shard).
      RANK_CHECK(r != 2 || rolled == (c == 4 ? 1 : 0), "clock {}: rolled back {}", c, rolled);
      for (size_t i = 0; i < n; i++)
        RANK_CHECK(std::isfinite(buf[i]), "clock {}: element {} is {}", c, i, buf[i]);
    }
    RANK_CHECK(gsync_barrier(comm, 1, 20000) == 0, "barrier: {}", gsync_last_error());
    gsync_close(comm);
    return 0;
  }, 120);
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
}

}  // namespace
}  // namespace gsync::test
