// SPDX-License-Identifier: Apache-2.0
//
// Prometheus metrics and the straggler report (docs/operations.md,
// "Metrics", "Stragglers") from a real daemon. Metrics are scraped over
// HTTP while two ranks run allreduces and barriers and one op fails: every line is well-formed exposition text, every sample belongs to
// a family with a TYPE, histograms are cumulative, the counts are the ones
// the test drove, and a job id with a quote and a backslash comes out
// escaped. A port in use and an address that is not one stop the daemon at
// start naming them; junk on the HTTP port is answered and the daemon
// serves on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using tools::run_command;

// The port a daemon's log says it serves on (0 until it says).
int metrics_port(const std::string& log) {
  std::smatch m;
  static const std::regex re("metrics: serving http://127\\.0\\.0\\.1:([0-9]+)/metrics");
  return std::regex_search(log, m, re) ? std::stoi(m[1]) : 0;
}
int metrics_port(const DaemonProcess& d) { return metrics_port(d.log()); }

// One HTTP exchange: the whole reply (status line, headers, body).
std::string http(int port, const std::string& request, int timeout_s = 10) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    [[maybe_unused]] ssize_t w = write(fd, request.data(), request.size());
    timeval tv{timeout_s, 0};  // a server that never answers fails the test, not hangs it
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  }
  close(fd);
  return out;
}

std::string body_of(const std::string& reply) {
  size_t at = reply.find("\r\n\r\n");
  return at == std::string::npos ? "" : reply.substr(at + 4);
}

// The exposition text, checked line by line; its samples by "name{labels}".
std::map<std::string, double> parse(const std::string& text, std::string* error) {
  static const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? (\S+)$)");
  static const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  std::map<std::string, double> out;
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (std::regex_match(line, m, type)) {
      types[m[1]] = m[2];
      continue;
    }
    if (!std::regex_match(line, m, sample)) {
      *error = "not exposition text: " + line;
      return {};
    }
    std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!types.count(family) && family.size() > strlen(suffix) &&
          family.compare(family.size() - strlen(suffix), strlen(suffix), suffix) == 0)
        family = family.substr(0, family.size() - strlen(suffix));
    if (!types.count(family)) {
      *error = "a sample without a TYPE before it: " + line;
      return {};
    }
    const std::string value = m[m.size() - 1];
    out[name + std::string(m[2])] = value == "+Inf" ? INFINITY : std::stod(value);
  }
  return out;
}

// The sum of a family's samples whose labels hold every one of `with`
// (`result="failed"`, ...).
double sum_of(const std::map<std::string, double>& s, const std::string& family,
              const std::vector<std::string>& with = {}) {
  double total = 0;
  for (const auto& [key, value] : s) {
    if (key != family && key.rfind(family + "{", 0) != 0) continue;
    if (std::all_of(with.begin(), with.end(),
                    [&](const std::string& w) { return key.find(w) != std::string::npos; }))
      total += value;
  }
  return total;
}

