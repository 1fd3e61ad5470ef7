// SPDX-License-Identifier: Apache-2.0
//
// Features compose (issue #38; docs/testing.md, "The composition matrix"):
// every pair of compression, elastic jobs, the parameter server in bsp and
// in ssp, batch leases, checkpoints, the anomaly guard, tracing and
// reproducible allreduces (docs/reproducibility.md), on a
// real bed of two hosts, one rank each. A pair either works - the job
// trains or reduces and its result is checked - or is refused at setup
// with an error that names both features.
//
// The same file is built six times (meson): GSYNC_COMPOSE_LINKS "tcp"
// (suite integration: the pairs above, links over TCP), "dpdk" (suite
// dpdk: each feature over a net_memif link), "etcd" (suite etcd: each
// feature with membership on a real etcd), "verbs" (suite rxe: each
// feature over verbs, in the soft-RoCE VM, tools/rxe/rxe-lane.sh), and
// "etcd-dpdk" (suite dpdk) and "etcd-verbs" (suite rxe): membership on
// etcd with those links.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <set>
#include <string>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tests/integration/ps_util.h"

namespace gsync::test {
namespace {

namespace fs = std::filesystem;

#ifndef GSYNC_COMPOSE_LINKS
#define GSYNC_COMPOSE_LINKS "tcp"
#endif
const std::string kLinks = GSYNC_COMPOSE_LINKS;

// "etcd-dpdk", "etcd-verbs": membership on etcd and that link (an etcd
// cluster runs fast links as a cluster file's does).
const bool kOnEtcd = kLinks.rfind("etcd", 0) == 0;
const std::string kFastLink = kLinks == "etcd" ? "" : kOnEtcd ? kLinks.substr(5) : kLinks;

std::unique_ptr<testbed::Testbed> compose_bed(std::vector<std::string> extra) {
  if (kLinks == "tcp") return make_bed({2}, "auto", 20000, std::move(extra));
  testbed::Options o;
  o.rack_sizes = {2};
  o.loopback = true;  // memif and etcd beds need no namespaces
  if (kFastLink == "dpdk") o.dpdk = "memif";
  o.etcd = kOnEtcd;
  o.daemon_args = {"--op-timeout-ms", "20000"};
  // Under the VM's emulation a daemon's loop can stall for seconds (a
  // large registration): a 2 s lease would drop a live host.
  if (kOnEtcd && kFastLink == "verbs") o.etcd_lease_ttl_s = 15;
  if (kFastLink == "verbs") {
    const std::string config = fs::temp_directory_path() / "gsync-compose-verbs.toml";
    std::ofstream(config) << "[cluster]\ntransport = \"verbs\"\npeer_timeout_ms = 10000\n";
    o.daemon_args.push_back("--config=" + config);
  }
  o.daemon_args.insert(o.daemon_args.end(), extra.begin(), extra.end());
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  EXPECT_TRUE(st) << st.message();
  return bed;
}

// C compression (int8, cross-host), E elastic, B bsp parameter server, S
// ssp:2 parameter server, L batch leases (bsp), K checkpoints (bsp), G the
// anomaly guard, T tracing (ops recorded with their stages, counted), X
// reproducible allreduces (the session's: exact bits).
struct Cell {
  std::string pair;     // two letters of the above
  std::string refused;  // "": works; else the error the setup gives, in part
};

// For gtest's messages: the cell's name, not its bytes.
void PrintTo(const Cell& c, std::ostream* os) { *os << c.pair; }

bool has(const std::string& pair, char f) { return pair.find(f) != std::string::npos; }
bool ps_job(const std::string& pair) {
  return has(pair, 'B') || has(pair, 'S') || has(pair, 'L') || has(pair, 'K');
}

constexpr size_t kPsCount = 4096, kArCount = 16384;
constexpr uint64_t kClocks = 6;

PsRun ps_run(const std::string& pair) {
  PsRun s;
  gsync_ps_opts_init(&s.opts);
  s.opts.lr = 0.05f;
  s.opts.momentum = 0.9f;
  if (has(pair, 'K')) s.opts.checkpoint_clocks = 2;
  s.reproducible = has(pair, 'X');
  if (has(pair, 'S')) {
    s.sync = GSYNC_SYNC_SSP;
    s.staleness = 2;
    // ssp applies each push as it comes, one optimizer step each: without
    // momentum the sum of those steps is bsp's step, to float rounding.
    s.opts.momentum = 0;
  }
  return s;
}

int connect_cell(const testbed::Testbed& bed, const std::string& pair, int r, gsync_comm_t** comm) {
  const std::string job = "compose-" + pair;
  const PsRun s = ps_run(pair);
  return connect_with(bed.socket(r), job, has(pair, 'E') ? 0 : 2, has(pair, 'E') ? 0 : r, 0, 1,
                      comm, [&](gsync_config_t& cfg) {
                        cfg.timeout_ms = 20000;
                        // Verbs registers a whole arena at its first
                        // one-sided write, on the event thread: under
                        // soft-RoCE in the TCG VM the default 1 GiB took
                        // about 10 s, the lane's peer timeout.
                        cfg.arena_bytes = 16 << 20;
                        cfg.sync_mode = s.sync;
                        cfg.staleness = s.staleness;
                        if (has(pair, 'E')) cfg.min_hosts = 2;
                        if (has(pair, 'G')) cfg.anomaly_guard = 1;
                        if (has(pair, 'C')) gsync_compression_parse("int8", &cfg.compression);
                        if (has(pair, 'X')) cfg.reproducible = 1;
                      });
}

// The parameter server's part: declare, 6 clocks (leasing a batch first
// with L), the parameters checked (bit for bit in bsp, against it within
// float rounding in ssp, whose pushes are applied one by one in arrival
// order).
int ps_part(gsync_comm_t* comm, const std::string& pair, int r, const Cell& cell) {
  const PsRun s = ps_run(pair);
  void* mem;
  RANK_CHECK(gsync_alloc(comm, kPsCount * 4, &mem) == 0, "{}", gsync_last_error());
  auto* buf = static_cast<float*>(mem);
  for (size_t i = 0; i < kPsCount; i++) buf[i] = r == 0 ? init(i) : -1.0f;
  gsync_request_t* req;
  const int submitted = gsync_ps_declare(comm, 1, buf, kPsCount, GSYNC_FLOAT32, &s.opts, &req);
  if (submitted != 0 && !cell.refused.empty()) {  // refused before anything went out
    RANK_CHECK(std::strstr(gsync_last_error(), cell.refused.c_str()) != nullptr,
               "declare: {}, not refused naming '{}'", gsync_last_error(), cell.refused);
    return 0;
  }
  RANK_CHECK(submitted == 0, "{}", gsync_last_error());
  const int rc = gsync_wait(req, 20000);
  const std::string err = gsync_request_error(req);
  gsync_request_free(req);
  if (!cell.refused.empty()) {
    RANK_CHECK(rc != 0 && err.find(cell.refused) != std::string::npos,
               "declare: {} ({}), not refused naming '{}'", rc, err, cell.refused);
    return 0;
  }
  RANK_CHECK(rc == 0, "declare: {}", err);
  gsync_push_opts_t po;
  gsync_push_opts_init(&po);
  // ssp weighs a push by the workers' last weights (its step's weight is
  // not known when the push comes): equal weights make that exact.
  po.weight = has(pair, 'S') ? 1.0 : weight_of(r);
  for (uint64_t c = 0; c < kClocks; c++) {
    if (has(pair, 'L')) {
      RANK_CHECK(gsync_lease(comm, 1, 2 * kClocks, c, &req) == 0, "{}", gsync_last_error());
      RANK_CHECK(gsync_wait(req, 20000) == 0, "lease {}: {}", c, gsync_request_error(req));
      uint64_t batch = 0;
      RANK_CHECK(gsync_lease_batch(req, &batch) == 0 && batch < 2 * kClocks,
                 "clock {}: batch {}", c, batch);
      gsync_request_free(req);
    }
    for (size_t i = 0; i < kPsCount; i++) buf[i] = grad(r, c, i);
    RANK_CHECK(gsync_ps_push_pull(comm, 1, c, buf, kPsCount, GSYNC_FLOAT32, &po, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 20000) == 0, "clock {}: {}", c, gsync_request_error(req));
    RANK_CHECK(gsync_ps_rolled_back(req, nullptr) == 0, "clock {} rolled back", c);
    gsync_request_free(req);
  }
  RANK_CHECK(gsync_barrier(comm, 7, 20000) == 0, "{}", gsync_last_error());
  RANK_CHECK(gsync_ps_pull(comm, 1, kClocks, buf, kPsCount, GSYNC_FLOAT32, &req) == 0, "{}",
             gsync_last_error());
  RANK_CHECK(gsync_wait(req, 20000) == 0, "pull: {}", gsync_request_error(req));
  gsync_request_free(req);
  if (has(pair, 'S')) {
    // Plain SGD of every push, each weighing 1 of 2, in whatever order:
    // the declared values less lr x the mean gradient of every clock.
    for (size_t i = 0; i < kPsCount; i++) {
      double want = init(i);
      for (uint64_t c = 0; c < kClocks; c++)
        for (int w = 0; w < 2; w++) want -= double(s.opts.lr) * grad(w, c, i) / 2;
      RANK_CHECK(std::abs(buf[i] - want) <= 1e-5 * (1 + std::abs(want)),
                 "element {}: {:.9g}, want {:.9g}", i, buf[i], want);
    }
    return 0;
  }
  const std::vector<float> want = reference(s, {1, 1}, kPsCount, kClocks);
  for (size_t i = 0; i < kPsCount; i++)
    RANK_CHECK(std::memcmp(&buf[i], &want[i], 4) == 0, "element {}: {:.9g}, want {:.9g}", i,
               buf[i], want[i]);
  return 0;
}

// The allreduce's part: 5 sums of rank-dependent values, checked (int8
// within its bound); with the guard, a NaN of rank 1 fails the step on
// both ranks with GSYNC_ERR_ANOMALY.
int allreduce_part(gsync_comm_t* comm, const std::string& pair, int r) {
  void* mem;
  RANK_CHECK(gsync_alloc(comm, kArCount * 4, &mem) == 0, "{}", gsync_last_error());
  auto* buf = static_cast<float*>(mem);
  for (uint64_t step = 0; step < 6; step++) {
    const bool nan_step = has(pair, 'G') && step == 5;
    for (size_t i = 0; i < kArCount; i++) buf[i] = float(r + 1) + float(i % 7);
    if (nan_step && r == 1) buf[17] = std::numeric_limits<float>::quiet_NaN();
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 2, step, buf, kArCount, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "{}", gsync_last_error());
    const int rc = gsync_wait(req, 20000);
    const std::string err = gsync_request_error(req);
    gsync_request_free(req);
    if (nan_step) {
      RANK_CHECK(rc == GSYNC_ERR_ANOMALY, "step {}: {} ({}), not the guard's verdict", step, rc,
                 err);
      continue;
    }
    RANK_CHECK(rc == 0, "step {}: {}", step, err);
    for (size_t i = 0; i < kArCount; i++) {
      const float want = 3.0f + 2.0f * float(i % 7);
      const float tol = has(pair, 'C') ? 0.01f * 15.0f : 0.0f;  // int8: a step of the block's max
      RANK_CHECK(std::abs(buf[i] - want) <= tol, "step {} element {}: {}, want {}", step, i,
                 buf[i], want);
    }
  }
  return 0;
}

// X's own part: sums of values spread over 16 orders of magnitude, with
// cancellation, one tensor small enough for the slot path and one that
// takes the two ops. Their bits must be the definition's
// (docs/reproducibility.md), computed here apart from libgsync's code.
float hard_value(int r, size_t i) {
  uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(r) + 7) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  const double mag = std::pow(10.0, -8.0 + 16.0 * static_cast<double>(h >> 11) / 0x1p53);
  if (i % 5 == 0) return r == 0 ? 1e6f + float(i) : -(1e6f + float(i));  // cancels over 2 ranks
  return static_cast<float>((h & 1) ? -mag : mag);
}

