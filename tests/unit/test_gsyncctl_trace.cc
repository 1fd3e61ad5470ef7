// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl trace from replies written here (tools/gsyncctl/trace.h,
// trace_clock.h): the clock shift of a daemon on another machine from its
// ops reply's two clocks and the first daemon's probe, applied to every
// time it drew and named in the metadata; the reasons a daemon keeps its
// own clock; each transfer on its peer link's track, an arrival drawn from
// its sender's issue. A real two-host bed: tests/integration/test_trace.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/gsyncctl/trace.h"
#include "tools/gsyncctl/trace_clock.h"

namespace gsync::cli {
namespace {

using nlohmann::json;

// Host h1 boots first: its monotonic clock is far ahead of h2's, and h2's
// wall clock runs 250 us ahead of h1's.
constexpr int64_t kMono1 = 900'000'000'000, kWall1 = 1'800'000'000'000'000'000;
constexpr int64_t kMono2 = 100'000'000'000, kWall2 = kWall1 + 250'000;
// h2's monotonic time t is h1's t + kShift.
constexpr int64_t kShift = (kWall2 - kMono2) - (kWall1 - kMono1) - 250'000;

// A one-chunk ring op of two hosts seen from `self`: it sends chunk 0
// (issued at `sent`, done 5 us later) and receives chunk 0 at `seen`; the
// first host sends the partial sum, the second the final one.
json ring_op(const std::string& self, const std::string& peer, int64_t begin, int64_t sent,
             int64_t seen) {
  const bool first = self == "h1";
  const char* out = first ? "partial sum" : "final sum";
  const char* in = first ? "final sum" : "partial sum";
  return {{"job", "j"},
          {"key", 1},
          {"step", 0},
          {"op", "allreduce"},
          {"bytes", 65536},
          {"code", 0},
          {"arrivals", {{{"rank", 0}, {"ns", begin}}}},
          {"stages", json::array()},
          {"wire",
           {{"links",
             {{{"from", self}, {"to", peer}, {"chunks", {{0, out, sent, sent + 5000}}}},
              {{"from", peer}, {"to", self}, {"chunks", {{0, in, seen, 0}}}}}},
            {"dropped", 3},
            {"limit", 512}}},
          {"finished_ns", seen + 1000}};
}

std::vector<TraceSource> two_hosts() {
  // In true time: h1 begins at A, h1 sends at A+10us; h2 begins at A+2us
  // (on h1's clock), sends at A+20us; each sees the other's chunk 30 us
  // after it was sent.
  const int64_t a = kMono1 + 1'000'000;
  json ops1 = {{"host", "h1"}, {"now_ns", kMono1}, {"realtime_ns", kWall1},
               {"recent", {ring_op("h1", "h2", a, a + 10'000, a + 50'000)}}};
  json ops2 = {{"host", "h2"}, {"now_ns", kMono2}, {"realtime_ns", kWall2},
               {"recent", {ring_op("h2", "h1", a + 2'000 - kShift, a + 20'000 - kShift,
                                   a + 40'000 - kShift)}}};
  return {{"s1", ops1}, {"s2", ops2}};
}

json probe_of_h1(double offset_us) {
  return {{"self", "h1"},
          {"peers",
           {{{"host", "h2"}, {"ok", true}, {"clock_offset_us", offset_us},
             {"clock_uncertainty_us", 12.5}}}}};
}

std::vector<json> events_named(const json& trace, int pid, const std::string& name) {
  std::vector<json> out;
  for (const auto& e : trace["traceEvents"])
    if (e["pid"] == pid && e.value("name", "") == name && e["ph"] != "M") out.push_back(e);
  return out;
}

TEST(TraceClock, AnotherMachinesTimesGoOnTheFirstOnesClock) {
  auto sources = two_hosts();
  // h1 also sends chunk 1, issued 1 us after chunk 0 and done 10 us after
  // it: on the link it follows chunk 0.
  const int64_t a = kMono1 + 1'000'000;
  sources[0].ops["recent"][0]["wire"]["links"][0]["chunks"].push_back(
      {1, "partial sum", a + 11'000, a + 25'000});
  EXPECT_TRUE(needs_probe(sources));
  auto shifts = clock_shifts(sources, probe_of_h1(250.0));
  ASSERT_EQ(shifts.size(), 2u);
  EXPECT_TRUE(shifts[0].applied);
  EXPECT_EQ(shifts[0].shift_ns, 0);
  ASSERT_TRUE(shifts[1].applied) << shifts[1].how;
  EXPECT_EQ(shifts[1].shift_ns, kShift);
  EXPECT_EQ(shifts[1].host, "h2");
  EXPECT_NE(shifts[1].how.find("+0.250 ms against h1's (probe, +/- 0.013 ms)"), std::string::npos)
      << shifts[1].how;
  size_t ops = 0;
  json t = chrome_trace(sources, "", 0, &ops, shifts);
  EXPECT_EQ(ops, 2u);
  // h2's op span begins 2 us after h1's, on h1's clock.
  auto op1 = events_named(t, 1, "allreduce key 1 step 0");
  auto op2 = events_named(t, 2, "allreduce key 1 step 0");
  ASSERT_EQ(op1.size(), 1u);
  ASSERT_EQ(op2.size(), 1u);
  EXPECT_DOUBLE_EQ(op1[0]["ts"].get<double>(), double(a) / 1e3);
  EXPECT_DOUBLE_EQ(op2[0]["ts"].get<double>(), double(a + 2'000) / 1e3);
  EXPECT_EQ(op1[0]["args"]["transfers"], 3);
  EXPECT_EQ(op1[0]["args"]["transfers_dropped"], 3);
  // h1's send: a span from issue to completion on its link's track.
  auto send = events_named(t, 1, "chunk 0 partial sum");
  ASSERT_EQ(send.size(), 1u);
  EXPECT_EQ(send[0]["ph"], "X");
  EXPECT_DOUBLE_EQ(send[0]["ts"].get<double>(), double(a + 10'000) / 1e3);
  EXPECT_DOUBLE_EQ(send[0]["dur"].get<double>(), 5.0);
  auto next = events_named(t, 1, "chunk 1 partial sum");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_DOUBLE_EQ(next[0]["ts"].get<double>(), double(a + 15'000) / 1e3);
  EXPECT_DOUBLE_EQ(next[0]["dur"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(next[0]["args"]["queued_us"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(next[0]["args"]["issued_us"].get<double>(), double(a + 11'000) / 1e3);
  // h1's arrival of h2's final sum: from h2's issue (A+20us) to when h1
  // saw it (A+50us); h2's of h1's partial sum: A+10us to A+40us.
  auto got1 = events_named(t, 1, "chunk 0 final sum");
  ASSERT_EQ(got1.size(), 1u);
  EXPECT_EQ(got1[0]["ph"], "X") << got1[0].dump();
  EXPECT_DOUBLE_EQ(got1[0]["ts"].get<double>(), double(a + 20'000) / 1e3);
  EXPECT_DOUBLE_EQ(got1[0]["dur"].get<double>(), 30.0);
  auto got2 = events_named(t, 2, "chunk 0 partial sum");
  ASSERT_EQ(got2.size(), 1u);
  EXPECT_EQ(got2[0]["args"]["to"], "h2");
  EXPECT_DOUBLE_EQ(got2[0]["ts"].get<double>(), double(a + 10'000) / 1e3) << got2[0].dump();
  EXPECT_DOUBLE_EQ(got2[0]["args"]["seen_us"].get<double>(), double(a + 40'000) / 1e3);
  // The tracks, and the offsets named in the file.
  std::vector<std::string> names;
  for (const auto& e : t["traceEvents"])
    if (e["pid"] == 2 && e["name"] == "thread_name") names.push_back(e["args"]["name"]);
  EXPECT_NE(std::find(names.begin(), names.end(), "h2 -> h1"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "h1 -> h2"), names.end());
  const json& d = t["metadata"]["clock"]["daemons"];
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1]["shift_ns"], kShift);
  EXPECT_EQ(d[1]["applied"], true);
  EXPECT_EQ(d[1]["probe_offset_us"], 250.0);
  EXPECT_EQ(t["metadata"]["clock"]["reference"], "s1");
}

TEST(TraceClock, WithoutAnOffsetADaemonKeepsItsOwnClockAndSaysWhy) {
  auto sources = two_hosts();
  auto own = [&](const json& probe, const std::vector<TraceSource>& src) {
    auto s = clock_shifts(src, probe);
    EXPECT_FALSE(s.at(1).applied);
    EXPECT_EQ(s.at(1).shift_ns, 0);
    return s.at(1).how;
  };
  EXPECT_NE(own({{"error", "unknown command probe"}}, sources)
                .find("the probe of s1 failed: unknown command probe"),
            std::string::npos);
  json elsewhere = probe_of_h1(1.0);
  elsewhere["peers"][0]["host"] = "h3";
  EXPECT_NE(own(elsewhere, sources).find("h2 is not a peer of h1"), std::string::npos);
  json silent = probe_of_h1(1.0);
  silent["peers"][0]["clock_offset_us"] = nullptr;
  silent["peers"][0]["error"] = "h2 did not answer within 5000 ms";
  EXPECT_NE(own(silent, sources).find("no clock offset from h2: h2 did not answer"),
            std::string::npos);
  auto old = sources;
  old[1].ops.erase("realtime_ns");
  EXPECT_NE(own(probe_of_h1(1.0), old).find("without realtime_ns"), std::string::npos);
  auto alone = sources;
  alone[1].ops["host"] = nullptr;
  EXPECT_NE(own(probe_of_h1(1.0), alone).find("in no cluster"), std::string::npos);
  EXPECT_FALSE(needs_probe(alone));
  // Unshifted, an arrival is an instant: its sender's issue is on another clock.
  size_t ops = 0;
  json t = chrome_trace(sources, "", 0, &ops, clock_shifts(sources, json()));
  auto got = events_named(t, 1, "chunk 0 final sum");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["ph"], "i");
  EXPECT_FALSE(got[0]["args"].contains("issued_us"));
}

TEST(TraceClock, OneDaemonOrTheSameHostNeedsNoProbe) {
  auto sources = two_hosts();
  EXPECT_FALSE(needs_probe({sources[0]}));
  auto same = sources;
  same[1].ops["host"] = "h1";
  EXPECT_FALSE(needs_probe(same));
  auto s = clock_shifts(same, json());
  EXPECT_TRUE(s[1].applied);
  EXPECT_EQ(s[1].shift_ns, 0);
  EXPECT_EQ(clock_summary({sources[0]}, clock_shifts({sources[0]}, json())), "");
}

}  // namespace
}  // namespace gsync::cli
