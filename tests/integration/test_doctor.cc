// SPDX-License-Identifier: Apache-2.0
//
// gsyncctl doctor against real daemons (docs/operations.md, "Doctor"): a
// two-host test bed (network namespaces; loopback without root), doctor
// run inside host h1's namespace as an operator would run it there.
//   - healthy: h2 reachable, the same version and build, a latency and a
//     bandwidth over the daemons' own link, the clocks (one machine's)
//     close; nothing fails, exit status 0;
//   - h2's daemon killed: reach and link fail naming h2, exit status 1;
//   - h2's daemon stopped (SIGSTOP; its link stays up for the peer
//     timeout): the probe answers at its deadline naming h2, and h1's
//     admin socket serves other requests meanwhile;
//   - the daemon's RLIMIT_MEMLOCK below the arena (prlimit --pid): memlock
//     fails, between the default and the largest arena it warns.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <future>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using tools::run_command;

const char* gsyncctl() { return std::getenv("GSYNCCTL"); }

struct DoctorRun {
  int status = -1;  // gsyncctl's exit status
  json doc;         // --json: the document; else null
  std::string text;
};

// gsyncctl doctor against admin, inside netns when there is one.
DoctorRun doctor(const std::string& netns, const std::string& admin, bool as_json) {
  std::string cmd = fmt::format("{}'{}' doctor --socket '{}'{}; echo \"status=$?\"",
                                netns.empty() ? "" : "ip netns exec " + netns + " ", gsyncctl(),
                                admin, as_json ? " --json" : "");
  DoctorRun r;
  r.text = run_command(cmd);
  size_t at = r.text.rfind("status=");
  if (at != std::string::npos) {
    r.status = std::atoi(r.text.c_str() + at + 7);
    r.text.resize(at);
  }
  if (as_json) r.doc = json::parse(r.text, nullptr, false);
  return r;
}

DoctorRun doctor_on(const testbed::Testbed& bed, int h, bool as_json = true) {
  return doctor(bed.netns(h), bed.admin_socket(h), as_json);
}

// The check named `name` of a --json document (null when absent).
json check(const DoctorRun& r, const std::string& name) {
  if (r.doc.is_object() && r.doc["checks"].is_array())
    for (const json& c : r.doc["checks"])
      if (c.value("check", "") == name) return c;
  return nullptr;
}

// The names of the checks that failed.
std::vector<std::string> failed(const DoctorRun& r) {
  std::vector<std::string> out;
  if (r.doc.is_object() && r.doc["checks"].is_array())
    for (const json& c : r.doc["checks"])
      if (c.value("level", "") == "fail") out.push_back(c.value("check", ""));
  return out;
}

// Sets the soft RLIMIT_MEMLOCK of a running process (up to its hard
// limit: no CAP_SYS_RESOURCE needed). False when prlimit refused.
bool set_memlock(pid_t pid, uint64_t soft) {
  return run_command(fmt::format("prlimit --pid {} --memlock={}: && echo done", pid, soft))
             .find("done") != std::string::npos;
}

// The hard RLIMIT_MEMLOCK of pid (0 when unknown).
uint64_t hard_memlock(pid_t pid) {
  std::string out = run_command(fmt::format("prlimit --pid {} --memlock --raw --noheadings "
                                            "--output HARD",
                                            pid));
  return out.find("unlimited") != std::string::npos ? UINT64_MAX : std::strtoull(out.c_str(), nullptr, 10);
}

// A config for the bed's daemons: arenas of 64 KiB, so that any memlock
// limit a test machine starts its processes with covers them (the host
// checks of a healthy bed pass), and extra TOML.
class BedConfig {
 public:
  explicit BedConfig(const std::string& extra = "") {
    char name[] = "/tmp/gsync-doctor-XXXXXX.toml";
    int fd = mkstemps(name, 5);
    if (fd >= 0) close(fd);
    path_ = name;
    std::ofstream(path_) << "[limits]\ndefault_arena = \"64K\"\nmax_arena = \"64K\"\n" << extra;
  }
  ~BedConfig() { unlink(path_.c_str()); }
  std::vector<std::string> args() const { return {"--config", path_}; }

 private:
  std::string path_;
};

// h1 sees h2's link up and has heard what h2 runs.
bool linked(const testbed::Testbed& bed) {
  return wait_until([&] {
    json p = admin_json(bed.admin_socket(0), "peers");
    if (!p.is_object() || !p["peers"].is_array() || p["peers"].empty()) return false;
    const json& h2 = p["peers"][0];
    return h2.value("state", "") == "up" && h2["version"].is_string();
  });
}

