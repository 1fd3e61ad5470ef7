// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl report's page from replies written here (tools/gsyncctl/report.h):
// escaping, the straggler row, the timeline's rows, jobs known only from
// their ops, the --job filter, and replies with fields missing or of
// another type. The page in a real browser: tests/integration/test_plots.cc.
#include <gtest/gtest.h>

#include <string>

#include "tools/gsyncctl/report.h"

namespace gsync::cli {
namespace {

using nlohmann::json;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

json op(const std::string& job, uint64_t step, int64_t first, int64_t late_by) {
  return {
      {"job", job},
      {"key", 1},
      {"step", step},
      {"op", "allreduce"},
      {"bytes", 4096},
      {"code", 0},
      {"error", ""},
      {"arrivals", {{{"rank", 1}, {"ns", first + late_by}}, {{"rank", 0}, {"ns", first}}}},
      {"stages",
       {{{"stage", "fold"}, {"begun_ns", first + late_by}, {"finished_ns", first + late_by + 1000}},
        {{"stage", "store"},
         {"begun_ns", first + late_by},
         {"finished_ns", first + late_by + 3000}}}},
      {"finished_ns", first + late_by + 4000}};
}

ReportSource source() {
  ReportSource s;
  s.name = "/run/a&b.sock";
  s.status = {{"version", "0.1.0"},
              {"pid", 7},
              {"uptime_s", 3.0},
              {"ops", {{"completed", 3}, {"failed", 0}, {"in_flight", 0}}}};
  s.jobs = {{"jobs",
             {{{"job", "<b>\"x&y'"},
               {"world_size", 2},
               {"local_size", 2},
               {"ops_completed", 3},
               {"last_error", ""},
               {"stragglers",
                {{"ops", 20},
                 {"straggler", 1},
                 {"ranks",
                  {{{"rank", 0},
                    {"local_rank", 0},
                    {"pid", 100},
                    {"median_lag_s", 0.0},
                    {"p99_lag_s", 0.0},
                    {"last_share", 0.0}},
                   {{"rank", 1},
                    {"local_rank", 1},
                    {"pid", 101},
                    {"median_lag_s", 0.02},
                    {"p99_lag_s", 0.03},
                    {"last_share", 1.0}}}}}}}}}};
  s.peers = json::object();
  s.ops = {{"recent",
            {op("<b>\"x&y'", 0, 1000000, 2000000), op("<b>\"x&y'", 1, 9000000, 7000000),
             op("gone", 0, 1000000, 500000)}},
           {"now_ns", 20000000}};
  return s;
}

TEST(HtmlEscape, EveryMarkupCharacterAndControls) {
  EXPECT_EQ(html_escape("<b>\"x&y'"), "&lt;b&gt;&quot;x&amp;y&#39;");
  EXPECT_EQ(html_escape(std::string("a\0b\x1b\tc\n", 7)), "a?b?\tc\n");
  EXPECT_EQ(html_escape("plain ü"), "plain ü");
}

TEST(HtmlReport, JobsStragglersAndTheSlowestOpsTimeline) {
  size_t jobs = 0;
  const std::string page = html_report({source()}, "", "made <now>", &jobs);
  EXPECT_EQ(jobs, 2u);
  EXPECT_EQ(page.find("<b>"), std::string::npos) << page;
  EXPECT_NE(page.find("data-job=\"&lt;b&gt;&quot;x&amp;y&#39;\""), std::string::npos);
  EXPECT_NE(page.find("made &lt;now&gt;"), std::string::npos);
  EXPECT_NE(page.find("<code>/run/a&amp;b.sock</code>"), std::string::npos);
  EXPECT_EQ(count_of(page, "<tr class=\"rank straggler\" data-rank=\"1\">"), 1u);
  EXPECT_EQ(count_of(page, "<tr class=\"rank\" data-rank=\"0\">"), 1u);
  EXPECT_NE(page.find("rank 1 (pid 101) is the straggler: last in 100% of 20 ops, 20.0 ms"),
            std::string::npos);
  // The slowest of the job's ops is step 1 (rank 1 7 ms late), drawn with a
  // row per rank in rank order and a row per stage.
  EXPECT_NE(page.find("allreduce key 1 step 1, 4.0 KiB: 7.004 ms"), std::string::npos) << page;
  EXPECT_NE(page.find("<title>rank 1 arrived 7.000 ms after the first</title>"), std::string::npos);
  EXPECT_LT(page.find("data-rank=\"0\"><title>rank 0"), page.find("data-rank=\"1\"><title>rank 1"));
  EXPECT_EQ(count_of(page, "<g class=\"row arrival\""), 4u);  // two jobs, two ranks each
  EXPECT_EQ(count_of(page, "<g class=\"row stage\""), 4u);
  // A job whose ranks left still shows its ops.
  EXPECT_NE(page.find("data-job=\"gone\""), std::string::npos);
  EXPECT_NE(page.find("none of its ranks is connected here now"), std::string::npos);
  EXPECT_NE(page.find("no cluster configured"), std::string::npos);
  EXPECT_EQ(page.find("nan"), std::string::npos) << page;
}

TEST(HtmlReport, OneJobOnly) {
  size_t jobs = 0;
  std::string page = html_report({source()}, "gone", "now", &jobs);
  EXPECT_EQ(jobs, 1u);
  EXPECT_EQ(page.find("&lt;b&gt;"), std::string::npos);
  page = html_report({source()}, "nosuch", "now", &jobs);
  EXPECT_EQ(jobs, 0u);
  EXPECT_NE(page.find("None of these daemons has it"), std::string::npos);
}

// An older or newer daemon's replies: missing fields print "-", nothing
// throws, and an op without times draws no NaN.
TEST(HtmlReport, FieldsMissingOrOfAnotherType) {
  ReportSource s;
  s.name = "x";
  s.status = {{"ops", "many"}, {"uptime_s", "long"}};
  s.jobs = {{"jobs",
             {{{"job", "j"},
               {"stragglers", {{"ranks", {1, "two"}}, {"straggler", "?"}}},
               {"world_size", json::array()}},
              {{"job", 5}},
              "not a job"}}};
  s.peers = {{"self", {{"host", "h1"}}}, {"peers", {{{"host", 3}}, "x"}}};
  s.ops = {{"recent",
            {{{"job", "j"}, {"arrivals", {{{"rank", "r"}}}}, {"stages", {"s"}}}, "not an op"}}};
  size_t jobs = 0;
  std::string page;
  ASSERT_NO_THROW(page = html_report({s}, "", "now", &jobs));
  EXPECT_EQ(jobs, 1u);
  EXPECT_NE(page.find("<svg class=\"timeline\""), std::string::npos);
  EXPECT_EQ(page.find("nan"), std::string::npos) << page;
  EXPECT_EQ(page.find("inf"), std::string::npos) << page;
}

}  // namespace
}  // namespace gsync::cli
