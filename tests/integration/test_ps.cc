// SPDX-License-Identifier: Apache-2.0
//
// The parameter server (docs/parameter-server.md) on real daemons: shards on
// 1 to 4 hosts, the optimizers' results bit for bit against a reference that
// does the documented fp32 operations in the documented order, the three
// sync modes' guarantees over thousands of clocks with random delays, and
// requests that are refused without changing anything.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

// Worker r's gradient at clock c, element i; its weight (the samples it
// stands for) differs per rank, so the average is a weighted one.
float grad(int r, uint64_t c, size_t i) {
  return std::sin(0.001f * float(i) + 0.37f * float(r) + 0.11f * float(c)) * (1.0f + 0.25f * r);
}
double weight_of(int r) { return 1.0 + r; }
float init(size_t i) { return 0.01f * float(i % 97) - 0.3f; }

struct PsRun {
  gsync_ps_opts_t opts;
  int sync = GSYNC_SYNC_BSP;
  uint32_t staleness = 0;
};

// The servers' arithmetic, as docs/parameter-server.md gives it, for `world`
// workers of one rank each: the fold weighs each rank's gradient (fp32
// multiply), the server sums the workers in order and scales by
// float(1 / sum of weights), then one optimizer step.
std::vector<float> reference(const PsRun& s, int world, size_t n, uint64_t clocks) {
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  for (size_t i = 0; i < n; i++) p[i] = init(i);
  double total = 0;
  for (int r = 0; r < world; r++) total += weight_of(r);
  const float scale = static_cast<float>(1.0 / total);
  const gsync_ps_opts_t& o = s.opts;
  for (uint64_t c = 0; c < clocks; c++) {
    for (size_t i = 0; i < n; i++) {
      float acc = grad(0, c, i) * static_cast<float>(weight_of(0));
      for (int r = 1; r < world; r++) acc = acc + grad(r, c, i) * static_cast<float>(weight_of(r));
      g[i] = acc;
    }
    const uint64_t t = c + 1;
    if (o.optimizer == GSYNC_OPT_SGD) {
      for (size_t i = 0; i < n; i++) {
        float d = g[i] * scale + o.weight_decay * p[i];
        if (o.momentum != 0) {
          m[i] = t == 1 ? d : o.momentum * m[i] + d;
          d = m[i];
        }
        p[i] = p[i] - o.lr * d;
      }
      continue;
    }
    const bool decoupled = o.optimizer == GSYNC_OPT_ADAMW;
    const float step = static_cast<float>(o.lr / (1.0 - std::pow(double(o.beta1), double(t))));
    const float root2 = static_cast<float>(std::sqrt(1.0 - std::pow(double(o.beta2), double(t))));
    const float keep = decoupled ? 1.0f - o.lr * o.weight_decay : 1.0f;
    const float gwd = decoupled ? 0.0f : o.weight_decay;
    for (size_t i = 0; i < n; i++) {
      float pi = p[i] * keep;
      float gi = g[i] * scale + gwd * pi;
      float mi = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
      float vi = o.beta2 * v[i] + (1.0f - o.beta2) * (gi * gi);
      m[i] = mi;
      v[i] = vi;
      float denom = std::sqrt(vi) / root2 + o.eps;
      p[i] = pi - step * (mi / denom);
    }
  }
  return p;
}

int connect_ps(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
               int rank, const PsRun& s, gsync_comm_t** comm) {
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  std::string sock = bed.socket(p[size_t(rank)].host);
  cfg.socket_path = sock.c_str();
  cfg.job_id = job.c_str();
  cfg.world_size = static_cast<int>(p.size());
  cfg.rank = rank;
  cfg.local_rank = p[size_t(rank)].local_rank;
  cfg.local_size = p[size_t(rank)].local_size;
  cfg.sync_mode = s.sync;
  cfg.staleness = s.staleness;
  cfg.timeout_ms = 60000;
  return gsync_connect(&cfg, comm);
}

uint64_t bits_of(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

// Every rank declares, then push_pulls `clocks` times; reports the hash of
// its final parameters and checks them against the reference, bit for bit.
int train_rank(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
               int rank, const PsRun& s, size_t n, uint64_t clocks) {
  gsync_comm_t* comm;
  RANK_CHECK(connect_ps(bed, job, p, rank, s, &comm) == 0, "{}", gsync_last_error());
  void* mem;
  RANK_CHECK(gsync_alloc(comm, n * 4, &mem) == 0, "{}", gsync_last_error());
  auto* buf = static_cast<float*>(mem);
  for (size_t i = 0; i < n; i++) buf[i] = rank == 0 ? init(i) : -1.0f;
  gsync_request_t* req;
  RANK_CHECK(gsync_ps_declare(comm, 5, buf, n, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
             gsync_last_error());
  RANK_CHECK(gsync_wait(req, 60000) == 0, "declare: {}", gsync_request_error(req));
  gsync_request_free(req);
  for (size_t i = 0; i < n; i++) RANK_CHECK(buf[i] == init(i), "initial value {} on rank {}", i, rank);
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  po.weight = weight_of(rank);
  for (uint64_t c = 0; c < clocks; c++) {
    for (size_t i = 0; i < n; i++) buf[i] = grad(rank, c, i);
    RANK_CHECK(gsync_ps_push_pull(comm, 5, c, buf, n, GSYNC_FLOAT32, &po, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 60000) == 0, "clock {}: {}", c, gsync_request_error(req));
    gsync_request_free(req);
  }
  std::vector<float> got(buf, buf + n), want = reference(s, static_cast<int>(p.size()), n, clocks);
  for (size_t i = 0; i < n; i++)
    RANK_CHECK(std::memcmp(&got[i], &want[i], 4) == 0, "element {}: got {:.9g}, want {:.9g}", i,
               got[i], want[i]);
  report(fmt::format("bits {:x}\n", bits_of(got)));
  RANK_CHECK(gsync_barrier(comm, 1, 60000) == 0, "barrier: {}", gsync_last_error());
  gsync_close(comm);
  return 0;
}

std::vector<ChildResult> train(const testbed::Testbed& bed, const std::string& job,
                               const std::vector<int>& per_host, const PsRun& s, size_t n,
                               uint64_t clocks) {
  auto p = places(per_host);
  auto res = run_ranks(static_cast<int>(p.size()),
                       [&](int r) { return train_rank(bed, job, p, r, s, n, clocks); }, 600);
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
  return res;
}

PsRun sgd() {
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  s.opts.weight_decay = 0.01f;
  return s;
}

TEST(ParameterServer, BspSgdOnFourHostsIsBitExact) {
  auto bed = make_bed({2, 2}, "auto", 60000);
  ASSERT_TRUE(bed);
  train(*bed, "ps-sgd", {1, 1, 1, 1}, sgd(), 10007, 12);
}

TEST(ParameterServer, BspAdamWOnThreeHostsIsBitExact) {
  auto bed = make_bed({2, 1}, "auto", 60000);
  ASSERT_TRUE(bed);
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.optimizer = GSYNC_OPT_ADAMW;
  s.opts.lr = 0.01f;
  s.opts.weight_decay = 0.1f;
  train(*bed, "ps-adamw", {1, 1, 1}, s, 3001, 10);
}

}  // namespace
}  // namespace gsync::test