TEST(Metrics, ScrapedUnderLoadMatchTheOpsDriven) {
  DaemonProcess d({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(wait_until([&] { return metrics_port(d) != 0; })) << d.log();
  const int port = metrics_port(d);
  const std::string job = "m\"x\\y";  // printable ASCII: a job id may hold both
  constexpr int kAllreduces = 25, kBarriers = 3, kHalves = 7;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<ChildResult> res;
  std::thread ranks([&] {
    res = run_ranks(2, [&](int r) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_rank(d.socket(), job, 2, r, &comm) == 0, "{}", gsync_last_error());
      std::vector<float> buf(1024, 1.0f);
      for (int s = 0; s < kAllreduces; s++) {
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce(comm, 1, uint64_t(s), buf.data(), buf.size(), GSYNC_FLOAT32,
                                   GSYNC_SUM, 0, &req) == 0,
                   "{}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 20000) == 0, "{}", gsync_request_error(req));
        gsync_request_free(req);
      }
      std::vector<uint16_t> half(1024, 0x3c00);  // 1.0 in float16
      for (int s = 0; s < kHalves; s++) {
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce(comm, 3, uint64_t(s), half.data(), half.size(), GSYNC_FLOAT16,
                                   GSYNC_SUM, 0, &req) == 0,
                   "{}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 20000) == 0, "{}", gsync_request_error(req));
        gsync_request_free(req);
      }
      for (int s = 0; s < kBarriers; s++)
        RANK_CHECK(gsync_barrier(comm, uint64_t(s), 20000) == 0, "{}", gsync_last_error());
      // Ranks that disagree on the count: one op fails with MISMATCH.
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 2, 0, buf.data(), r == 0 ? 512 : 256, GSYNC_FLOAT32,
                                 GSYNC_SUM, 0, &req) == 0,
                 "{}", gsync_last_error());
      RANK_CHECK(gsync_wait(req, 20000) == GSYNC_ERR_MISMATCH, "{}", gsync_request_error(req));
      gsync_request_free(req);
      RANK_CHECK(read_byte(go[0], 60000), "no word to close");
      gsync_close(comm);
      return 0;
    });
  });
  // Scraped while the job is alive, once the failed op (the last) is counted.
  std::map<std::string, double> s;
  std::string error;
  const bool counted = wait_until([&] {
    s = parse(body_of(http(port, "GET /metrics HTTP/1.0\r\n\r\n")), &error);
    return !error.empty() || sum_of(s, "gsync_ops_total", {"result=\"failed\""}) >= 1;
  });
  ASSERT_EQ(write(go[1], "xx", 2), 2);
  ranks.join();
  for (auto& c : res) EXPECT_EQ(c.code, 0) << c.output;
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_TRUE(counted) << d.log();
  // Each op under its result, dtype, algorithm ("local": one host) and
  // codec; a barrier under the float32 its client sends.
  const std::string local = "algorithm=\"local\",codec=\"none\"}";
  EXPECT_EQ(s["gsync_ops_total{result=\"completed\",dtype=\"float32\"," + local],
            kAllreduces + kBarriers);
  EXPECT_EQ(s["gsync_ops_total{result=\"completed\",dtype=\"float16\"," + local], kHalves);
  EXPECT_EQ(s["gsync_ops_total{result=\"failed\",dtype=\"float32\"," + local], 1);
  EXPECT_TRUE(s.count("gsync_ops_total{result=\"failed\",dtype=\"float16\"," + local));
  EXPECT_EQ(s["gsync_ops_total{result=\"failed\",dtype=\"float16\"," + local], 0);
  EXPECT_EQ(sum_of(s, "gsync_ops_total"), kAllreduces + kBarriers + kHalves + 1);
  EXPECT_EQ(s["gsync_op_failures_total{code=\"mismatch\"}"], 1);
  EXPECT_EQ(s["gsync_op_duration_seconds_count{op=\"allreduce\"}"], kAllreduces + kHalves + 1);
  EXPECT_EQ(s["gsync_op_duration_seconds_count{op=\"barrier\"}"], kBarriers);
  EXPECT_EQ(s["gsync_op_duration_seconds_bucket{op=\"allreduce\",le=\"+Inf\"}"],
            kAllreduces + kHalves + 1);
  EXPECT_EQ(s["gsync_reduced_bytes_total{dtype=\"float32\"," + local],
            kAllreduces * 2 * 1024 * 4);
  EXPECT_EQ(s["gsync_reduced_bytes_total{dtype=\"float16\"," + local], kHalves * 2 * 1024 * 2);
  EXPECT_EQ(sum_of(s, "gsync_reduced_bytes_total"), (kAllreduces * 4 + kHalves * 2) * 2 * 1024);
  const std::string label = "{job=\"m\\\"x\\\\y\"}";
  EXPECT_EQ(s["gsync_job_ops_completed_total" + label], kAllreduces + kBarriers + kHalves);
  EXPECT_EQ(s["gsync_job_ops_failed_total" + label], 1);
  EXPECT_EQ(s["gsync_job_ranks" + label], 2);
  EXPECT_EQ(s["gsync_clients"], 2);
  // Host memory only: no pinned staging (docs/gpu.md).
  ASSERT_TRUE(s.count("gsync_pinned_bytes"));
  EXPECT_EQ(s["gsync_pinned_bytes"], 0);
  // Histogram buckets only go up.
  std::vector<double> buckets;
  for (double le : {1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0}) {
    std::ostringstream key;
    key << "gsync_op_duration_seconds_bucket{op=\"allreduce\",le=\"" << le << "\"}";
    ASSERT_TRUE(s.count(key.str())) << key.str();
    buckets.push_back(s[key.str()]);
  }
  EXPECT_TRUE(std::is_sorted(buckets.begin(), buckets.end()));
}