float repro_reference(int world, size_t i) {
  std::vector<float> x;
  for (int r = 0; r < world; r++) x.push_back(hard_value(r, i));
  return static_cast<float>(repro_grid_sum(x));
}

int repro_part(gsync_comm_t* comm, int r) {
  for (size_t count : {size_t{1000}, size_t{kArCount}}) {
    void* mem;
    RANK_CHECK(gsync_alloc(comm, count * 4, &mem) == 0, "{}", gsync_last_error());
    auto* buf = static_cast<float*>(mem);
    for (size_t i = 0; i < count; i++) buf[i] = hard_value(r, i);
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 3, count, buf, count, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "{}", gsync_last_error());
    RANK_CHECK(gsync_wait(req, 20000) == 0, "reproducible {}: {}", count, gsync_request_error(req));
    gsync_request_free(req);
    for (size_t i = 0; i < count; i++) {
      const float want = repro_reference(2, i);
      RANK_CHECK(std::memcmp(&buf[i], &want, 4) == 0, "reproducible {} element {}: {:a}, want {:a}",
                 count, i, buf[i], want);
    }
    gsync_free(comm, mem);
  }
  return 0;
}

int rank_of_cell(const testbed::Testbed& bed, const Cell& cell, int r) {
  const std::string& pair = cell.pair;
  gsync_comm_t* comm;
  const int connected = connect_cell(bed, pair, r, &comm);
  if (connected != 0 && !cell.refused.empty()) {  // refused at connect, naming both
    RANK_CHECK(std::strstr(gsync_last_error(), cell.refused.c_str()) != nullptr,
               "connect: {}, not refused naming '{}'", gsync_last_error(), cell.refused);
    return 0;
  }
  RANK_CHECK(connected == 0, "{}", gsync_last_error());
  if (has(pair, 'E')) {
    gsync_world_t w{};
    w.struct_size = sizeof w;
    RANK_CHECK(gsync_world(comm, &w, 20000) == 0, "{}", gsync_last_error());
    RANK_CHECK(w.world_size == 2 && w.hosts == 2, "world {} on {} hosts", w.world_size, w.hosts);
  }
  int rc = ps_job(pair) ? ps_part(comm, pair, r, cell) : 0;
  if (rc == 0 && (!ps_job(pair) || has(pair, 'C') || has(pair, 'G')) && cell.refused.empty())
    rc = allreduce_part(comm, pair, r);
  if (rc == 0 && has(pair, 'X')) rc = repro_part(comm, r);
  if (rc == 0) RANK_CHECK(gsync_barrier(comm, 9, 20000) == 0, "{}", gsync_last_error());
  gsync_close(comm);
  return rc;
}

