// SPDX-License-Identifier: Apache-2.0
//
// The Prometheus text format writer (daemon/metrics/exposition.h): HELP and
// TYPE before samples, label values from outside escaped, histograms
// cumulative with +Inf, _sum and _count, invalid names never written.
#include <gtest/gtest.h>

#include <cmath>

#include "daemon/metrics/exposition.h"

namespace gsync::metrics {
namespace {

TEST(Exposition, FamiliesSamplesAndEscapes) {
  Exposition e;
  e.family("gsync_ops_total", "counter", "Operations ended");
  e.sample({{"job", "a\"b\\c\nd"}, {"result", "completed"}}, 3);
  e.sample({}, 0.25);
  e.family("gsync_up", "gauge", "Up");
  e.sample({}, NAN);
  EXPECT_EQ(e.text(),
            "# HELP gsync_ops_total Operations ended\n"
            "# TYPE gsync_ops_total counter\n"
            "gsync_ops_total{job=\"a\\\"b\\\\c\\nd\",result=\"completed\"} 3\n"
            "gsync_ops_total 0.25\n"
            "# HELP gsync_up Up\n"
            "# TYPE gsync_up gauge\n"
            "gsync_up NaN\n");
}

TEST(Exposition, HistogramsAreCumulative) {
  Exposition e;
  e.family("gsync_op_duration_seconds", "histogram", "Durations");
  e.histogram({{"op", "allreduce"}}, {0.001, 0.01}, {2, 0, 3}, 0.5);
  EXPECT_EQ(e.text(),
            "# HELP gsync_op_duration_seconds Durations\n"
            "# TYPE gsync_op_duration_seconds histogram\n"
            "gsync_op_duration_seconds_bucket{op=\"allreduce\",le=\"0.001\"} 2\n"
            "gsync_op_duration_seconds_bucket{op=\"allreduce\",le=\"0.01\"} 2\n"
            "gsync_op_duration_seconds_bucket{op=\"allreduce\",le=\"+Inf\"} 5\n"
            "gsync_op_duration_seconds_sum{op=\"allreduce\"} 0.5\n"
            "gsync_op_duration_seconds_count{op=\"allreduce\"} 5\n");
}

TEST(Exposition, InvalidNamesAreNeverWritten) {
  EXPECT_TRUE(Exposition::valid_name("gsync_ops_total"));
  EXPECT_TRUE(Exposition::valid_name("a:b_1"));
  EXPECT_FALSE(Exposition::valid_name("1abc"));
  EXPECT_FALSE(Exposition::valid_name("a-b"));
  EXPECT_FALSE(Exposition::valid_name(""));
  Exposition e;
  e.family("bad name", "gauge", "x");
  e.sample({}, 1);
  e.family("good", "gauge", "x");
  e.sample({{"bad-label", "v"}, {"ok", "w"}}, 1);
  EXPECT_EQ(e.text(), "# HELP good x\n# TYPE good gauge\ngood{ok=\"w\"} 1\n");
}

}  // namespace
}  // namespace gsync::metrics