// Ops between two hosts (a rack each, on loopback so the test reaches each
// daemon's metrics port): each host counts every op under its dtype, the
// algorithm of its plan (ring, forced) and the codec it crossed in.
TEST(Metrics, CrossHostOpsAreCountedByDtypeAlgorithmAndCodec) {
  testbed::Options o;
  o.rack_sizes = {1, 1};
  o.loopback = true;
  o.daemon_args = {"--algo", "ring", "--metrics-listen", "127.0.0.1:0"};
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  ASSERT_TRUE(st) << st.message();
  constexpr size_t kCount = 1 << 16;
  struct Kind {
    uint64_t key;
    int ops, dtype;
    const char* codec;  // gsync_compression_parse
  };
  const Kind kinds[] = {{1, 5, GSYNC_FLOAT32, "none"}, {2, 4, GSYNC_FLOAT32, "int8"},
                        {3, 3, GSYNC_FLOAT16, "none"}};
  const auto p = places({1, 1});
  auto res = run_ranks(2, [&](int r) {
    gsync_comm_t* comm;
    RANK_CHECK(connect_place(*bed, "xm", p, r, &comm) == 0, "{}", gsync_last_error());
    void* mem;
    RANK_CHECK(gsync_alloc(comm, kCount * 4, &mem) == 0, "{}", gsync_last_error());
    for (const Kind& k : kinds) {
      gsync_allreduce_opts_t opts;
      gsync_allreduce_opts_init(&opts);
      RANK_CHECK(gsync_compression_parse(k.codec, &opts.compression) == 0, "{}",
                 gsync_last_error());
      for (int s = 0; s < k.ops; s++) {
        std::memset(mem, 0, kCount * 4);  // zeros: finite in every dtype
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce_ex(comm, k.key, uint64_t(s), mem, kCount, k.dtype, GSYNC_SUM,
                                      &opts, &req) == 0,
                   "{}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 60000) == 0, "{}", gsync_request_error(req));
        gsync_request_free(req);
      }
    }
    gsync_close(comm);
    return 0;
  });
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
  for (int h = 0; h < 2; h++) {
    const int port = metrics_port(bed->daemon_log(h));
    ASSERT_NE(port, 0) << bed->daemon_log(h);
    std::string error;
    auto s = parse(body_of(http(port, "GET /metrics HTTP/1.0\r\n\r\n")), &error);
    ASSERT_TRUE(error.empty()) << error;
    auto ops = [&](const char* result, const char* dtype, const char* codec) {
      return s[fmt::format("gsync_ops_total{{result=\"{}\",dtype=\"{}\",algorithm=\"ring\","
                           "codec=\"{}\"}}",
                           result, dtype, codec)];
    };
    auto bytes = [&](const char* dtype, const char* codec) {
      return s[fmt::format(
          "gsync_reduced_bytes_total{{dtype=\"{}\",algorithm=\"ring\",codec=\"{}\"}}", dtype,
          codec)];
    };
    EXPECT_EQ(ops("completed", "float32", "none"), 5) << "host " << h;
    EXPECT_EQ(ops("completed", "float32", "int8"), 4) << "host " << h;
    EXPECT_EQ(ops("completed", "float16", "none"), 3) << "host " << h;
    EXPECT_EQ(sum_of(s, "gsync_ops_total"), 12) << "host " << h;
    EXPECT_EQ(sum_of(s, "gsync_ops_total", {"result=\"failed\""}), 0) << "host " << h;
    EXPECT_EQ(bytes("float32", "none"), 5 * kCount * 4) << "host " << h;
    EXPECT_EQ(bytes("float32", "int8"), 4 * kCount * 4) << "host " << h;
    EXPECT_EQ(bytes("float16", "none"), 3 * kCount * 2) << "host " << h;
  }
}

