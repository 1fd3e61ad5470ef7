// SPDX-License-Identifier: Apache-2.0
//
// Compression between hosts (docs/compression.md) on real clusters: every
// algorithm with every codec, on 2, 3 and 4 hosts in one rack, two racks
// and racks of unequal sizes, at sizes no chunk divides. Each rank checks
// its result against the exact sum within the codec's bound and reports
// the bits it got; every rank of the job must get the same bits. Then:
// bytes on the wire against the bytes they carried, a compressed and a
// plain job side by side, hosts that disagree on the codec, and options
// that are refused before anything is sent.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"
#include "tools/testbed/testbed.h"

namespace gsync::test {
namespace {

struct Bed {
  std::vector<int> racks;           // hosts per rack
  std::vector<int> ranks_per_host;  // local ranks of each host
  std::string algo;                 // daemon --algo
};

std::unique_ptr<testbed::Testbed> make_bed(const Bed& b) {
  return test::make_bed(b.racks, b.algo, 30000);
}

// Rank r's value i: dense in [-1, 1), or (sparse) nonzero at one index in
// 400, the same on every rank, so that a host's fold keeps a quarter of 1%
// nonzero and a top-k of 1% sends all of it.
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
float value(int rank, size_t i, uint64_t step, bool sparse) {
  if (sparse && i % 400 != 7) return 0.0f;
  uint64_t h = mix((uint64_t(rank) << 40) ^ (step << 32) ^ i);
  return static_cast<float>(static_cast<double>(h >> 11) / double(1ull << 53) * 2.0 - 1.0);
}

struct Codec {
  std::string text;  // gsync_compression_parse
  double bound;      // relative L2 error against the exact sum
  bool sparse;       // the data a top-k sends whole
  bool lossless_here;  // nothing packed (cross_rack on one rack): exact
};

// One allreduce per (codec, count, step) in order; reports "bits <case>
// <hash>" for each so the parent can compare ranks.
int run_rank(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
             int rank, const std::vector<Codec>& codecs, const std::vector<size_t>& counts) {
  gsync_comm_t* comm;
  RANK_CHECK(connect_place(bed, job, p, rank, &comm) == 0, "{}", gsync_last_error());
  size_t most = *std::max_element(counts.begin(), counts.end());
  void* mem;
  RANK_CHECK(gsync_alloc(comm, most * 4, &mem) == 0, "{}", gsync_last_error());
  auto* buf = static_cast<float*>(mem);
  int world = static_cast<int>(p.size());
  uint64_t key = 0;
  for (const auto& c : codecs) {
    gsync_allreduce_opts_t o;
    gsync_allreduce_opts_init(&o);
    RANK_CHECK(gsync_compression_parse(c.text.c_str(), &o.compression) == 0, "{}",
               gsync_last_error());
    for (size_t count : counts) {
      key++;
      for (uint64_t step = 0; step < 2; step++) {
        for (size_t i = 0; i < count; i++) buf[i] = value(rank, i, step, c.sparse);
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce_ex(comm, key, step, buf, count, GSYNC_FLOAT32, GSYNC_SUM, &o,
                                      &req) == 0,
                   "{} count {}: {}", c.text, count, gsync_last_error());
        int rc = gsync_wait(req, 60000);
        RANK_CHECK(rc == 0, "{} count {} step {}: {}", c.text, count, step,
                   gsync_request_error(req));
        gsync_request_free(req);
        double err = 0, norm = 0;
        uint64_t bits = 1469598103934665603ull;
        for (size_t i = 0; i < count; i++) {
          double want = 0;
          for (int r = 0; r < world; r++) want += value(r, i, step, c.sparse);
          err += (buf[i] - want) * (buf[i] - want);
          norm += want * want;
          uint32_t b;
          std::memcpy(&b, &buf[i], 4);
          bits = (bits ^ b) * 1099511628211ull;
        }
        double rel = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
        // From the second step on, the output also carries what the step
        // before dropped (error feedback): up to twice one step's error.
        double bound = c.bound * double(step + 1);
        RANK_CHECK(rel <= bound, "{} count {} step {}: relative error {} above {}", c.text,
                   count, step, rel, bound);
        if (c.lossless_here)
          RANK_CHECK(rel <= 1e-6, "{} count {}: {} though nothing is packed", c.text, count, rel);
        // A codec that is not a no-op: dense data loses something. (5
        // values may go eagerly, uncompressed.)
        if (!c.lossless_here && !c.sparse && count > 5)
          RANK_CHECK(rel > 1e-6, "{} count {}: exact, so nothing was compressed", c.text, count);
        report(fmt::format("bits {}/{}/{} {:x}\n", c.text, count, step, bits));
      }
    }
  }
  // What the job's error feedback holds on this host, while it still runs.
  if (p[size_t(rank)].local_rank == 0)
    report(fmt::format("ef {}\n", job_count(bed.admin_socket(p[size_t(rank)].host), job,
                                            "error_feedback_bytes")));
  RANK_CHECK(gsync_barrier(comm, 1, 30000) == 0, "barrier: {}", gsync_last_error());
  gsync_close(comm);
  return 0;
}

// The error feedback bytes the ranks reported, summed.
int64_t ef_held(const std::vector<ChildResult>& res) {
  int64_t total = 0;
  for (const auto& r : res) {
    std::istringstream in(r.output);
    std::string word;
    int64_t v = 0;
    while (in >> word)
      if (word == "ef" && in >> v) total += v;
  }
  return total;
}

// Every rank's result bits, case by case, are the same.
void expect_same_bits(const std::vector<ChildResult>& res) {
  std::map<std::string, std::set<std::string>> seen;
  for (const auto& r : res) {
    std::istringstream in(r.output);
    std::string word, which, hash;
    while (in >> word)
      if (word == "bits" && in >> which >> hash) seen[which].insert(hash);
  }
  EXPECT_FALSE(seen.empty());
  for (const auto& [which, hashes] : seen)
    EXPECT_EQ(hashes.size(), 1u) << which << ": the ranks ended with different bits";
}

void run_job(const testbed::Testbed& bed, const std::string& job, const std::vector<int>& per_host,
             const std::vector<Codec>& codecs, const std::vector<size_t>& counts) {
  auto p = places(per_host);
  auto res = run_ranks(static_cast<int>(p.size()),
                       [&](int r) { return run_rank(bed, job, p, r, codecs, counts); }, 600);
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
  expect_same_bits(res);
}

std::vector<Codec> every_codec(const std::string& hops, bool one_rack) {
  bool plain = hops == "cross_rack" && one_rack;
  return {{"fp16@" + hops, 2e-3, false, plain},
          {"bf16@" + hops, 1e-2, false, plain},
          {"int8@" + hops, 3e-2, false, plain},
          {"int8:256@" + hops, 3e-2, false, plain},
          {"topk:0.01@" + hops, 1e-5, true, plain}};
}

class Algorithms : public ::testing::TestWithParam<Bed> {};

TEST_P(Algorithms, EveryCodecEndsTheSameOnEveryRankWithinItsBound) {
  const Bed& b = GetParam();
  auto bed = make_bed(b);
  ASSERT_TRUE(bed);
  bool one_rack = b.racks.size() == 1;
  // 5 values go eagerly (one message, not compressed) under direct, tree
  // and doubling; 30011 and 262147 divide by no chunk size.
  std::vector<size_t> counts = {5, 30011, 262147};
  auto codecs = every_codec("cross_host", one_rack);
  auto rack_codecs = every_codec("cross_rack", one_rack);
  codecs.push_back(rack_codecs[2]);  // int8 between racks only
  run_job(*bed, "codecs", b.ranks_per_host, codecs, counts);
  for (int h = 0; h < bed->hosts(); h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
}

INSTANTIATE_TEST_SUITE_P(
    Cluster, Algorithms,
    ::testing::Values(Bed{{2}, {1, 2}, "ring"}, Bed{{2, 2}, {1, 1, 2, 1}, "ring"},
                      Bed{{3}, {1, 1, 1}, "direct"}, Bed{{2, 1}, {2, 1, 1}, "direct"},
                      Bed{{3}, {1, 2, 1}, "tree"}, Bed{{2, 2}, {1, 1, 1, 1}, "tree"},
                      Bed{{3}, {1, 1, 1}, "doubling"}, Bed{{2, 2}, {1, 1, 1, 2}, "doubling"},
                      Bed{{2, 1}, {1, 1, 2}, "hier"}, Bed{{2, 2}, {2, 1, 1, 1}, "hier"}),
    [](const auto& info) {
      std::string name = info.param.algo;
      for (int r : info.param.racks) name.append("_").append(std::to_string(r));
      return name;
    });

// Bytes written between the racks against the fp32 bytes they stand for,
// from the daemons' own counters (gsyncctl peers).
std::pair<uint64_t, uint64_t> cross_rack_payload(const testbed::Testbed& bed) {
  uint64_t wire = 0, logical = 0;
  for (int h = 0; h < bed.hosts(); h++) {
    nlohmann::json j = admin_json(bed.admin_socket(h), "peers");
    if (!j.is_object() || !j["peers"].is_array()) continue;
    std::string rack = j["self"].value("rack", "");
    for (const auto& peer : j["peers"]) {
      if (peer.value("rack", "") == rack) continue;
      wire += peer.value("payload_wire_bytes", uint64_t{0});
      logical += peer.value("payload_logical_bytes", uint64_t{0});
    }
  }
  return {wire, logical};
}

// int8 between racks: about a quarter of the bytes cross the uplink, and
// the peers report says so; a plain job's bytes count the same both ways.
TEST(Compression, TheUplinkCarriesAQuarterOfTheBytesAndThePeersReportSaysSo) {
  auto bed = make_bed({{2, 2}, {1, 1, 1, 1}, "hier"});
  ASSERT_TRUE(bed);
  run_job(*bed, "plain", {1, 1, 1, 1}, {{"none", 1e-6, false, true}}, {1u << 20});
  auto [wire0, logical0] = cross_rack_payload(*bed);
  EXPECT_GT(wire0, 0u);
  EXPECT_EQ(wire0, logical0) << "uncompressed bytes stand for themselves";
  run_job(*bed, "int8", {1, 1, 1, 1}, {{"int8", 3e-2, false, false}}, {1u << 20});
  auto [wire1, logical1] = cross_rack_payload(*bed);
  double ratio = double(logical1 - logical0) / double(wire1 - wire0);
  EXPECT_GE(ratio, 3.8) << (logical1 - logical0) << " logical bytes in " << (wire1 - wire0)
                        << " on the wire";
  EXPECT_LE(ratio, 4.0);
}

// A compressed job and a plain one on the same cluster at the same time.
TEST(Compression, ACompressedAndAPlainJobRunSideBySide) {
  auto bed = make_bed({{2, 2}, {}, "auto"});
  ASSERT_TRUE(bed);
  auto pa = places({1, 1, 1, 1}), pb = places({1, 1, 1, 1});
  std::vector<size_t> counts = {100003, 1u << 20};
  std::vector<Codec> a = {{"int8@cross_host", 3e-2, false, false}};
  std::vector<Codec> b = {{"none", 1e-6, false, true}};
  auto res = run_ranks(8, [&](int r) {
    return r < 4 ? run_rank(*bed, "compressed", pa, r, a, counts)
                 : run_rank(*bed, "plain", pb, r - 4, b, counts);
  });
  for (size_t r = 0; r < res.size(); r++)
    EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
  std::vector<ChildResult> compressed(res.begin(), res.begin() + 4), plain(res.begin() + 4, res.end());
  expect_same_bits(compressed);
  expect_same_bits(plain);
  // gsyncctl jobs: the compressed job's plans hold error feedback, at least
  // one tensor's worth per host; the plain job's none.
  EXPECT_GE(ef_held(compressed), int64_t{4} * (1 << 20) * 4);
  EXPECT_EQ(ef_held(plain), 0);
}

// Hosts whose ranks ask for different codecs: the op fails on every rank
// before any data moves, naming both hosts and both codecs.
TEST(Compression, HostsThatDisagreeOnTheCodecAreNamedWithTheirCodecs) {
  auto bed = make_bed({{2}, {1, 1}, "ring"});
  ASSERT_TRUE(bed);
  auto p = places({1, 1});
  auto res = run_ranks(2, [&](int rank) {
    gsync_comm_t* comm;
    gsync_config_t cfg;
    gsync_config_init(&cfg);
    std::string sock = bed->socket(rank);
    cfg.socket_path = sock.c_str();
    cfg.job_id = "disagree";
    cfg.world_size = 2;
    cfg.rank = rank;
    cfg.local_size = 1;
    RANK_CHECK(gsync_compression_parse(rank == 0 ? "int8" : "fp16@cross_host",
                                       &cfg.compression) == 0, "{}", gsync_last_error());
    cfg.compression.hops = GSYNC_HOPS_CROSS_HOST;
    RANK_CHECK(gsync_connect(&cfg, &comm) == 0, "{}", gsync_last_error());
    void* buf;
    RANK_CHECK(gsync_alloc(comm, 1 << 20, &buf) == 0, "{}", gsync_last_error());
    gsync_request_t* req;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, 1 << 18, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "{}", gsync_last_error());
    int rc = gsync_wait(req, 60000);
    report(fmt::format("{}\n", gsync_request_error(req)));
    RANK_CHECK(rc == GSYNC_ERR_MISMATCH, "got {}", rc);
    gsync_request_free(req);
    gsync_close(comm);
    return 0;
  });
  for (const auto& r : res) {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("disagree on compression"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("int8 (blocks of 1024, cross_host)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("fp16 (cross_host)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(bed->host_id(0)), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(bed->host_id(1)), std::string::npos) << r.output;
  }
}

// Bad options: GSYNC_ERR_INVALID naming the field, and nothing reaches the
// daemon.
TEST(Compression, BadOptionsAreRefusedNamingTheFieldWithNothingSent) {
  DaemonProcess d;
  gsync_comm_t* comm;
  ASSERT_EQ(connect_rank(d.socket(), "bad-options", 1, 0, &comm), 0) << gsync_last_error();
  void* buf;
  ASSERT_EQ(gsync_alloc(comm, 4096, &buf), 0);
  struct Bad {
    std::function<void(gsync_allreduce_opts_t&)> set;
    int dtype, op;
    std::string names;
  };
  std::vector<Bad> cases = {
      {[](auto& o) { o.compression.codec = GSYNC_CODEC_TOPK; o.compression.topk_fraction = 1.5f; },
       GSYNC_FLOAT32, GSYNC_SUM, "topk fraction 1.5 is outside (0, 1]"},
      {[](auto& o) { o.compression.codec = GSYNC_CODEC_TOPK; o.compression.topk_fraction = -0.1f; },
       GSYNC_FLOAT32, GSYNC_SUM, "topk fraction -0.1"},
      {[](auto& o) { o.compression.codec = GSYNC_CODEC_INT8; o.compression.block = 100; },
       GSYNC_FLOAT32, GSYNC_SUM, "int8 block 100 is not a positive multiple of 64"},
      {[](auto& o) { o.compression.codec = GSYNC_CODEC_INT8; }, GSYNC_INT32, GSYNC_SUM,
       "codec int8 on int32 data"},
      {[](auto& o) { o.compression.codec = GSYNC_CODEC_FP16; }, GSYNC_FLOAT32, GSYNC_MAX,
       "codec fp16 with op max"},
      {[](auto& o) { o.compression.codec = 9; }, GSYNC_FLOAT32, GSYNC_SUM, "codec 9"},
      {[](auto& o) { o.compression.codec = GSYNC_CODEC_INT8; o.compression.hops = 7; },
       GSYNC_FLOAT32, GSYNC_SUM, "hops 7"},
  };
  for (const auto& c : cases) {
    gsync_allreduce_opts_t o;
    gsync_allreduce_opts_init(&o);
    c.set(o);
    gsync_request_t* req = nullptr;
    EXPECT_EQ(gsync_allreduce_ex(comm, 1, 0, buf, 16, c.dtype, c.op, &o, &req), GSYNC_ERR_INVALID)
        << c.names;
    EXPECT_EQ(req, nullptr);
    EXPECT_NE(std::string(gsync_last_error()).find(c.names), std::string::npos)
        << gsync_last_error();
  }
  gsync_compression_t parsed;
  EXPECT_EQ(gsync_compression_parse("zstd", &parsed), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("codec 'zstd'"), std::string::npos)
      << gsync_last_error();
  EXPECT_EQ(gsync_compression_parse("topk:0", &parsed), GSYNC_ERR_INVALID);
  EXPECT_EQ(gsync_compression_parse("int8@uplink", &parsed), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("hops 'uplink'"), std::string::npos);
  ASSERT_EQ(gsync_compression_parse("topk:0.05@all,noef", &parsed), 0) << gsync_last_error();
  EXPECT_EQ(parsed.codec, GSYNC_CODEC_TOPK);
  EXPECT_EQ(parsed.hops, GSYNC_HOPS_ALL);
  EXPECT_FLOAT_EQ(parsed.topk_fraction, 0.05f);
  EXPECT_EQ(parsed.error_feedback, 0);
  EXPECT_EQ(submitted(d.admin_socket(), "bad-options", 0), 0u) << "nothing may reach the daemon";
  // A job's own codec applies only where it can: an int32 allreduce of a
  // job with int8 goes uncompressed, not refused.
  gsync_close(comm);
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.socket_path = d.socket().c_str();
  cfg.job_id = "job-codec";
  ASSERT_EQ(gsync_compression_parse("int8", &cfg.compression), 0);
  ASSERT_EQ(gsync_connect(&cfg, &comm), 0) << gsync_last_error();
  ASSERT_EQ(gsync_alloc(comm, 4096, &buf), 0);
  auto* ints = static_cast<int32_t*>(buf);
  for (int i = 0; i < 16; i++) ints[i] = i;
  gsync_request_t* req;
  ASSERT_EQ(gsync_allreduce(comm, 2, 0, buf, 16, GSYNC_INT32, GSYNC_SUM, 0, &req), 0)
      << gsync_last_error();
  EXPECT_EQ(gsync_wait(req, 10000), 0) << gsync_request_error(req);
  gsync_request_free(req);
  EXPECT_EQ(ints[15], 15);
  cfg.compression.topk_fraction = 3;
  cfg.compression.codec = GSYNC_CODEC_TOPK;
  gsync_comm_t* refused = nullptr;
  EXPECT_EQ(gsync_connect(&cfg, &refused), GSYNC_ERR_INVALID);
  EXPECT_NE(std::string(gsync_last_error()).find("cfg.compression: topk fraction 3"),
            std::string::npos)
      << gsync_last_error();
  gsync_close(comm);
}

}  // namespace
}  // namespace gsync::test