// T: the job's ops were recorded with their stages, and counted.
void expect_traced(const testbed::Testbed& bed, const std::string& job) {
  for (int h = 0; h < 2; h++) {
    nlohmann::json ops = admin_json(bed.admin_socket(h), "ops");
    size_t traced = 0;
    for (const auto& e : ops.value("recent", nlohmann::json::array()))
      if (e.value("job", "") == job && !e.value("stages", nlohmann::json::array()).empty()) traced++;
    EXPECT_GT(traced, 0u) << "host " << h << ": " << ops.dump().substr(0, 2000);
  }
}

class Compose : public testing::TestWithParam<Cell> {};

TEST_P(Compose, WorksOrIsRefusedNamingBoth) {
  const Cell& cell = GetParam();
  const std::string dir = fs::temp_directory_path() / ("gsync-compose-" + std::to_string(getpid()));
  auto bed = compose_bed(has(cell.pair, 'K') ? std::vector<std::string>{"--checkpoint-dir", dir}
                                              : std::vector<std::string>{});
  ASSERT_TRUE(bed);
  if (kFastLink == "dpdk" || kFastLink == "verbs") {  // the link the cell is about
    nlohmann::json peers = admin_json(bed->admin_socket(0), "peers");
    ASSERT_EQ(peers["peers"][0].value("transport", ""), kFastLink) << peers.dump();
  }
  auto res = run_ranks(2, [&](int r) { return rank_of_cell(*bed, cell, r); }, 120);
  bool failed = false;
  for (size_t r = 0; r < res.size(); r++) {
    EXPECT_EQ(res[r].code, 0) << cell.pair << " rank " << r << ": " << res[r].output;
    failed |= res[r].code != 0;
  }
  for (int h = 0; failed && h < 2; h++) {
    const std::string log = bed->daemon_log(h);
    ADD_FAILURE() << bed->host_id(h) << "'s log, the end:\n"
                  << log.substr(log.size() > 6000 ? log.size() - 6000 : 0);
  }
  if (has(cell.pair, 'T') && cell.refused.empty()) expect_traced(*bed, "compose-" + cell.pair);
  if (has(cell.pair, 'K') && cell.refused.empty()) {
    // Every 2 clocks of 6, on both hosts' shards: the job's files are there.
    size_t files = 0;
    if (fs::exists(dir))
      for (const auto& e : fs::recursive_directory_iterator(dir))
        files += e.path().extension() == ".ckpt";
    EXPECT_GE(files, 2u) << "no checkpoints of both shards in " << dir;
  }
  fs::remove_all(dir);
}

