// SPDX-License-Identifier: Apache-2.0
//
// Reproducible allreduces (docs/reproducibility.md) on real test beds: the
// same contributions give the same bits on one host x 4 ranks, 2 hosts x 2,
// and 4 hosts x 1 in 2 racks under every algorithm and chunk size - where
// the default mode, run on the same data, does not - and the result is no
// less accurate than the default ring's against a float64 reference.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gsync/gsync.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tests/integration/ps_util.h"
#include "tools/testbed/testbed.h"

namespace gsync::test {
namespace {

// Values per rank whose magnitudes spread over 10^-8 .. 10^8, with
// signs mixed and, every 7th element, a large pair that cancels between
// ranks 0 and 1: sums that round differently in every order.
float make_value(int rank, size_t i) {
  uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(rank) + 1) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  const double u = static_cast<double>(h >> 11) / 9007199254740992.0;  // [0, 1)
  const double mag = std::pow(10.0, -8.0 + 16.0 * u);
  float v = static_cast<float>((h & 1) ? -mag : mag);
  if (i % 7 == 0 && rank < 2) v = (rank == 0 ? 1.0f : -1.0f) * static_cast<float>(1e7 + i);
  return v;
}

// The values, made once in the test process before it forks the ranks
// (which then share the table): the sanitizer lane's -O0 spent minutes
// making them again in every rank of every job.
constexpr int kRanks = 4;
constexpr size_t kMostValues = 2200000;
const std::vector<std::vector<float>>& table() {
  static const std::vector<std::vector<float>> t = [] {
    std::vector<std::vector<float>> v(kRanks, std::vector<float>(kMostValues));
    for (int r = 0; r < kRanks; r++)
      for (size_t i = 0; i < kMostValues; i++) v[size_t(r)][i] = make_value(r, i);
    return v;
  }();
  return t;
}
float value(int rank, size_t i) { return table()[size_t(rank)][i]; }

struct Case {
  const char* name;
  int dtype, op;
  size_t count;
};
// The large fp32 sum (three segments: 2^20, 2^20 and the rest), a small tensor of
// the same leading values (the slot path), an average, a weighted average
// over two segments (its total weight is in the last), and the half types.
const Case kCases[] = {{"sum_f32", GSYNC_FLOAT32, GSYNC_SUM, kMostValues},
                       {"sum_f32_small", GSYNC_FLOAT32, GSYNC_SUM, 1000},
                       {"avg_f32", GSYNC_FLOAT32, GSYNC_AVG, 100003},
                       {"wavg_f32", GSYNC_FLOAT32, GSYNC_WEIGHTED_AVG, 1100003},
                       {"sum_bf16", GSYNC_BFLOAT16, GSYNC_SUM, 65537},
                       {"sum_f16", GSYNC_FLOAT16, GSYNC_SUM, 65537}};

void fill(void* buf, const Case& c, int rank) {
  for (size_t i = 0; i < c.count; i++) {
    float v = value(rank, i);
    if (c.dtype == GSYNC_FLOAT32) {
      static_cast<float*>(buf)[i] = v;
    } else if (c.dtype == GSYNC_BFLOAT16) {
      static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
    } else {  // fp16's range: the magnitudes folded into 10^-4 .. 10^4
      v = std::fabs(v) > 6e4f ? std::copysign(6e4f, v) : v;
      static_cast<_Float16*>(buf)[i] = static_cast<_Float16>(v * 1e-4f);
    }
  }
}

size_t bytes_of(const Case& c) { return c.count * (c.dtype == GSYNC_FLOAT32 ? 4 : 2); }

struct JobRun {
  std::string algorithm;  // "" = the daemon's choice
  uint64_t chunk_bytes = 0;
  bool reproducible = true;
};

// One rank: every case, each result written to dir/<case>.<rank>.
int rank_main(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
              int rank, const JobRun& run, const std::string& dir) {
  gsync_comm_t* comm;
  RANK_CHECK(connect_place_with(bed, job, p, rank, &comm,
                                [&](gsync_config_t& cfg) {
                                  cfg.arena_bytes = 64 << 20;
                                  cfg.algorithm =
                                      run.algorithm.empty() ? nullptr : run.algorithm.c_str();
                                  cfg.chunk_bytes = run.chunk_bytes;
                                  cfg.reproducible = run.reproducible ? 1 : 0;
                                }) == 0,
             "{}", gsync_last_error());
  std::vector<char> buf(12 << 20);
  uint64_t step = 0;
  for (const Case& c : kCases) {
    fill(buf.data(), c, rank);
    gsync_allreduce_opts_t o;
    gsync_allreduce_opts_init(&o);
    o.weight = rank + 1.0;
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce_ex(comm, 3, step++, buf.data(), c.count, c.dtype, c.op, &o, &req) == 0,
               "{}: {}", c.name, gsync_last_error());
    const int rc = gsync_wait(req, 60000);
    RANK_CHECK(rc == 0, "{}: {} {}", c.name, rc, gsync_request_error(req));
    gsync_request_free(req);
    std::ofstream(fmt::format("{}/{}.{}", dir, c.name, rank), std::ios::binary)
        .write(buf.data(), static_cast<std::streamsize>(bytes_of(c)));
  }
  gsync_close(comm);
  return 0;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class ReproducibleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("gsync-repro-{}", static_cast<long>(getpid()));
    std::filesystem::create_directories(dir_);
    table();  // before any fork
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs a job of per_host ranks and returns rank 0's results by case,
  // after checking every rank holds the same bits.
  std::map<std::string, std::string> run(const testbed::Testbed& bed, const std::vector<int>& per_host,
                                         const JobRun& r) {
    const auto p = places(per_host);
    const std::string job = fmt::format("repro-{}", ++jobs_);
    const std::string out = (dir_ / job).string();
    std::filesystem::create_directories(out);
    auto res = run_ranks(static_cast<int>(p.size()),
                         [&](int rank) { return rank_main(bed, job, p, rank, r, out); }, 300);
    for (size_t i = 0; i < res.size(); i++) EXPECT_EQ(res[i].code, 0) << "rank " << i << ": " << res[i].output;
    std::map<std::string, std::string> got;
    for (const Case& c : kCases) {
      got[c.name] = read_file(fmt::format("{}/{}.0", out, c.name));
      EXPECT_EQ(got[c.name].size(), bytes_of(c)) << c.name;
      for (size_t rank = 1; rank < p.size(); rank++)
        EXPECT_TRUE(read_file(fmt::format("{}/{}.{}", out, c.name, rank)) == got[c.name])
            << c.name << ": rank " << rank << " differs from rank 0 in job " << job;
    }
    return got;
  }