// Bytes h1 has sent h2 over their link (peers report).
uint64_t sent_to_h2(const testbed::Testbed& bed) {
  json p = admin_json(bed.admin_socket(0), "peers");
  if (!p.is_object() || !p["peers"].is_array() || p["peers"].empty()) return 0;
  return p["peers"][0].value("bytes_sent", uint64_t{0});
}

#define NEED_GSYNCCTL() \
  if (!gsyncctl()) GTEST_SKIP() << "SKIPPED: GSYNCCTL not set (run through meson test)"

TEST(Doctor, TwoHealthyHostsReachEachOtherWithEqualBuildsAndMeasuredLinks) {
  NEED_GSYNCCTL();
  BedConfig config;
  auto bed = make_bed({2}, "", 20000, config.args());
  ASSERT_TRUE(bed);
  ASSERT_TRUE(linked(*bed));
  DoctorRun r = doctor_on(*bed, 0);
  ASSERT_TRUE(r.doc.is_object()) << r.text;
  EXPECT_EQ(failed(r), std::vector<std::string>{}) << r.text;
  EXPECT_EQ(r.status, 0) << r.text;

  json reach = check(r, "reach h2");
  EXPECT_EQ(reach["level"], "ok") << reach;
  EXPECT_EQ(reach["data"]["address"], fmt::format("{}:{}", bed->address(1), bed->port(1)));
  json version = check(r, "version h2");
  EXPECT_EQ(version["level"], "ok") << version;
  EXPECT_EQ(version["data"]["version"], version["data"]["self_version"]) << version;
  EXPECT_EQ(version["data"]["build_id"], version["data"]["self_build_id"]) << version;
  EXPECT_FALSE(version["data"]["build_id"].get<std::string>().empty()) << version;
  json link = check(r, "link h2");
  ASSERT_EQ(link["level"], "ok") << link;
  EXPECT_GT(link["data"]["rtt_us"]["min"].get<double>(), 0) << link;
  EXPECT_GE(link["data"]["rtt_us"]["median"], link["data"]["rtt_us"]["min"]) << link;
  EXPECT_GT(link["data"]["gbit_per_s"].get<double>(), 0) << link;
  if (bed->namespaces()) {
    EXPECT_EQ(link["data"]["interface"], "eth0") << link;
  }
  json clock = check(r, "clock h2");
  EXPECT_EQ(clock["level"], "ok") << clock;
  // One machine, one clock: the estimate is off by at most the asymmetry
  // of a round trip.
  EXPECT_LT(std::abs(clock["data"]["offset_us"].get<double>()), 5000) << clock;
  EXPECT_EQ(check(r, "memfd")["level"], "ok");

  // The text: one line per check, the level first.
  DoctorRun text = doctor_on(*bed, 0, false);
  EXPECT_NE(text.text.find("\nok    reach h2: " + bed->address(1)), std::string::npos)
      << text.text;
  EXPECT_NE(text.text.find("\nok    link h2: rtt "), std::string::npos) << text.text;
  EXPECT_EQ(text.status, r.status);
}

TEST(Doctor, AKilledPeerFailsReachAndTheProbeNamingIt) {
  NEED_GSYNCCTL();
  BedConfig config;
  auto bed = make_bed({2}, "", 20000, config.args());
  ASSERT_TRUE(bed);
  ASSERT_TRUE(linked(*bed));
  bed->kill_daemon(1, SIGKILL);
  ASSERT_TRUE(wait_until([&] {
    json p = admin_json(bed->admin_socket(0), "peers");
    return p.is_object() && p["peers"].is_array() && !p["peers"].empty() &&
           p["peers"][0].value("state", "") != "up";
  }));
  DoctorRun r = doctor_on(*bed, 0);
  ASSERT_TRUE(r.doc.is_object()) << r.text;
  EXPECT_EQ(r.status, 1) << r.text;
  // The status is theirs: nothing else failed.
  EXPECT_EQ(failed(r), (std::vector<std::string>{"reach h2", "link h2"})) << r.text;
  json reach = check(r, "reach h2");
  EXPECT_EQ(reach["level"], "fail") << reach;
  EXPECT_NE(reach["found"].get<std::string>().find(bed->address(1)), std::string::npos) << reach;
  EXPECT_EQ(reach["data"]["tcp_connect"], false) << reach;
  json link = check(r, "link h2");
  EXPECT_EQ(link["level"], "fail") << link;
  EXPECT_NE(link["found"].get<std::string>().find("not probed: the link is"), std::string::npos)
      << link;
  // What h2 ran is still known from when its link was up.
  EXPECT_NE(check(r, "version h2")["found"].get<std::string>().find("when its link was last up"),
            std::string::npos);
}