const char* kElasticPs = "an elastic job runs allreduce, broadcast and barrier; the parameter server";

// The pairs of the features with each other (over TCP), or of the links
// (D: a DPDK link, M: membership on etcd) with each feature.
std::vector<Cell> cells() {
  if (kLinks != "tcp") {
    const char link = kFastLink == "dpdk" ? 'D' : kFastLink == "verbs" ? 'V' : 'M';
    std::vector<Cell> out;
    for (const char* f : {"C", "E", "B", "S", "L", "K", "G", "T", "X"})
      out.push_back({std::string(1, link) + f, ""});
    return out;
  }
  return {Cell{"CE", ""}, Cell{"CB", ""}, Cell{"CS", ""}, Cell{"CL", ""}, Cell{"CK", ""},
          Cell{"CG", ""}, Cell{"CT", ""},
          Cell{"EB", kElasticPs}, Cell{"ES", kElasticPs}, Cell{"EL", kElasticPs},
          Cell{"EK", kElasticPs}, Cell{"EG", ""}, Cell{"ET", ""},
          Cell{"BL", ""}, Cell{"BK", ""}, Cell{"BG", ""}, Cell{"BT", ""},
          Cell{"SL", ""}, Cell{"SK", ""}, Cell{"SG", "the anomaly guard"}, Cell{"ST", ""},
          Cell{"LK", ""}, Cell{"LG", ""}, Cell{"LT", ""},
          Cell{"KG", ""}, Cell{"KT", ""},
          Cell{"GT", ""},
          Cell{"XC", ""}, Cell{"XE", ""}, Cell{"XB", ""}, Cell{"XS", "reproducible pushes need the bsp"}, Cell{"XL", ""},
          Cell{"XK", ""}, Cell{"XG", "the anomaly guard cannot check"}, Cell{"XT", ""}};
}

INSTANTIATE_TEST_SUITE_P(Pairs, Compose, testing::ValuesIn(cells()),
                         [](const testing::TestParamInfo<Cell>& i) { return i.param.pair; });

}  // namespace
}  // namespace gsync::test