  std::filesystem::path dir_;
  int jobs_ = 0;
};

size_t differing(const std::string& a, const std::string& b, size_t elem) {
  size_t n = 0;
  for (size_t i = 0; i + elem <= std::min(a.size(), b.size()); i += elem)
    n += std::memcmp(a.data() + i, b.data() + i, elem) != 0;
  return n + (a.size() != b.size());
}

// A contribution as the rank sent it (after its dtype's rounding), as float.
float sent(const Case& c, int rank, size_t i) {
  if (c.dtype == GSYNC_FLOAT32) return value(rank, i);
  float v = value(rank, i);
  if (c.dtype == GSYNC_BFLOAT16)
    return std::bit_cast<float>((std::bit_cast<uint32_t>(v) >> 16) << 16);
  v = std::fabs(v) > 6e4f ? std::copysign(6e4f, v) : v;
  return static_cast<float>(static_cast<_Float16>(v * 1e-4f));
}

float got_at(const std::string& bits, int dtype, size_t i) {
  if (dtype == GSYNC_FLOAT32) {
    float f;
    std::memcpy(&f, bits.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bits.data() + 2 * i, 2);
  if (dtype == GSYNC_BFLOAT16) return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  return static_cast<float>(std::bit_cast<_Float16>(h));
}

// Every element of every case near the exact result: within the dtype's
// rounding of the largest contribution (what a layout-independent bug,
// which the comparisons across layouts cannot see, would break).
void expect_near_exact(const std::map<std::string, std::string>& results, int world) {
  for (const Case& c : kCases) {
    const std::string& bits = results.at(c.name);
    const double tol = c.dtype == GSYNC_FLOAT32 ? 0x1p-22 : c.dtype == GSYNC_FLOAT16 ? 0x1p-9 : 0x1p-6;
    size_t bad = 0;
    for (size_t i = 0; i < c.count; i++) {
      long double exact = 0, wsum = 0, scale = 0;
      for (int r = 0; r < world; r++) {
        const long double w = c.op == GSYNC_WEIGHTED_AVG ? r + 1.0L : 1.0L;
        const long double x = static_cast<long double>(sent(c, r, i)) * w;
        exact += x;
        wsum += w;
        scale = std::max(scale, std::fabs(x));
      }
      if (c.op == GSYNC_AVG) exact /= world, scale /= world;
      if (c.op == GSYNC_WEIGHTED_AVG) exact /= wsum, scale /= wsum;
      const long double err = std::fabs(static_cast<long double>(got_at(bits, c.dtype, i)) - exact);
      if (!(err <= tol * scale * world + std::fabs(exact) * tol)) bad++;
    }
    EXPECT_EQ(bad, 0u) << c.name << ": elements far from the exact result";
  }
}

// Sum of |result - exact| over the fp32 sum case, exact in long double.
long double total_error(const std::string& result, int world) {
  long double total = 0;
  const auto* r = reinterpret_cast<const float*>(result.data());
  for (size_t i = 0; i < result.size() / 4; i++) {
    long double exact = 0;
    for (int k = 0; k < world; k++) exact += value(k, i);
    total += std::fabs(static_cast<long double>(r[i]) - exact);
  }
  return total;
}

TEST_F(ReproducibleTest, SameBitsOnEveryLayoutAlgorithmAndChunkSize) {
  std::map<std::string, std::map<std::string, std::string>> results;  // layout -> case -> bits
  std::string reference;
  {
    auto bed = make_bed({1}, "auto", 30000);
    ASSERT_TRUE(bed);
    results["1 host x 4"] = run(*bed, {4}, JobRun{});
  }
  {
    auto bed = make_bed({2}, "auto", 30000);
    ASSERT_TRUE(bed);
    results["2 hosts x 2"] = run(*bed, {2, 2}, JobRun{});
    results["2 hosts x 1+3"] = run(*bed, {1, 3}, JobRun{"ring", 65536});
  }
  std::string default_ring, default_tree;
  {
    auto bed = make_bed({2, 2}, "auto", 30000);
    ASSERT_TRUE(bed);
    for (const char* algo : {"ring", "hier", "tree", "direct", "doubling"})
      results[fmt::format("4 hosts {}", algo)] = run(*bed, {1, 1, 1, 1}, JobRun{algo, 0});
    for (uint64_t chunk : {uint64_t{65536}, uint64_t{262144}, uint64_t{4} << 20})
      results[fmt::format("4 hosts ring {} B chunks", chunk)] = run(*bed, {1, 1, 1, 1}, JobRun{"ring", chunk});
    // The default mode on the same data: it does depend on the layout,
    // which is what makes the test above mean something.
    default_ring = run(*bed, {1, 1, 1, 1}, JobRun{"ring", 0, false})["sum_f32"];
    default_tree = run(*bed, {1, 1, 1, 1}, JobRun{"tree", 0, false})["sum_f32"];
  }
  const auto& first = results.begin()->second;
  for (const auto& [layout, cases] : results) {
    for (const Case& c : kCases) {
      const size_t elem = c.dtype == GSYNC_FLOAT32 ? 4 : 2;
      EXPECT_EQ(differing(cases.at(c.name), first.at(c.name), elem), 0u)
          << c.name << ": " << layout << " against " << results.begin()->first;
    }
  }
  expect_near_exact(first, 4);
  // Tensor size: the small tensor (one gather) holds the large one's
  // leading elements (two phases) bit for bit.
  EXPECT_EQ(first.at("sum_f32").compare(0, 4000, first.at("sum_f32_small")), 0);

  const size_t default_diff = differing(default_ring, default_tree, 4);
  EXPECT_GT(default_diff, 1000u) << "the default mode gave the same bits under ring and tree: "
                                    "the data no longer shows what the mode is for";
  const long double repro_err = total_error(first.at("sum_f32"), 4);
  const long double ring_err = total_error(default_ring, 4);
  RecordProperty("default_ring_vs_tree_differing", static_cast<int>(default_diff));
  std::printf("fp32 sum of 2.2e6 values x 4 ranks: default ring vs tree differ in %zu elements; "
              "total |error| reproducible %.6Lg, default ring %.6Lg\n",
              default_diff, repro_err, ring_err);
  EXPECT_LE(repro_err, ring_err);
}

// A bsp parameter server's pushes in a reproducible job: 4 clocks of
// push_pull (SGD with momentum) on 2 hosts x 2 ranks and on 1 + 3 ranks
// give the same parameters, bit for bit, and they are the definition's
// (tests/integration/ps_util.h's reference with the reproducible average).
int ps_rank(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
            int rank, const std::string& out) {
  constexpr size_t kN = 20000;  // the two-op path at 4 ranks
  gsync_comm_t* comm;
  RANK_CHECK(connect_place_with(bed, job, p, rank, &comm,
                                [](gsync_config_t& cfg) {
                                  cfg.timeout_ms = 30000;
                                  cfg.reproducible = 1;
                                }) == 0,
             "{}", gsync_last_error());
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  std::vector<float> buf(kN);
  for (size_t i = 0; i < kN; i++) buf[i] = rank == 0 ? init(i) : -1.0f;
  gsync_request_t* req;
  RANK_CHECK(gsync_ps_declare(comm, 5, buf.data(), kN, GSYNC_FLOAT32, &s.opts, &req) == 0, "{}",
             gsync_last_error());
  RANK_CHECK(gsync_wait(req, 30000) == 0, "declare: {}", gsync_request_error(req));
  gsync_request_free(req);
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  po.weight = weight_of(rank);
  for (uint64_t c = 0; c < 4; c++) {
    for (size_t i = 0; i < kN; i++) buf[i] = grad(rank, c, i);
    RANK_CHECK(gsync_ps_push_pull(comm, 5, c, buf.data(), kN, GSYNC_FLOAT32, &po, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0, "clock {}: {}", c, gsync_request_error(req));
    RANK_CHECK(gsync_ps_rolled_back(req, nullptr) == 0, "clock {}: not a push's answer", c);
    gsync_request_free(req);
  }
  std::ofstream(fmt::format("{}/ps.{}", out, rank), std::ios::binary)
      .write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(kN * 4));
  gsync_close(comm);
  return 0;
}

TEST_F(ReproducibleTest, ParameterServerPushesGiveTheSameBitsOnEveryLayout) {
  auto bed = make_bed({2}, "auto", 30000);
  ASSERT_TRUE(bed);
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  s.reproducible = true;
  const std::vector<float> want = reference(s, {4}, 20000, 4);
  const std::string want_bits(reinterpret_cast<const char*>(want.data()), want.size() * 4);
  for (const std::vector<int>& layout : {std::vector<int>{2, 2}, std::vector<int>{1, 3}}) {
    const auto p = places(layout);
    const std::string job = fmt::format("repro-ps-{}", ++jobs_);
    const std::string out = (dir_ / job).string();
    std::filesystem::create_directories(out);
    auto res = run_ranks(4, [&](int r) { return ps_rank(*bed, job, p, r, out); }, 300);
    for (size_t i = 0; i < res.size(); i++) EXPECT_EQ(res[i].code, 0) << "rank " << i << ": " << res[i].output;
    for (int r = 0; r < 4; r++)
      EXPECT_EQ(differing(read_file(fmt::format("{}/ps.{}", out, r)), want_bits, 4), 0u)
          << job << " (" << layout[0] << " + " << layout[1] << " ranks) rank " << r;
  }
}

// What the mode refuses, each by name, with nothing submitted - and
// requests freed while their first op is in flight: the ranks go on, and
// the scratch comes back to the arena once the daemon is done with it.
TEST(Reproducible, RefusalsAndAbandonment) {
  DaemonProcess d;
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_with(d.socket(), "refuse", 2, r, r, 2, &comm,
                            [](gsync_config_t& cfg) { cfg.reproducible = 1; }) == 0,
               "{}", gsync_last_error());
    std::vector<float> buf(300000, 1.0f);
    gsync_request_t* req = nullptr;
    auto expect = [&](int rc, int want, const char* names, const char* what) -> int {
      RANK_CHECK(rc == want && std::strstr(gsync_last_error(), names) != nullptr,
                 "{}: rc {} ({})", what, rc, gsync_last_error());
      return 0;
    };
    if (expect(gsync_allreduce(comm, 1, 0, buf.data(), 10, GSYNC_FLOAT64, GSYNC_SUM, 0, &req),
               GSYNC_ERR_UNSUPPORTED, "float64", "float64"))
      return 1;
    if (expect(gsync_allreduce(comm, 1, 0, buf.data(), 10, GSYNC_FLOAT32, GSYNC_MAX, 0, &req),
               GSYNC_ERR_UNSUPPORTED, "max", "max"))
      return 1;
    if (expect(gsync_allreduce(comm, uint64_t{1} << 48, 0, buf.data(), 10, GSYNC_FLOAT32,
                               GSYNC_SUM, 0, &req),
               GSYNC_ERR_INVALID, "2^48", "key"))
      return 1;
    gsync_allreduce_opts_t o;
    gsync_allreduce_opts_init(&o);
    RANK_CHECK(o.reproducible == -1, "opts_init gave reproducible {}", o.reproducible);
    o.compression.codec = GSYNC_CODEC_INT8;
    if (expect(gsync_allreduce_ex(comm, 1, 0, buf.data(), 10, GSYNC_FLOAT32, GSYNC_SUM, &o, &req),
               GSYNC_ERR_INVALID, "codec", "codec"))
      return 1;
    o.compression.codec = GSYNC_CODEC_JOB;
    o.reproducible = 2;
    if (expect(gsync_allreduce_ex(comm, 1, 0, buf.data(), 10, GSYNC_FLOAT32, GSYNC_SUM, &o, &req),
               GSYNC_ERR_INVALID, "reproducible 2", "opts.reproducible"))
      return 1;
    // Per op: off on a session that is on is a plain allreduce (float64 goes).
    o.reproducible = 0;
    std::vector<double> d64(10, 1.0);
    RANK_CHECK(gsync_allreduce_ex(comm, 2, 0, d64.data(), 10, GSYNC_FLOAT64, GSYNC_SUM, &o, &req) == 0,
               "{}", gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0 && d64[0] == 2.0, "float64 off: {}", gsync_last_error());
    gsync_request_free(req);

    size_t cap = 0, free_before = 0, free_after = 0;
    gsync_arena_info(comm, &cap, &free_before);
    // Both free their requests at once, the exponents op in flight: its
    // scratch must outlive the handle until the daemon completes it.
    RANK_CHECK(gsync_allreduce(comm, 3, 0, buf.data(), buf.size(), GSYNC_FLOAT32, GSYNC_SUM, 0,
                               &req) == 0,
               "{}", gsync_last_error());
    gsync_request_free(req);
    // Both go on with a reproducible op of another key, which completes.
    RANK_CHECK(gsync_allreduce(comm, 4, 0, buf.data(), buf.size(), GSYNC_FLOAT32, GSYNC_SUM, 0,
                               &req) == 0,
               "{}", gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0, "after: {}", gsync_request_error(req));
    gsync_request_free(req);
    RANK_CHECK(gsync_barrier(comm, 1, 30000) == 0, "barrier: {}", gsync_last_error());
    gsync_arena_info(comm, &cap, &free_after);
    RANK_CHECK(free_after == free_before, "arena free {} before, {} after", free_before, free_after);
    gsync_close(comm);
    return 0;
  });
  for (size_t i = 0; i < res.size(); i++) EXPECT_EQ(res[i].code, 0) << "rank " << i << ": " << res[i].output;
}

TEST(Reproducible, EnvironmentOverridesAndIsChecked) {
  DaemonProcess d;
  gsync_comm_t* comm = nullptr;
  setenv("GSYNC_REPRODUCIBLE", "2", 1);
  EXPECT_EQ(connect_rank(d.socket(), "env", 1, 0, &comm), GSYNC_ERR_INVALID);
  EXPECT_NE(std::strstr(gsync_last_error(), "GSYNC_REPRODUCIBLE"), nullptr) << gsync_last_error();
  setenv("GSYNC_REPRODUCIBLE", "1", 1);
  ASSERT_EQ(connect_rank(d.socket(), "env", 1, 0, &comm), 0) << gsync_last_error();
  unsetenv("GSYNC_REPRODUCIBLE");
  double x = 1;
  gsync_request_t* req = nullptr;
  EXPECT_EQ(gsync_allreduce(comm, 1, 0, &x, 1, GSYNC_FLOAT64, GSYNC_SUM, 0, &req),
            GSYNC_ERR_UNSUPPORTED) << "the environment turned the mode on";
  gsync_close(comm);
}

}  // namespace
}  // namespace gsync::test
