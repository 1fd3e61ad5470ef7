// SPDX-License-Identifier: Apache-2.0
//
// What an op moved on each peer link, in the ops report and in gsyncctl
// trace (docs/operations.md, "Traces"), on a two-host test bed: a ring job
// whose plan is known (65536-byte chunks) has, on each host and per op, a
// send per chunk on the link to its peer (issued, then completed) and an
// arrival per chunk on the link from it, all inside the op; an op of more
// chunks than the bound keeps the bound and counts the rest; an eager op's
// messages have no completion. The trace of both daemons draws a track per
// link, puts the second daemon on the first one's clock with the probe's
// offset (about 0 on one machine) and says so in its metadata. A bed that
// records nothing has no transfers to draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using nlohmann::json;
using tools::run_command;

constexpr uint64_t kChunk = 65536;
constexpr size_t kChunks = 8;
constexpr int kOps = 4;
constexpr size_t kBigChunks = 300;  // 2 transfers a chunk per host: 600, past the bound
constexpr size_t kBound = 512;      // WireLog::kMaxEvents
constexpr size_t kEagerCount = 256;

// Two ranks, one per host, run `ops` allreduces of count floats (key) as
// job with the given algorithm and chunk size; the sums are checked.
void run_job(const testbed::Testbed& bed, const std::string& job, const char* algo,
             uint64_t chunk, const std::vector<std::pair<uint64_t, size_t>>& ops) {
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_with(bed.socket(r), job, 2, r, 0, 1, &comm,
                            [&](gsync_config_t& cfg) {
                              cfg.timeout_ms = 30000;
                              cfg.arena_bytes = 64 << 20;
                              cfg.algorithm = algo;
                              cfg.chunk_bytes = chunk;
                            }) == 0,
               "{}", gsync_last_error());
    uint64_t step = 0;
    for (const auto& [key, count] : ops) {
      std::vector<float> buf(count, float(r + 1));
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, key, step++, buf.data(), buf.size(), GSYNC_FLOAT32,
                                 GSYNC_SUM, 0, &req) == 0,
                 "{}", gsync_last_error());
      RANK_CHECK(gsync_wait(req, 30000) == 0, "{}", gsync_request_error(req));
      gsync_request_free(req);
      RANK_CHECK(buf.front() == 3.0f && buf.back() == 3.0f, "sum {} {}", buf.front(), buf.back());
    }
    gsync_close(comm);
    return 0;
  });
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
}

// An op of the ops report: its first rank's arrival and its end.
std::pair<int64_t, int64_t> span_of(const json& op) {
  int64_t begin = op["finished_ns"];
  for (const auto& a : op["arrivals"]) begin = std::min<int64_t>(begin, a["ns"]);
  return {begin, op["finished_ns"]};
}

// One host's ops of job in its ops report, checked transfer by transfer:
// every op has `sends` on the link to the peer and as many arrivals on the
// link from it (chunks 0..sends-1 each, unless bounded), all inside the op,
// each send completed inside it too (eager: no completion).
void check_ops_report(const json& ops, const std::string& job, const std::string& self,
                      const std::string& peer, size_t want_ops, size_t sends, bool eager) {
  size_t seen = 0;
  for (const auto& op : ops["recent"]) {
    if (op["job"] != job) continue;
    seen++;
    const auto [begin, end] = span_of(op);
    const json& wire = op["wire"];
    ASSERT_TRUE(wire.is_object()) << op.dump();
    EXPECT_EQ(wire["dropped"], 0) << op.dump();
    std::set<uint64_t> out_chunks, in_chunks;
    for (const auto& l : wire["links"]) {
      const bool out = l["from"] == self;
      EXPECT_EQ(l[out ? "to" : "from"], peer) << l.dump();
      EXPECT_EQ(l[out ? "from" : "to"], self) << l.dump();
      for (const auto& c : l["chunks"]) {
        (out ? out_chunks : in_chunks).insert(c[0].get<uint64_t>());
        const int64_t at = c[2], done = c[3];
        EXPECT_GE(at, begin) << c.dump() << " in " << op.dump();
        EXPECT_LE(at, end) << c.dump();
        if (out && !eager) {
          EXPECT_GE(done, at) << c.dump();
          EXPECT_LE(done, end) << c.dump();
        } else {
          EXPECT_EQ(done, 0) << c.dump();  // an arrival, or a message
        }
      }
      EXPECT_EQ(l["chunks"].size(), sends) << l.dump();
    }
    EXPECT_EQ(out_chunks.size(), sends) << op.dump();
    EXPECT_EQ(in_chunks.size(), sends) << op.dump();
    if (!out_chunks.empty()) {
      EXPECT_EQ(*out_chunks.rbegin(), sends - 1);
    }
  }
  EXPECT_EQ(seen, want_ops) << ops.dump().substr(0, 2000);
}