// A rank's `ops` allreduces of 256 floats (key 1, steps 0..), each after
// `delay_s` seconds of sleep: what a slow data loader does to a rank. It
// reports when it submitted each op ("submits: ns ns ..." on the monotonic
// clock every process here shares), the truth a lag report is held to.
int late_allreduces(gsync_comm_t* comm, int ops, double delay_s) {
  std::vector<float> buf(256, 1.0f);
  std::string submits = "submits:";
  for (int s = 0; s < ops; s++) {
    if (delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    gsync_request_t* req;
    submits += fmt::format(" {}", std::chrono::steady_clock::now().time_since_epoch().count());
    RANK_CHECK(gsync_allreduce(comm, 1, uint64_t(s), buf.data(), buf.size(), GSYNC_FLOAT32,
                               GSYNC_SUM, 0, &req) == 0, "{}", gsync_last_error());
    RANK_CHECK(gsync_wait(req, 20000) == 0, "{}", gsync_request_error(req));
    gsync_request_free(req);
  }
  report(submits + "\n");
  return 0;
}

// The median over ops of how far `late` submitted behind the first rank,
// from the ranks' own "submits:" lines. The late rank sleeps its delay
// after its previous op completed, and it may complete after the others
// (a ring's last chunk reaches the hosts at different times; a sanitizer
// build on two cores stretches that) or before them (an eager op's last
// host to arrive has the sum first), so its true lag is the delay plus or
// minus that skew: the report is checked against this, not the bare delay.
double submitted_lag_median(const std::vector<ChildResult>& res, size_t late) {
  std::vector<std::vector<int64_t>> t(res.size());
  for (size_t r = 0; r < res.size(); r++) {
    size_t at = res[r].output.find("submits:");
    if (at == std::string::npos) return NAN;
    std::istringstream in(res[r].output.substr(at + 8));
    for (int64_t ns; in >> ns;) t[r].push_back(ns);
  }
  std::vector<double> lag;
  for (size_t op = 0; op < t[late].size(); op++) {
    int64_t first = t[late][op];
    for (const auto& rank : t)
      if (op < rank.size()) first = std::min(first, rank[op]);
    lag.push_back(1e-9 * double(t[late][op] - first));
  }
  if (lag.empty()) return NAN;
  std::nth_element(lag.begin(), lag.begin() + long(lag.size() / 2), lag.end());
  return lag[lag.size() / 2];
}

// Three ranks, the third 40 ms late to every op: the straggler report
// names it with its lag (within 8 ms of how far behind it really submitted,
// about the 40 ms), the log says so naming
// its pid, gsyncctl prints it, and /metrics has its lag.
TEST(Stragglers, TheDelayedRankIsNamedWithItsLag) {
  DaemonProcess d({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(wait_until([&] { return metrics_port(d) != 0; })) << d.log();
  constexpr int kOps = 48;
  constexpr double kDelayS = 0.040;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<ChildResult> res;
  std::thread ranks([&] {
    res = run_ranks(3, [&](int r) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_rank(d.socket(), "slow", 3, r, &comm) == 0, "{}", gsync_last_error());
      if (late_allreduces(comm, kOps, r == 2 ? kDelayS : 0) != 0) return 1;
      report(fmt::format("pid {}\n", getpid()));
      RANK_CHECK(read_byte(go[0], 60000), "no word to close");
      gsync_close(comm);
      return 0;
    });
  });
  nlohmann::json s;
  const bool seen = wait_until([&] {
    nlohmann::json row = job_row(d.admin_socket(), "slow");
    if (row.is_object() && row["stragglers"].value("ops", 0) == kOps) s = row["stragglers"];
    return s.is_object();
  }, 60000);
  std::string ctl_out, scrape;
  if (seen) {
    if (const char* ctl = std::getenv("GSYNCCTL"))
      ctl_out = run_command(fmt::format("{} -s {} jobs --stragglers 2>&1", ctl, d.admin_socket()));
    scrape = body_of(http(metrics_port(d), "GET /metrics HTTP/1.0\r\n\r\n"));
  }
  ASSERT_EQ(write(go[1], "xxx", 3), 3);
  ranks.join();
  for (auto& c : res) EXPECT_EQ(c.code, 0) << c.output;
  ASSERT_TRUE(seen) << admin_query(d.admin_socket(), "jobs");
  EXPECT_EQ(s["straggler"], 2) << s.dump();
  const auto& r2 = s["ranks"][2];
  EXPECT_EQ(r2["rank"], 2) << s.dump();
  const double truth = submitted_lag_median(res, 2);
  EXPECT_GT(truth, 0.5 * kDelayS);  // it is late (it may complete first, and lag less)
  EXPECT_NEAR(r2["median_lag_s"].get<double>(), truth, 0.2 * kDelayS) << s.dump();
  EXPECT_GE(r2["last_share"].get<double>(), 0.9) << s.dump();
  for (int r : {0, 1}) EXPECT_LT(s["ranks"][r]["median_lag_s"].get<double>(), 0.2 * kDelayS);
  const std::string pid = std::to_string(r2["pid"].get<int>());
  EXPECT_NE(res[2].output.find("pid " + pid), std::string::npos) << res[2].output;
  EXPECT_NE(d.log().find("job slow: rank 2 (local 2, pid " + pid + ") on this host is the "
                         "straggler"),
            std::string::npos)
      << d.log();
  if (std::getenv("GSYNCCTL")) {
    EXPECT_NE(ctl_out.find("job slow: rank 2 (pid " + pid + ") is the straggler: last in"),
              std::string::npos)
        << ctl_out;
    EXPECT_NE(ctl_out.find("rank 2 (local 2, pid " + pid + "): "), std::string::npos) << ctl_out;
  }
  std::string error;
  auto m = parse(scrape, &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_NEAR(m["gsync_rank_arrival_lag_seconds{job=\"slow\",rank=\"2\",quantile=\"0.5\"}"],
              truth, 0.2 * kDelayS)
      << scrape;
}

// Three hosts, a rank each, the rank on h2 40 ms late to every op: each
// daemon's host lags (on its own clock) name h2, every host's median lag
// within 10 ms of how far behind its rank really submitted (h2's far above
// the others'), h2 last in nearly every op; h1's log says it, gsyncctl
// prints the host table and the verdict, /metrics has the lag. Over `algo`:
// ring (rendezvous: OpReady) and direct (small ops go eagerly: OpData);
// the eager one with [trace] record off (the report keeps its own times).
void host_lag_named(const std::string& algo, bool record) {
  testbed::Options o;
  o.rack_sizes = {3};
  o.loopback = true;  // /metrics on 127.0.0.1 of this process
  o.daemon_args = {"--algo", algo, "--metrics-listen", "127.0.0.1:0", "--trace-record",
                   record ? "true" : "false"};
  std::unique_ptr<testbed::Testbed> bed;
  Status st = testbed::Testbed::create(o, &bed);
  ASSERT_TRUE(st) << st.message();
  constexpr int kOps = 60;
  constexpr double kDelayS = 0.040;
  // A host sees another's readiness when its message comes: the lag it
  // reports is the truth plus the difference of two messages' latencies
  // (a few ms on two cores under a sanitizer).
  constexpr double kSlackS = 0.010;
  const auto p = places({1, 1, 1});
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<ChildResult> res;
  std::thread ranks([&] {
    res = run_ranks(3, [&](int r) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_place(*bed, "hl", p, r, &comm) == 0, "{}", gsync_last_error());
      if (late_allreduces(comm, kOps, r == 1 ? kDelayS : 0) != 0) return 1;
      RANK_CHECK(read_byte(go[0], 60000), "no word to close");
      gsync_close(comm);
      return 0;
    });
  });
  // Every daemon's report once it holds every op (they end a little apart).
  std::vector<nlohmann::json> s(3);
  const bool seen = wait_until([&] {
    for (int h = 0; h < 3; h++) {
      nlohmann::json row = job_row(bed->admin_socket(h), "hl");
      if (row.is_object() && row["stragglers"].value("host_ops", 0) == kOps)
        s[size_t(h)] = row["stragglers"];
    }
    return std::all_of(s.begin(), s.end(), [](const auto& j) { return j.is_object(); });
  }, 60000);
  std::string ctl_out, scrape;
  if (seen) {
    if (const char* ctl = std::getenv("GSYNCCTL"))
      ctl_out = run_command(fmt::format("{} -s {} jobs --stragglers 2>&1", ctl,
                                        bed->admin_socket(0)));
    scrape = body_of(http(metrics_port(bed->daemon_log(0)), "GET /metrics HTTP/1.0\r\n\r\n"));
  }
  ASSERT_EQ(write(go[1], "xxx", 3), 3);
  ranks.join();
  for (auto& c : res) EXPECT_EQ(c.code, 0) << c.output;
  ASSERT_TRUE(seen) << admin_query(bed->admin_socket(0), "jobs");
  const double truth = submitted_lag_median(res, 1);
  EXPECT_GT(truth, 0.5 * kDelayS);  // it is late (it may complete first, and lag less)
  std::printf("[ measured ] %s, h2 submitted %.1f ms behind the first\n", algo.c_str(),
              1e3 * truth);
  for (int h = 0; h < 3; h++) {
    const auto& sh = s[size_t(h)];
    EXPECT_EQ(sh["host_straggler"], "h2") << "on h" << h + 1 << ": " << sh.dump();
    ASSERT_EQ(sh["hosts"].size(), 3u) << sh.dump();
    for (const auto& row : sh["hosts"]) {
      const double median = row["lag_median_s"].get<double>();
      if (row["host"] == "h2") {
        EXPECT_NEAR(median, truth, kSlackS) << "on h" << h + 1 << ": " << sh.dump();
        EXPECT_GE(row["last_share"].get<double>(), 0.9) << sh.dump();
      } else {
        // A punctual host may still submit a little behind the first (it
        // completed the op before later): its own truth, and far below h2.
        const size_t r = row["host"] == "h1" ? 0 : 2;
        EXPECT_NEAR(median, submitted_lag_median(res, r), kSlackS)
            << "on h" << h + 1 << ": " << sh.dump();
        EXPECT_LT(median, 0.5 * truth) << "on h" << h + 1 << ": " << sh.dump();
      }
      EXPECT_EQ(row["self"], row["host"] == bed->host_id(h)) << sh.dump();
    }
    std::printf("[ measured ] %s, on h%d: h2 lag median %.1f ms\n", algo.c_str(), h + 1,
                1e3 * sh["hosts"][1]["lag_median_s"].get<double>());
  }
  EXPECT_NE(bed->daemon_log(0).find("job hl: host h2 is the straggler host: last in"),
            std::string::npos)
      << bed->daemon_log(0);
  if (std::getenv("GSYNCCTL")) {
    EXPECT_NE(ctl_out.find("job hl: host h2 is last in"), std::string::npos) << ctl_out;
    EXPECT_NE(ctl_out.find("  h1 (this)"), std::string::npos) << ctl_out;
    EXPECT_NE(ctl_out.find("  h2 "), std::string::npos) << ctl_out;
  }
  std::string error;
  auto m = parse(scrape, &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_NEAR(m["gsync_host_arrival_lag_seconds{job=\"hl\",host=\"h2\",quantile=\"0.5\"}"],
              truth, kSlackS)
      << scrape;
}

TEST(Stragglers, TheLateHostIsNamedWithItsLagOverRendezvous) { host_lag_named("ring", true); }
TEST(Stragglers, TheLateHostIsNamedWithItsLagOverEagerOpsUnrecorded) {
  host_lag_named("direct", false);
}

// gsyncctl trace: the recent ops of two daemons as one Chrome trace file:
// valid JSON with a process per daemon, an op span per op the test ran
// (the right count, job, key and step), an arrival per rank and op, and
// the stages; --job filters.
TEST(Trace, TheFileHoldsTheOpsRunAsChromeTraceEvents) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  DaemonProcess a, b;
  constexpr int kOps = 10;
  auto res = run_ranks(4, [&](int r) {
    const DaemonProcess& d = r < 2 ? a : b;
    gsync_comm_t* comm;
    RANK_CHECK(connect_rank(d.socket(), r < 2 ? "ta" : "tb", 2, r % 2, &comm) == 0, "{}",
               gsync_last_error());
    std::vector<float> buf(1024, 1.0f);
    for (int s = 0; s < kOps; s++) {
      gsync_request_t* req;
      RANK_CHECK(gsync_allreduce(comm, 7, uint64_t(s), buf.data(), buf.size(), GSYNC_FLOAT32,
                                 GSYNC_SUM, 0, &req) == 0, "{}", gsync_last_error());
      RANK_CHECK(gsync_wait(req, 20000) == 0, "{}", gsync_request_error(req));
      gsync_request_free(req);
    }
    gsync_close(comm);
    return 0;
  });
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
  const std::string file = a.dir() + "/trace.json";
  std::string out = run_command(fmt::format("{} trace -o {} {} {} 2>&1", ctl, file,
                                            a.admin_socket(), b.admin_socket()));
  EXPECT_NE(out.find(fmt::format("{}: {} ops of 2 daemons", file, 2 * kOps)), std::string::npos)
      << out;
  std::string text = run_command("cat " + file);
  nlohmann::json t = nlohmann::json::parse(text, nullptr, false);
  ASSERT_TRUE(t.is_object() && t["traceEvents"].is_array()) << text.substr(0, 300);
  std::map<int, int> ops_per_pid, arrivals_per_pid, stages;
  std::set<int> named;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid")) << e.dump();
    const std::string ph = e["ph"];
    const int pid = e["pid"];
    if (ph == "M" && e["name"] == "process_name") named.insert(pid);
    if (ph == "X" || ph == "i") {
      ASSERT_TRUE(e["ts"].is_number()) << e.dump();
    }
    if (ph == "X") {
      ASSERT_GE(e["dur"].get<double>(), 0) << e.dump();
    }
    if (ph == "X" && e["cat"] == "op") {
      ops_per_pid[pid]++;
      EXPECT_EQ(e["args"]["job"], pid == 1 ? "ta" : "tb") << e.dump();
      EXPECT_EQ(e["name"].get<std::string>().rfind("allreduce key 7 step ", 0), 0u) << e.dump();
    }
    if (ph == "i" && e["cat"] == "arrival") arrivals_per_pid[pid]++;
    if (ph == "X" && e["cat"] == "stage") stages[pid]++;
  }
  EXPECT_EQ(named, (std::set<int>{1, 2}));
  EXPECT_EQ(ops_per_pid[1], kOps);
  EXPECT_EQ(ops_per_pid[2], kOps);
  EXPECT_EQ(arrivals_per_pid[1], 2 * kOps);
  EXPECT_GE(stages[1], kOps);  // the local reduce, at least
  out = run_command(fmt::format("{} -s {} trace -o {} --job tb 2>&1", ctl, b.admin_socket(), file));
  EXPECT_NE(out.find(fmt::format("{}: {} ops of 1 daemon", file, kOps)), std::string::npos) << out;
  out = run_command(fmt::format("{} -s {} trace -o {} --job ta 2>&1", ctl, b.admin_socket(), file));
  EXPECT_NE(out.find(fmt::format("{}: 0 ops of 1 daemon", file)), std::string::npos) << out;
  out = run_command(fmt::format("{} trace -o /nonexistent/dir/t.json {} 2>&1; echo rc=$?", ctl,
                                a.admin_socket()));
  EXPECT_NE(out.find("cannot write /nonexistent/dir/t.json"), std::string::npos) << out;
  EXPECT_EQ(out.find("rc=0"), std::string::npos) << out;
}

