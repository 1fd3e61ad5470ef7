// SPDX-License-Identifier: Apache-2.0
//
// The plots (issue #20): `gsyncctl report` of a real daemon whose job has a
// rank 25 ms late to every op, loaded in a real headless browser (Debian's
// chromium-headless-shell, or chromium): the job's section under its
// escaped name, the straggler row naming the late rank, the slowest op's
// SVG timeline with a row per rank, its script run without a console
// message; and `gsync-perf --plot`'s PNG, read back from its header.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using tools::run_command;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first of these on $PATH, or "".
std::string on_path(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    std::string p = run_command(fmt::format("command -v {} 2>/dev/null", name));
    while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.pop_back();
    if (!p.empty()) return p;
  }
  return "";
}

// Every match of re's first group in text.
std::vector<std::string> all_of(const std::string& text, const std::string& re) {
  std::vector<std::string> out;
  const std::regex r(re);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), r); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// The page as the browser built it (its DOM after the page's script ran)
// and what the browser logged (console messages and uncaught exceptions
// show as "CONSOLE" lines).
struct Loaded {
  std::string dom, log, rc;
};

Loaded load_in_browser(const std::string& browser, const std::string& page,
                       const std::string& dir) {
  // Root needs --no-sandbox; a profile of its own keeps runs apart.
  const bool full = browser.find("headless-shell") == std::string::npos;
  const std::string log = dir + "/browser.log";
  Loaded out;
  out.dom = run_command(
      fmt::format("timeout 120 {} {}--no-sandbox --disable-gpu --user-data-dir={}/browser-profile "
                  "--enable-logging=stderr --v=0 --dump-dom file://{} 2>{}; echo \"rc=$?\"",
                  browser, full ? "--headless " : "", dir, page, log));
  const size_t rc_at = out.dom.rfind("rc=");
  if (rc_at != std::string::npos) {
    out.rc = out.dom.substr(rc_at + 3);
    out.dom.resize(rc_at);
  }
  out.log = read_file(log);
  return out;
}

constexpr const char* kJob = "<b>\"x&y";  // printable ASCII, as a job id may be

// Two ranks of kJob, rank 1 kDelayS late to each of kOps allreduces; they
// stay connected (the job in the jobs report) until `go` is written.
std::thread run_job(const DaemonProcess& d, int kOps, double delay_s, int go_fd,
                    std::vector<ChildResult>* res) {
  return std::thread([&d, kOps, delay_s, go_fd, res] {
    *res = run_ranks(2, [&](int r) {
      gsync_comm_t* comm;
      RANK_CHECK(connect_rank(d.socket(), kJob, 2, r, &comm) == 0, "{}", gsync_last_error());
      std::vector<float> buf(1024, 1.0f);
      for (int s = 0; s < kOps; s++) {
        if (r == 1) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
        gsync_request_t* req;
        RANK_CHECK(gsync_allreduce(comm, 3, uint64_t(s), buf.data(), buf.size(), GSYNC_FLOAT32,
                                   GSYNC_SUM, 0, &req) == 0,
                   "{}", gsync_last_error());
        RANK_CHECK(gsync_wait(req, 20000) == 0, "{}", gsync_request_error(req));
        gsync_request_free(req);
      }
      report(fmt::format("pid {}\n", getpid()));
      RANK_CHECK(read_byte(go_fd, 60000), "no word to close");
      gsync_close(comm);
      return 0;
    });
  });
}

// What the page must show, checked in the browser's DOM (the page's own
// text is checked by the caller): the job's section under its escaped
// name, the straggler row, a timeline row per rank, the script run.
void check_dom(const Loaded& b, const std::string& late_pid, double delay_s) {
  ASSERT_EQ(b.rc, "0\n") << b.log;
  EXPECT_EQ(count_of(b.dom, "<section class=\"job\""), 1u) << b.dom;
  EXPECT_NE(b.dom.find("<h3>job <code>&lt;b&gt;\"x&amp;y</code></h3>"), std::string::npos) << b.dom;
  EXPECT_EQ(b.dom.find("<b>"), std::string::npos) << "the job id became markup:\n" << b.dom;
  // The straggler's row: rank 1, with the pid rank 1 reported.
  EXPECT_EQ(all_of(b.dom, "<tr class=\"rank straggler\" data-rank=\"(\\d+)\">"),
            std::vector<std::string>{"1"})
      << b.dom;
  EXPECT_EQ(all_of(b.dom,
                   "<tr class=\"rank straggler\" data-rank=\"1\">(?:<td[^>]*>[^<]*</td>){2}"
                   "<td>(\\d+)</td>"),
            std::vector<std::string>{late_pid})
      << b.dom;
  EXPECT_NE(b.dom.find("rank 1 (pid " + late_pid + ") is the straggler"), std::string::npos);
  // The slowest op's timeline: one row per rank, rank 1 the late one.
  EXPECT_EQ(count_of(b.dom, "<svg class=\"timeline\""), 1u) << b.dom;
  EXPECT_EQ(all_of(b.dom, "<g class=\"row arrival\" data-rank=\"(\\d+)\">"),
            (std::vector<std::string>{"0", "1"}))
      << b.dom;
  EXPECT_GE(count_of(b.dom, "<g class=\"row stage\""), 1u) << b.dom;
  const auto late = all_of(b.dom, "<title>rank 1 arrived ([0-9.]+) ms after the first</title>");
  ASSERT_EQ(late.size(), 1u) << b.dom;
  EXPECT_GE(std::stod(late[0]), 0.5e3 * delay_s) << b.dom;
  // The script ran to its end, and nothing reached the console.
  EXPECT_NE(b.dom.find("<html lang=\"en\" data-script=\"ready\">"), std::string::npos)
      << b.dom.substr(0, 200);
  EXPECT_EQ(b.log.find("CONSOLE"), std::string::npos) << b.log;
  EXPECT_EQ(b.log.find("Uncaught"), std::string::npos) << b.log;
}