struct TraceOp {
  double ts = 0, end = 0;
  json args;
};

TEST(Trace, EachChunkOnTheWireIsDrawnOnItsPeerLinkOnOneClock) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  auto bed = make_bed({1, 1}, "", 30000);
  ASSERT_TRUE(bed);
  std::vector<std::pair<uint64_t, size_t>> ring_ops;
  for (int s = 0; s < kOps; s++) ring_ops.push_back({1, kChunks * kChunk / 4});
  ring_ops.push_back({2, kBigChunks * kChunk / 4});
  run_job(*bed, "tw", "ring", kChunk, ring_ops);
  run_job(*bed, "te", "direct", 0, {{3, kEagerCount}, {3, kEagerCount}});

  for (int h = 0; h < 2; h++) {
    SCOPED_TRACE("host " + bed->host_id(h));
    json ops = admin_json(bed->admin_socket(h), "ops");
    ASSERT_TRUE(ops.is_object() && ops["recent"].is_array()) << ops.dump();
    EXPECT_EQ(ops["host"], bed->host_id(h));
    EXPECT_TRUE(ops["realtime_ns"].is_number_integer()) << ops.dump().substr(0, 300);
    json ring = json::array(), big = json::array();
    for (const auto& op : ops["recent"])
      if (op["job"] == "tw") (op["key"] == 1 ? ring : big).push_back(op);
    ASSERT_EQ(ring.size(), size_t(kOps));
    ASSERT_EQ(big.size(), 1u);
    EXPECT_EQ(ring[0]["plan"], fmt::format("ring, {} chunks of {} bytes; job", kChunks, kChunk));
    check_ops_report({{"recent", ring}}, "tw", bed->host_id(h), bed->host_id(1 - h), kOps, kChunks,
                     false);
    check_ops_report(ops, "te", bed->host_id(h), bed->host_id(1 - h), 2, 1, true);
    // The bound: the first kBound transfers kept, the rest counted.
    size_t kept = 0;
    for (const auto& l : big[0]["wire"]["links"]) kept += l["chunks"].size();
    EXPECT_EQ(kept, kBound);
    EXPECT_EQ(big[0]["wire"]["dropped"], 2 * kBigChunks - kBound);
    EXPECT_EQ(big[0]["wire"]["limit"], kBound);
  }

  const std::string file = bed->dir() + "/trace.json";
  const std::string out = run_command(fmt::format("{} trace -o {} {} {} 2>&1", ctl, file,
                                                  bed->admin_socket(0), bed->admin_socket(1)));
  EXPECT_NE(out.find(fmt::format("{}: {} ops of 2 daemons", file, 2 * (kOps + 1 + 2))),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("(h2): h2's wall clock runs"), std::string::npos) << out;
  const json t = json::parse(run_command("cat " + file), nullptr, false);
  ASSERT_TRUE(t.is_object() && t["traceEvents"].is_array()) << out;

  // The offsets: h2 on h1's clock, by about 0 on one machine (within the
  // probe's uncertainty, and a millisecond for a thread descheduled while
  // it read its two clocks).
  const json& clock = t["metadata"]["clock"];
  ASSERT_EQ(clock["daemons"].size(), 2u) << clock.dump();
  EXPECT_EQ(clock["reference"], bed->admin_socket(0));
  EXPECT_EQ(clock["daemons"][0]["shift_ns"], 0);
  const json& d2 = clock["daemons"][1];
  EXPECT_EQ(d2["host"], bed->host_id(1)) << d2.dump();
  ASSERT_EQ(d2["applied"], true) << d2.dump();
  ASSERT_TRUE(d2["probe_uncertainty_us"].is_number()) << d2.dump();
  const double slack_ns = d2["probe_uncertainty_us"].get<double>() * 1e3 + 1e6;
  EXPECT_LE(std::abs(d2["shift_ns"].get<double>()), slack_ns) << d2.dump();

  // Per daemon: the link tracks, and each ring op's 2 x kChunks transfers
  // inside its span, every arrival drawn from its sender's issue.
  std::map<int, std::set<std::string>> tracks;
  std::map<std::pair<int, std::string>, TraceOp> op_spans;
  std::vector<json> wire;
  for (const auto& e : t["traceEvents"]) {
    const int pid = e["pid"];
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[pid].insert(e["args"]["name"]);
    if (e["ph"] == "X" && e["cat"] == "op")
      op_spans[{pid, e["name"]}] = {e["ts"], e["ts"].get<double>() + e["dur"].get<double>(),
                                    e["args"]};
    if (e.value("cat", "") == "wire") wire.push_back(e);
  }
  // A link's spans follow one another (Perfetto draws no overlapping
  // spans on one track).
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans_on;
  for (const auto& e : wire)
    if (e["ph"] == "X")
      spans_on[{e["pid"], e["tid"]}].push_back(
          {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  for (auto& [track, spans] : spans_on) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); i++)
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-3)
          << "pid " << track.first << " tid " << track.second << ": span " << i;
  }
  std::map<std::pair<int, std::string>, int> per_op, arrivals_matched;
  for (const auto& e : wire) {
    const int pid = e["pid"];
    const std::string op = e["args"]["op"];
    auto it = op_spans.find({pid, op});
    ASSERT_NE(it, op_spans.end()) << e.dump();
    if (e["args"]["job"] != "tw" || it->second.args["transfers_dropped"] != 0) continue;
    per_op[{pid, op}]++;
    const bool out = e["args"]["from"] == bed->host_id(pid - 1);
    const double ts = e["ts"], end = ts + e.value("dur", 0.0);
    EXPECT_LE(end, it->second.end + 1e-3) << e.dump();
    if (out) {
      EXPECT_GE(ts, it->second.ts - 1e-3) << e.dump();
    } else {
      EXPECT_GE(e["args"]["seen_us"].get<double>(), it->second.ts - 1e-3) << e.dump();
    }
    if (!out && e["args"].contains("issued_us")) arrivals_matched[{pid, op}]++;
  }
  for (int pid : {1, 2}) {
    EXPECT_TRUE(tracks[pid].count("h1 -> h2")) << pid;
    EXPECT_TRUE(tracks[pid].count("h2 -> h1")) << pid;
    for (int s = 0; s < kOps; s++) {
      const std::string op = fmt::format("allreduce key 1 step {}", s);
      const std::pair<int, std::string> at{pid, op};
      EXPECT_EQ(per_op[at], int(2 * kChunks)) << pid << " " << op;
      EXPECT_EQ(arrivals_matched[at], int(kChunks)) << pid << " " << op;
      EXPECT_EQ(op_spans[at].args["transfers"], 2 * kChunks) << pid << " " << op;
    }
    const std::pair<int, std::string> big_at{pid, fmt::format("allreduce key 2 step {}", kOps)};
    const json& big = op_spans[big_at].args;
    EXPECT_EQ(big["transfers"], kBound) << big.dump();
    EXPECT_EQ(big["transfers_dropped"], 2 * kBigChunks - kBound) << big.dump();
  }
}