// [trace]: a daemon with ring_ops 8 keeps its 8 newest ops, oldest first;
// one with record = false keeps none, still shows the op in flight, and
// gsyncctl ops says recording is off.
TEST(Trace, TheRingKeepsTheNewestOpsAndRecordOffKeepsNone) {
  DaemonProcess a({"--trace-ring-ops", "8"}), b({"--trace-record", "false"});
  constexpr int kOps = 20;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<ChildResult> res;
  std::thread ranks([&] {
    res = run_ranks(4, [&](int r) {
      const DaemonProcess& d = r < 2 ? a : b;
      gsync_comm_t* comm;
      RANK_CHECK(connect_rank(d.socket(), r < 2 ? "ra" : "rb", 2, r % 2, &comm) == 0, "{}",
                 gsync_last_error());
      std::vector<float> buf(256, 1.0f);
      for (int s = 0; s <= kOps; s++) {
        if (s == kOps && r < 2) break;
        // The last op on b: rank 2 submits it and waits; rank 3 only once
        // the test has looked at it in flight.
        if (s == kOps && r == 3) RANK_CHECK(read_byte(go[0], 60000), "no word to submit");
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce(comm, 1, uint64_t(s), buf.data(), buf.size(), GSYNC_FLOAT32,
                                   GSYNC_SUM, 0, &req) == 0, "{}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 60000) == 0, "{}", gsync_request_error(req));
        gsync_request_free(req);
      }
      gsync_close(comm);
      return 0;
    });
  });
  nlohmann::json ops_b;
  const bool seen = wait_until([&] {
    ops_b = admin_json(b.admin_socket(), "ops");
    return ops_b.is_object() && ops_b["in_flight"].size() == 1 &&
           ops_b["in_flight"][0]["step"] == kOps;  // not one of the others on its way
  }, 60000);
  std::string ctl_out;
  if (const char* ctl = std::getenv("GSYNCCTL"); ctl && seen)
    ctl_out = run_command(fmt::format("{} -s {} ops 2>&1", ctl, b.admin_socket()));
  ASSERT_EQ(write(go[1], "x", 1), 1);
  ranks.join();
  for (auto& c : res) EXPECT_EQ(c.code, 0) << c.output;
  ASSERT_TRUE(seen) << ops_b.dump();
  EXPECT_EQ(ops_b["recording"], (nlohmann::json{{"on", false}, {"ring_ops", 1024}}));
  EXPECT_TRUE(ops_b["recent"].empty()) << ops_b.dump();
  EXPECT_EQ(ops_b["in_flight"][0]["arrived"], 1) << ops_b.dump();
  if (std::getenv("GSYNCCTL")) {
    EXPECT_NE(ctl_out.find("recording is off ([trace] record = false): only the ops in flight "
                           "are shown"),
              std::string::npos)
        << ctl_out;
    EXPECT_NE(ctl_out.find("rb "), std::string::npos) << ctl_out;  // the op in flight
  }
  nlohmann::json after = admin_json(b.admin_socket(), "ops");
  EXPECT_TRUE(after["recent"].empty()) << after.dump();
  nlohmann::json ops_a = admin_json(a.admin_socket(), "ops");
  EXPECT_EQ(ops_a["recording"], (nlohmann::json{{"on", true}, {"ring_ops", 8}}));
  ASSERT_EQ(ops_a["recent"].size(), 8u) << ops_a.dump();
  for (int i = 0; i < 8; i++) {
    const auto& op = ops_a["recent"][size_t(i)];
    EXPECT_EQ(op["step"], kOps - 8 + i) << ops_a.dump();
    EXPECT_EQ(op["arrivals"].size(), 2u) << op.dump();
    EXPECT_FALSE(op["stages"].empty()) << op.dump();
  }
}