TEST(Doctor, AStoppedPeerIsNamedAtTheProbesDeadlineWhileTheDaemonServes) {
  NEED_GSYNCCTL();
  // A peer timeout past the probe's 5 s deadline: the link stays up while
  // h2 is stopped, so only the deadline can end the probe.
  BedConfig config("[cluster]\npeer_timeout_ms = 30000\n");
  auto bed = make_bed({2}, "", 20000, config.args());
  ASSERT_TRUE(bed);
  ASSERT_TRUE(linked(*bed));
  bed->kill_daemon(1, SIGSTOP);
  struct Cont {
    testbed::Testbed& bed;
    ~Cont() { bed.kill_daemon(1, SIGCONT); }
  } cont{*bed};
  const uint64_t before = sent_to_h2(*bed);
  const auto t0 = Clock::now();
  auto running = std::async(std::launch::async, [&] { return doctor_on(*bed, 0); });
  // The probe's first ping is out (h1 has sent h2 more) and cannot be
  // answered: h1's event loop must still serve other admin requests.
  ASSERT_TRUE(wait_until([&] { return sent_to_h2(*bed) > before; }));
  const auto q0 = Clock::now();
  EXPECT_TRUE(admin_json(bed->admin_socket(0), "status").is_object());
  const double status_s = std::chrono::duration<double>(Clock::now() - q0).count();
  EXPECT_LT(status_s, 1.0) << "status waited on the probe";
  EXPECT_EQ(running.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the probe ended before its deadline";
  DoctorRun r = running.get();
  const double doctor_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(doctor_s, 4.5) << r.text;
  EXPECT_LT(doctor_s, 9.0) << r.text;
  EXPECT_EQ(r.status, 1) << r.text;
  EXPECT_EQ(failed(r), std::vector<std::string>{"link h2"}) << r.text;
  json link = check(r, "link h2");
  EXPECT_EQ(link["level"], "fail") << link;
  EXPECT_NE(link["found"].get<std::string>().find("h2 did not answer within 5000 ms"),
            std::string::npos)
      << link;
  EXPECT_EQ(check(r, "reach h2")["level"], "ok") << r.text;  // the kernel still accepts
}

// The daemon's own limit, read from /proc/PID/limits, against its
// arenas (2 MiB by default, 4 MiB at most): ok at 4 MiB, a warn at 3, a
// fail at 1. Only the soft limit moves, below the hard one, so no
// CAP_SYS_RESOURCE is needed.
TEST(Doctor, MemlockBelowTheArenaFails) {
  NEED_GSYNCCTL();
  DaemonProcess d({}, "[limits]\ndefault_arena = \"2M\"\nmax_arena = \"4M\"\n");
  ASSERT_TRUE(d.alive()) << d.log();
  if (hard_memlock(d.pid()) < (4u << 20))
    GTEST_SKIP() << "SKIPPED: the daemon's hard memlock limit is under 4 MiB ("
                 << hard_memlock(d.pid()) << " bytes): the ok case cannot be set up";
  ASSERT_TRUE(set_memlock(d.pid(), 4 << 20));
  DoctorRun ok_run = doctor("", d.admin_socket(), true);
  EXPECT_EQ(check(ok_run, "memlock")["level"], "ok") << ok_run.text;
  EXPECT_EQ(check(ok_run, "cluster")["level"], "ok") << ok_run.text;  // single host
  EXPECT_EQ(ok_run.status, 0) << ok_run.text;

  ASSERT_TRUE(set_memlock(d.pid(), 3 << 20));
  DoctorRun mid = doctor("", d.admin_socket(), true);
  EXPECT_EQ(check(mid, "memlock")["level"], "warn") << mid.text;
  EXPECT_EQ(mid.status, 0) << mid.text;

  ASSERT_TRUE(set_memlock(d.pid(), 1 << 20));
  DoctorRun low = doctor("", d.admin_socket(), true);
  json m = check(low, "memlock");
  EXPECT_EQ(m["level"], "fail") << low.text;
  EXPECT_NE(m["found"].get<std::string>().find(
                fmt::format("gsyncd (pid {}) may lock 1.0 MiB; one session's arena is 2.0 MiB",
                            d.pid())),
            std::string::npos)
      << m;
  EXPECT_NE(m["fix"].get<std::string>().find(fmt::format("prlimit --pid {}", d.pid())),
            std::string::npos)
      << m;
  EXPECT_EQ(low.status, 1);
  EXPECT_EQ(failed(low), std::vector<std::string>{"memlock"}) << low.text;
}

}  // namespace
}  // namespace gsync::test