TEST(Report, TheBrowserShowsTheJobItsStragglerAndTheSlowestOp) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  const std::string browser = on_path({"chromium-headless-shell", "chromium"});
  if (browser.empty())
    GTEST_SKIP() << "SKIPPED: no headless browser (Debian's chromium-headless-shell or "
                    "chromium; tools/setup-deps.sh installs the first)";
  DaemonProcess d;
  constexpr int kOps = 24;  // the verdict needs 16
  constexpr double kDelayS = 0.025;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<ChildResult> res;
  std::thread ranks = run_job(d, kOps, kDelayS, go[0], &res);
  const bool seen = wait_until(
      [&] {
        nlohmann::json row = job_row(d.admin_socket(), kJob);
        return row.is_object() && row["stragglers"].value("ops", 0) == kOps;
      },
      60000);
  const std::string page = d.dir() + "/report.html";
  std::string out =
      seen ? run_command(fmt::format("{} report -o {} {} 2>&1", ctl, page, d.admin_socket())) : "";
  ASSERT_EQ(write(go[1], "xx", 2), 2);
  ranks.join();
  for (auto& c : res) ASSERT_EQ(c.code, 0) << c.output;
  ASSERT_TRUE(seen) << admin_query(d.admin_socket(), "jobs");
  EXPECT_NE(out.find(page + ": 1 job of 1 daemon"), std::string::npos) << out;
  // The page's own text: escaped, and nothing fetched from anywhere.
  const std::string html = read_file(page);
  EXPECT_NE(html.find("data-job=\"&lt;b&gt;&quot;x&amp;y\""), std::string::npos) << html;
  EXPECT_EQ(html.find(kJob), std::string::npos) << html;
  for (const char* outside : {"http:", "https:", "src=", "<link", "url(", "@import"})
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  const std::string late_pid = res[1].output.substr(4, res[1].output.find('\n') - 4);
  check_dom(load_in_browser(browser, page, d.dir()), late_pid, kDelayS);
}

// --job of a job no daemon has, an output that cannot be written, a daemon
// that is not there: each says so, and only the first succeeds.
TEST(Report, AnUnknownJobAnUnwritablePathAndAMissingDaemonAreNamed) {
  const char* ctl = std::getenv("GSYNCCTL");
  if (!ctl) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)";
  DaemonProcess d;
  const std::string page = d.dir() + "/r.html";
  std::string out = run_command(fmt::format("{} -s {} report -o {} --job nosuch 2>&1; echo rc=$?",
                                            ctl, d.admin_socket(), page));
  EXPECT_NE(out.find(page + ": 0 jobs of 1 daemon"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=0"), std::string::npos) << out;
  EXPECT_NE(read_file(page).find("None of these daemons has it"), std::string::npos);
  out = run_command(fmt::format("{} report -o /nonexistent/dir/r.html {} 2>&1; echo rc=$?", ctl,
                                d.admin_socket()));
  EXPECT_NE(out.find("cannot write /nonexistent/dir/r.html: No such file or directory"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("rc=73"), std::string::npos) << out;
  const std::string gone = d.dir() + "/gone.html";
  out = run_command(fmt::format("{} report -o {} {} /nonexistent/admin.sock 2>&1; echo rc=$?", ctl,
                                gone, d.admin_socket()));
  EXPECT_NE(out.find("/nonexistent/admin.sock"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=2"), std::string::npos) << out;
  EXPECT_NE(access(gone.c_str(), F_OK), 0) << "a page without the daemon asked for";
}

uint32_t big_endian(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; i++) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

// The smallest sweep of two ranks, drawn: a PNG (its signature, then an
// IHDR chunk with the size gsync-perf draws at: 1000 x 600).
TEST(PerfPlot, TheSweepIsDrawnAsAPng) {
  const char* perf = std::getenv("GSYNC_PERF");
  if (!perf) GTEST_SKIP() << "SKIPPED: GSYNC_PERF not set (run through meson test)";
  if (on_path({"gnuplot"}).empty())
    GTEST_SKIP() << "SKIPPED: no gnuplot (Debian's gnuplot-nox; tools/setup-deps.sh installs it)";
  char dir_template[] = "/tmp/gsync-plot-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, png = dir + "/busbw.png";
  std::string out = run_command(fmt::format(
      "{} -n 2 -b 4K -e 64K -f 4 --iters 5 --warmup 1 --plot {} 2>&1; echo rc=$?", perf, png));
  EXPECT_NE(out.find("# plot: busbw by size drawn to " + png + " (1000x600)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("rc=0"), std::string::npos) << out;
  const std::string bytes = read_file(png);
  ASSERT_GE(bytes.size(), 33u) << out;
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(big_endian(bytes, 8), 13u);  // IHDR's length
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  EXPECT_EQ(big_endian(bytes, 16), 1000u);
  EXPECT_EQ(big_endian(bytes, 20), 600u);
  // Without gnuplot, or with nowhere to write, it stops before measuring.
  out = run_command(
      fmt::format("env PATH=/nonexistent {} --plot {}/x.png 2>&1; echo rc=$?", perf, dir));
  EXPECT_NE(out.find("gnuplot, which is not on $PATH: install Debian's gnuplot-nox"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("rc=2"), std::string::npos) << out;
  EXPECT_EQ(out.find("bytes"), std::string::npos) << "it measured:\n" << out;
  out = run_command(fmt::format("{} --plot /nonexistent/x.png 2>&1; echo rc=$?", perf));
  EXPECT_NE(out.find("cannot write the plot /nonexistent/x.png"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=2"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gsync::test