TEST(Metrics, JunkOnTheHttpPortIsAnsweredAndTheDaemonServesOn) {
  DaemonProcess d({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(wait_until([&] { return metrics_port(d) != 0; })) << d.log();
  const int port = metrics_port(d);
  EXPECT_NE(http(port, "GET /nothing HTTP/1.0\r\n\r\n").find(" 404 "), std::string::npos);
  EXPECT_NE(http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc").find(" 405 "),
            std::string::npos);
  // Junk is refused (an HTTP error) or the connection closed; either way
  // the next scrape is answered.
  for (const std::string& junk : {std::string("\x01\x02garbage\r\n\r\n"), std::string(100000, 'A'),
                                 std::string("GET /metrics HTTP/9.9\r\n\r\n")}) {
    const std::string reply = http(port, junk, 1);  // an unfinished request waits for more
    EXPECT_TRUE(reply.empty() || reply.rfind("HTTP/1.1 4", 0) == 0 ||
                reply.rfind("HTTP/1.1 5", 0) == 0)
        << reply.substr(0, 200);
  }
  std::string error;
  auto s = parse(body_of(http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")), &error);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_TRUE(s.count("gsync_uptime_seconds")) << "no scrape";
  EXPECT_EQ(sum_of(s, "gsync_ops_total"), 0);
  EXPECT_TRUE(d.alive());
}

TEST(Metrics, ABadAddressOrAPortInUseStopsTheStartNamingIt) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  const int busy = ntohs(sa.sin_port);
  const std::string dir = "/tmp/gsync-metrics-bad";
  run_command("mkdir -p " + dir);
  auto start = [&](const std::string& listen) {
    return run_command(
        fmt::format("timeout 20 {} --socket {}/s.sock --admin-socket {}/a.sock "
                    "--metrics-listen '{}' 2>&1; echo rc=$?",
                    tools::gsyncd_path(), dir, dir, listen));
  };
  std::string out = start(fmt::format("127.0.0.1:{}", busy));
  EXPECT_NE(out.find(fmt::format("metrics.listen 127.0.0.1:{}: cannot listen there: Address "
                                 "already in use",
                                 busy)),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("rc=0"), std::string::npos) << out;
  out = start("9464");
  EXPECT_NE(out.find("metrics.listen: \"9464\" is not HOST:PORT"), std::string::npos) << out;
  out = start("10.0.0.300:80");
  EXPECT_NE(out.find("is not an IPv4 address"), std::string::npos) << out;
  out = start("127.0.0.1:70000");
  EXPECT_NE(out.find("is not a port"), std::string::npos) << out;
  close(fd);
}

}  // namespace
}  // namespace gsync::test