// [trace] record = false: the engine is given no log; nothing is kept,
// and the trace has no transfers.
TEST(Trace, RecordOffKeepsNoTransfers) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  auto bed = make_bed({1, 1}, "", 30000, {"--trace-record", "false"});
  ASSERT_TRUE(bed);
  run_job(*bed, "tw", "ring", kChunk, {{1, kChunks * kChunk / 4}, {1, kChunks * kChunk / 4}});
  for (int h = 0; h < 2; h++) {
    json ops = admin_json(bed->admin_socket(h), "ops");
    EXPECT_EQ(ops["recording"]["on"], false) << ops.dump();
    EXPECT_TRUE(ops["recent"].empty()) << ops.dump();
  }
  const std::string file = bed->dir() + "/trace.json";
  const std::string out = run_command(fmt::format("{} trace -o {} {} {} 2>&1", ctl, file,
                                                  bed->admin_socket(0), bed->admin_socket(1)));
  EXPECT_NE(out.find(fmt::format("{}: 0 ops of 2 daemons", file)), std::string::npos) << out;
  const std::string text = run_command("cat " + file);
  EXPECT_EQ(text.find("\"wire\""), std::string::npos) << text.substr(0, 2000);
  EXPECT_EQ(text.find(" -> "), std::string::npos) << text.substr(0, 2000);
}

}  // namespace
}  // namespace gsync::test
