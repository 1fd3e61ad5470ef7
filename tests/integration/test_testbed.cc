// SPDX-License-Identifier: Apache-2.0
//
// The multi-host test bed (tools/testbed) checked for real: namespaces that
// reach each other across racks, tbf uplinks that cap inter-rack TCP and
// leave intra-rack TCP alone, teardown that leaves nothing behind (also after
// a failed start and after an owner that died), loopback mode, and - once
// gsyncd has --cluster - daemons started, killed and restarted per host.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gsync/gsync.h"
#include "tools/common/procs.h"
#include "tools/peers/launch.h"
#include "tools/peers/sampling.h"
#include "tools/testbed/testbed.h"

namespace gsync::testbed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint16_t kTestPort = 7801;  // not the daemons' port: nothing else listens there

std::string shell(const std::string& cmd) { return tools::run_command(cmd); }

// Names of namespaces that beds of this process made.
std::vector<std::string> my_netns() {
  std::vector<std::string> out;
  std::istringstream in(shell("ip netns list 2>/dev/null"));
  std::string line, mine = "gtb-" + std::to_string(getpid()) + "-";
  while (std::getline(in, line))
    if (line.rfind(mine, 0) == 0) out.push_back(line.substr(0, line.find(' ')));
  return out;
}

int root_link_count() {
  std::istringstream in(shell("ip -o link show"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n++;
  return n;
}

// Runs fn in host h (its netns), with a pipe for text back; kills it after
// timeout_s. Returns {exit code, text}.
std::pair<int, std::string> run_in_host(Testbed& bed, int h, std::function<int(int out_fd)> fn,
                                        int timeout_s = 10) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return {-1, "pipe failed"};
  pid_t pid = bed.spawn_in_host(h, [&] {
    close(p[0]);
    alarm(static_cast<unsigned>(timeout_s));
    return fn(p[1]);
  });
  close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), out};
}

void say(int fd, const std::string& s) {
  [[maybe_unused]] ssize_t n = write(fd, s.data(), s.size());
}

sockaddr_in inet(const std::string& addr, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  return sa;
}

// A listener in host h on its address: accepts one connection, reads to EOF
// (answering every byte count with nothing), closes. Writes 'r' to ready_fd
// once listening so the connector need not retry.
pid_t start_sink(Testbed& bed, int h, int ready_fd) {
  std::string addr = bed.address(h);
  return bed.spawn_in_host(h, [addr, ready_fd] {
    alarm(20);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = inet(addr, kTestPort);
    if (bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(ls, 1) != 0) return 2;
    say(ready_fd, "r");
    int c = accept(ls, nullptr, nullptr);
    if (c < 0) return 3;
    static char buf[1 << 20];
    while (read(c, buf, sizeof buf) > 0) {
    }
    close(c);
    close(ls);
    return 0;
  });
}

// From host `from`, sends to host `to`'s sink for `seconds`, then half-closes
// and waits for the sink's close, so the time covers delivery of every byte
// (not just filling the socket buffer). Returns Mbit/s, or -1 with *error.
double transfer_mbit(Testbed& bed, int from, int to, double seconds, std::string* error) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  pid_t sink = start_sink(bed, to, ready[1]);
  close(ready[1]);
  char c;
  if (read(ready[0], &c, 1) != 1) {
    close(ready[0]);
    *error = "sink in " + bed.host_id(to) + " did not start";
    waitpid(sink, nullptr, 0);
    return -1;
  }
  close(ready[0]);
  std::string addr = bed.address(to);
  auto [code, out] = run_in_host(bed, from, [&](int fd) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa = inet(addr, kTestPort);
    if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      say(fd, std::string("connect: ") + strerror(errno));
      return 1;
    }
    static char buf[1 << 16];
    uint64_t bytes = 0;
    auto start = Clock::now();
    auto stop = start + std::chrono::duration<double>(seconds);
    while (Clock::now() < stop) {
      ssize_t n = write(s, buf, sizeof buf);
      if (n <= 0) {
        say(fd, std::string("write: ") + strerror(errno));
        return 1;
      }
      bytes += static_cast<uint64_t>(n);
    }
    shutdown(s, SHUT_WR);
    while (read(s, buf, sizeof buf) > 0) {
    }
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    say(fd, std::to_string(bytes * 8.0 / secs / 1e6));
    close(s);
    return 0;
  });
  int status = 0;
  waitpid(sink, &status, 0);
  if (code != 0) {
    *error = bed.host_id(from) + " -> " + bed.host_id(to) + ": " + out;
    return -1;
  }
  return std::stod(out);
}

bool root() { return geteuid() == 0; }

Options network_only(int hosts = 4, int racks = 2) {
  Options o;
  o.hosts = hosts;
  o.racks = racks;
  o.start_daemons = false;
  return o;
}

#define REQUIRE_NAMESPACES(bed) \
  if (!(bed)->namespaces())     \
  GTEST_SKIP() << "SKIPPED: no network namespaces here: " << (bed)->loopback_reason()

TEST(TestbedNetwork, HostsReachEachOtherInAndAcrossRacks) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(network_only(), &bed);
  ASSERT_TRUE(st) << st.message();
  REQUIRE_NAMESPACES(bed);
  ASSERT_EQ(bed->hosts(), 4);
  EXPECT_EQ(bed->rack(0), "r1");
  EXPECT_EQ(bed->rack(1), "r1");
  EXPECT_EQ(bed->rack(2), "r2");
  EXPECT_EQ(bed->address(0), "10.77.1.1");
  EXPECT_EQ(bed->address(2), "10.77.2.3");
  EXPECT_EQ(bed->netns(0), bed->name() + "-h1");
  // h1 -> h2 stays in rack r1; h1 -> h3 crosses both uplinks.
  for (int to : {1, 2}) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t sink = start_sink(*bed, to, ready[1]);
    close(ready[1]);
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    close(ready[0]);
    std::string addr = bed->address(to);
    auto [code, out] = run_in_host(*bed, 0, [&](int fd) {
      int s = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in sa = inet(addr, kTestPort);
      if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        say(fd, std::string("connect: ") + strerror(errno));
        return 1;
      }
      // The peer must see this host's own address, not a translated one.
      sockaddr_in local{};
      socklen_t len = sizeof local;
      getsockname(s, reinterpret_cast<sockaddr*>(&local), &len);
      char text[INET_ADDRSTRLEN];
      say(fd, inet_ntop(AF_INET, &local.sin_addr, text, sizeof text));
      [[maybe_unused]] ssize_t n = write(s, "hello", 5);
      close(s);
      return 0;
    });
    EXPECT_EQ(code, 0) << bed->host_id(0) << " -> " << bed->host_id(to) << ": " << out;
    EXPECT_EQ(out, bed->address(0));
    int status = 0;
    waitpid(sink, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

TEST(TestbedNetwork, ShapedUplinkCapsInterRackButNotIntraRack) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  Options o = network_only();
  o.uplink_mbit = 200;
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(o, &bed);
  ASSERT_TRUE(st) << st.message();
  REQUIRE_NAMESPACES(bed);
  std::string err;
  double inter = transfer_mbit(*bed, 0, 2, 1.5, &err);
  ASSERT_GT(inter, 0) << err;
  double intra = transfer_mbit(*bed, 0, 1, 1.0, &err);
  ASSERT_GT(intra, 0) << err;
  std::printf(
      "uplink tbf 200 Mbit/s: inter-rack h1->h3 %.0f Mbit/s, intra-rack h1->h2 %.0f Mbit/s\n",
      inter, intra);
  EXPECT_LT(inter, 250.0);
  EXPECT_GT(inter, 100.0);  // the cap, not a broken link
  // Intra-rack is a veth + bridge: Gbit/s, even on a busy 2-core machine.
  EXPECT_GT(intra, 500.0);
  // Both ends of every uplink carry the tbf.
  std::string qdiscs = shell("tc -n " + bed->fabric_netns() + " qdisc show");
  for (const char* dev : {"up1", "upc1", "up2", "upc2"})
    EXPECT_NE(qdiscs.find(std::string("dev ") + dev + " root"), std::string::npos) << qdiscs;
  EXPECT_NE(qdiscs.find("rate 200Mbit"), std::string::npos) << qdiscs;
}

TEST(TestbedNetwork, TeardownLeavesNoNamespaceLinkOrDirectory) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  int links_before = root_link_count();
  std::string name, dir;
  {
    Options o = network_only(3, 2);
    o.uplink_mbit = 500;
    std::unique_ptr<Testbed> bed;
    Status st = Testbed::create(o, &bed);
    ASSERT_TRUE(st) << st.message();
    REQUIRE_NAMESPACES(bed);
    name = bed->name();
    dir = bed->dir();
    std::string list = shell("ip netns list");
    for (std::string ns : {bed->fabric_netns(), bed->netns(0), bed->netns(1), bed->netns(2)})
      EXPECT_NE(list.find(ns), std::string::npos) << list;
    EXPECT_TRUE(std::filesystem::exists(bed->cluster_file()));
    // Nothing of the bed is visible in the root namespace, even while it runs.
    EXPECT_EQ(root_link_count(), links_before);
    // A process left running in a host is killed by the teardown.
    pid_t sleeper = bed->spawn_in_host(1, [] {
      pause();
      return 0;
    });
    ASSERT_GT(sleeper, 0);
    bed.reset();
    int status = 0;
    ASSERT_EQ(waitpid(sleeper, &status, 0), sleeper);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  EXPECT_EQ(shell("ip netns list").find(name), std::string::npos);
  EXPECT_EQ(root_link_count(), links_before);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// gsync-perf builds its own test bed; Ctrl-C (SIGINT) in the middle of a
// run must take it down like gsync-testbed does: no namespace, no
// directory, no daemon left, and the exit status says which signal.
TEST(TestbedNetwork, GsyncPerfTearsItsBedDownOnCtrlC) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  const char* perf = getenv("GSYNC_PERF");
  if (!perf) GTEST_SKIP() << "SKIPPED: GSYNC_PERF not set (run through meson test)";
  pid_t pid = tools::spawn([perf] {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(perf, perf, "--hosts", "2", "--racks", "1", "-n", "1", "-b", "4K", "-e", "4K", "--iters",
          "100000", "--warmup", "10", static_cast<char*>(nullptr));
    return 127;
  });
  ASSERT_GT(pid, 0);
  std::string prefix = "gtb-" + std::to_string(pid) + "-";
  // Ctrl-C in the middle of the run: once the bed is built and its first
  // host's daemon has completed ops of the ranks.
  auto busy = [&] {
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
      if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
      auto st = nlohmann::json::parse(
          tools::admin_query((e.path() / "h1" / "admin.sock").string(), "status"), nullptr, false);
      return st.is_object() && st["ops"].is_object() && st["ops"].value("completed", 0) > 0;
    }
    return false;
  };
  if (!tools::wait_until(busy, 30000, 50)) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    FAIL() << "gsync-perf built no test bed, or its ranks completed no op, in 30 s";
  }
  ASSERT_NE(shell("ip netns list").find(prefix), std::string::npos) << "no namespaces?";
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGINT) << "status " << status;
  EXPECT_EQ(shell("ip netns list").find(prefix), std::string::npos) << shell("ip netns list");
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path()))
    EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << e.path() << " left behind";
  // ("[g]tb-..." so that pgrep's own shell, whose command line holds the
  // pattern, does not match it.)
  EXPECT_EQ(shell("pgrep -f '[g]" + prefix.substr(1) + "' || true"), "") << "processes left";
}

// gsync-perf --compare runs the peers over the same hosts as gsync: Gloo's
// ranks each enter their host's namespace, Open MPI's mpirun runs in the
// first and starts the others through netns-rsh.sh. Small sizes: that they
// run across the racks and get the right sum, not how fast. One test per
// peer, so a missing one is a skip that counts, not a pass.
std::vector<peers::HostSlot> two_by_two_slots(const Testbed& bed) {
  std::vector<peers::HostSlot> slots;
  for (int h = 0; h < 2; h++)
    for (int k = 0; k < 2; k++) slots.push_back({bed.netns(h), bed.address(h), bed.cpus(h)});
  return slots;
}

void check_peer(const peers::Result& r, const char* what) {
  ASSERT_TRUE(r.ok()) << what << ": " << r.error << "\ncommand: " << r.command;
  ASSERT_EQ(r.rows.size(), 2u) << what;
  for (const auto& [bytes, row] : r.rows) {
    EXPECT_EQ(row.wrong, 0) << what << ", " << bytes << " bytes";
    EXPECT_GT(row.busbw_gbps, 0) << what << ", " << bytes << " bytes";
  }
}

TEST(TestbedNetwork, GlooRunsAcrossNamespaces) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  if (peers::gloo_driver_path().empty())
    GTEST_SKIP() << "SKIPPED: gloo-allreduce not built (libgloo-dev)";
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(network_only(2, 2), &bed);
  ASSERT_TRUE(st) << st.message();
  REQUIRE_NAMESPACES(bed);
  check_peer(peers::run_gloo(two_by_two_slots(*bed), 4096, 16384, 3, 60), "gloo");
}

TEST(TestbedNetwork, MpiRunsAcrossNamespaces) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  if (peers::mpirun_path().empty() || peers::mpi_driver_path().empty())
    GTEST_SKIP() << "SKIPPED: mpirun or mpi-allreduce missing (openmpi-bin, libopenmpi-dev)";
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(network_only(2, 2), &bed);
  ASSERT_TRUE(st) << st.message();
  REQUIRE_NAMESPACES(bed);
  peers::Result r = peers::run_mpi_tcp(two_by_two_slots(*bed), 4096, 16384, 3, 60);
  check_peer(r, "mpi");
  EXPECT_NE(r.command.find(bed->netns(1)), std::string::npos) << r.command;
}

// A daemon that exits at once: create() fails naming the host, the command
// and the exit status, and still removes the network it had built.
TEST(TestbedNetwork, FailedStartTearsDownWhatWasBuilt) {
  std::vector<std::string> before = my_netns();
  Options o;
  o.hosts = 2;
  o.racks = 2;
  o.gsyncd = "/bin/false";
  o.start_timeout_s = 5;
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(o, &bed);
  ASSERT_FALSE(st);
  EXPECT_EQ(bed, nullptr);
  // Both daemons fail; whichever is seen first is named.
  EXPECT_TRUE(st.message().find("gsyncd of h1 exited with status 1") != std::string::npos ||
              st.message().find("gsyncd of h2 exited with status 1") != std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("/bin/false --socket"), std::string::npos) << st.message();
  EXPECT_EQ(my_netns(), before);

  o.gsyncd = "/nonexistent/gsyncd";
  st = Testbed::create(o, &bed);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("'/nonexistent/gsyncd' not found"), std::string::npos)
      << st.message();
  EXPECT_EQ(my_netns(), before);
}

// 40 hosts in namespaces (issue #38, item 6): 1560 neighbour entries,
// past the kernel's default limit of 1024, where links stayed down while
// the bed said it was up. The bed raises the limit for its life and puts
// it back; it is up only once every daemon sees all 39 links up, and a
// barrier of 40 ranks, one a host, completes.
TEST(TestbedNetwork, FortyHostsComeUpWithEveryLink) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  auto limit = [](int i) {
    std::ifstream in("/proc/sys/net/ipv4/neigh/default/gc_thresh" + std::to_string(i));
    uint64_t v = 0;
    in >> v;
    return v;
  };
  const uint64_t before2 = limit(2), before3 = limit(3);
  Options o;
  o.hosts = 40;
  o.racks = 2;
  o.log_level = "warn";
  o.start_timeout_s = 60;
  {
    std::unique_ptr<Testbed> bed;
    Status st = Testbed::create(o, &bed);
    ASSERT_TRUE(st) << st.message();
    REQUIRE_NAMESPACES(bed);
    EXPECT_GE(limit(2), neighbour_entries(40));
    for (int h : {0, 39}) {
      auto j = nlohmann::json::parse(tools::admin_query(bed->admin_socket(h), "peers"));
      size_t up = 0;
      for (const auto& p : j["peers"]) up += p.value("state", "") == "up";
      EXPECT_EQ(up, 39u) << bed->host_id(h) << ": " << j.dump();
    }
    EXPECT_TRUE(bed->wait_links_up());
    auto res = tools::run_ranks(40, [&](int r) {
      gsync_comm_t* comm;
      gsync_config_t cfg;
      gsync_config_init(&cfg);
      const std::string sock = bed->socket(r);
      cfg.socket_path = sock.c_str();
      cfg.job_id = "forty";
      cfg.world_size = 40;
      cfg.rank = r;
      cfg.local_rank = 0;
      cfg.local_size = 1;
      cfg.arena_bytes = 4 << 20;
      if (gsync_connect(&cfg, &comm) != 0) {
        tools::report(gsync_last_error());
        return 1;
      }
      int rc = gsync_barrier(comm, 1, 60000);
      if (rc != 0) tools::report(gsync_last_error());
      gsync_close(comm);
      return rc == 0 ? 0 : 2;
    }, 180);
    for (size_t r = 0; r < res.size(); r++)
      EXPECT_EQ(res[r].code, 0) << "rank " << r << ": " << res[r].output;
  }
  EXPECT_EQ(limit(2), before2);
  EXPECT_EQ(limit(3), before3);
}

// A bed says which links are down, not only that ops hang: host 3's
// daemon killed, host 1's links wait in vain and the error names h1 -> h3.
TEST(TestbedNetwork, ABedNamesTheLinksThatAreDown) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  Options o;
  o.hosts = 3;
  o.racks = 1;
  o.start_timeout_s = 2;
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(o, &bed);
  ASSERT_TRUE(st) << st.message();
  EXPECT_TRUE(bed->wait_links_up());
  bed->kill_daemon(2, SIGKILL);
  st = bed->wait_links_up({0});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), GSYNC_ERR_CONNECT);
  EXPECT_NE(st.message().find("1 of 2 peer links not up after 2 s: h1 -> h3 "), std::string::npos)
      << st.message();
}

// An owner that dies without tearing down (a crashed test) leaves its
// namespaces and directory; cleanup_stale removes them, and only them.
TEST(TestbedNetwork, CleanupRemovesBedsOfDeadOwners) {
  if (!root()) GTEST_SKIP() << "SKIPPED: needs root";
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::unique_ptr<Testbed> live;
  Status st = Testbed::create(network_only(2, 1), &live);
  ASSERT_TRUE(st) << st.message();
  REQUIRE_NAMESPACES(live);
  pid_t owner = tools::spawn([&] {
    std::unique_ptr<Testbed> bed;
    Status s = Testbed::create(network_only(2, 2), &bed);
    std::string line = s ? bed->name() + " " + bed->dir() : "error: " + s.message();
    say(p[1], line);
    (void)bed.release();  // leak it: _exit below skips all teardown, as a crash would
    return 0;
  });
  close(p[1]);
  std::string line;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) line.append(buf, static_cast<size_t>(n));
  close(p[0]);
  waitpid(owner, nullptr, 0);
  ASSERT_EQ(line.rfind("error", 0), std::string::npos) << line;
  std::string name = line.substr(0, line.find(' ')), dir = line.substr(line.find(' ') + 1);
  ASSERT_NE(shell("ip netns list").find(name + "-fab"), std::string::npos);
  ASSERT_TRUE(std::filesystem::exists(dir));

  std::string report;
  st = Testbed::cleanup_stale(&report);
  EXPECT_TRUE(st) << st.message();
  EXPECT_NE(report.find("deleted netns " + name + "-h1"), std::string::npos) << report;
  EXPECT_NE(report.find("deleted netns " + name + "-fab"), std::string::npos) << report;
  EXPECT_NE(report.find("removed " + dir), std::string::npos) << report;
  EXPECT_EQ(shell("ip netns list").find(name + "-"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir));
  // The live bed of this process is untouched.
  EXPECT_NE(shell("ip netns list").find(live->fabric_netns()), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(live->cluster_file()));
}

TEST(TestbedLoopback, DistinctPortsOnLocalhostAndNoShaping) {
  Options o = network_only(4, 2);
  o.loopback = true;
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(o, &bed);
  ASSERT_TRUE(st) << st.message();
  EXPECT_FALSE(bed->namespaces());
  EXPECT_EQ(bed->loopback_reason(), "loopback asked for");
  std::set<uint16_t> ports;
  for (int h = 0; h < bed->hosts(); h++) {
    EXPECT_EQ(bed->address(h), "127.0.0.1");
    EXPECT_EQ(bed->netns(h), "");
    EXPECT_GT(bed->port(h), 0);
    ports.insert(bed->port(h));
  }
  EXPECT_EQ(ports.size(), 4u);
  // The cluster file lists every host in order, with its port and rack.
  std::ifstream in(bed->cluster_file());
  std::stringstream text;
  text << in.rdbuf();
  std::string toml = text.str();
  size_t at = 0;
  for (int h = 0; h < bed->hosts(); h++) {
    std::string entry = "[[hosts]]\nid = \"" + bed->host_id(h) +
                        "\"\naddress = \"127.0.0.1\"\nport = " + std::to_string(bed->port(h)) +
                        "\nrack = \"" + bed->rack(h) + "\"\n";
    size_t pos = toml.find(entry, at);
    ASSERT_NE(pos, std::string::npos) << "no " << entry << " after offset " << at << " in\n"
                                      << toml;
    at = pos + entry.size();
  }
  EXPECT_NE(toml.find("\nname = \"" + bed->name() + "\"\n"), std::string::npos) << toml;
  // spawn_in_host still runs the function (no namespace to enter).
  pid_t pid = bed->spawn_in_host(3, [] { return 7; });
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7);

  o.uplink_mbit = 100;
  std::unique_ptr<Testbed> shaped;
  st = Testbed::create(o, &shaped);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), GSYNC_ERR_INVALID);
  EXPECT_NE(st.message().find("uplink_mbit=100 needs network namespaces"), std::string::npos)
      << st.message();
}

// gsync-perf's JSON rows say how they were timed: samples of k back-to-back
// ops after a barrier (tools/peers/sampling.h, the schedule the peer drivers
// use too), on a loopback bed of 2 hosts; every element checked.
TEST(TestbedLoopback, GsyncPerfRowsSayHowTheyWereSampled) {
  const char* perf = getenv("GSYNC_PERF");
  if (!perf) GTEST_SKIP() << "SKIPPED: GSYNC_PERF not set (run through meson test)";
  std::string out = shell(std::string(perf) +
                          " --hosts 2 --racks 1 -n 2 --loopback -b 4K -e 1M -f 16 --iters 40"
                          " --warmup 2 --json 2>&1");
  std::vector<uint64_t> sizes;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"", 0) != 0) continue;
    auto row = nlohmann::json::parse(line);
    if (!row.contains("bytes")) continue;  // the run's summary
    const auto bytes = row["bytes"].get<uint64_t>();
    sizes.push_back(bytes);
    EXPECT_EQ(row["wrong"].get<uint64_t>(), 0u) << line;
    EXPECT_GT(row["time_us"].get<double>(), 0) << line;
    EXPECT_EQ(row["ops_per_sample"].get<int>(), gsync_ops_per_sample(bytes)) << line;
    EXPECT_EQ(row["samples"].get<int>(), gsync_samples_for(40, bytes)) << line;
    EXPECT_EQ(row["hosts"].get<int>(), 2) << line;
    EXPECT_EQ(row["ranks"].get<int>(), 4) << line;
  }
  EXPECT_EQ(sizes, (std::vector<uint64_t>{4096, 65536, 1048576})) << out;
}

// A row that not every rank finished says so (issue #38, item 7): here no
// rank can connect (the daemons' arena limit is below what gsync-perf asks
// for), and every row is FAILED with the ranks' error, in the table and in
// --json ("error", no time, no "wrong": 0), and the run exits 1.
TEST(TestbedLoopback, GsyncPerfSaysAFailedRowFailed) {
  const char* perf = getenv("GSYNC_PERF");
  if (!perf) GTEST_SKIP() << "SKIPPED: GSYNC_PERF not set (run through meson test)";
  char dir[] = "/tmp/gsync-perf-fail-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string config = std::string(dir) + "/small-arena.toml";
  {
    std::ofstream f(config);
    f << "[limits]\ndefault_arena = \"4M\"\nmax_arena = \"4M\"\n";
  }
  const std::string run = std::string(perf) +
                          " --hosts 2 --racks 1 -n 1 --loopback -b 4K -e 64K -f 16 --iters 4"
                          " --warmup 1 --daemon-arg=--config=" + config;
  std::string out = shell(run + " --json 2>&1; echo exit=$?");
  int rows = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"", 0) != 0) continue;
    auto row = nlohmann::json::parse(line);
    if (!row.contains("bytes")) {  // the run's summary
      EXPECT_EQ(row.value("failed_rows", 0), 2) << line;
      EXPECT_EQ(row.value("checked_ops", 1), 0) << line;
      continue;
    }
    rows++;
    EXPECT_NE(row.value("error", std::string()).find("2 of 2 ranks did not finish it"),
              std::string::npos) << line;
    EXPECT_NE(row.value("error", std::string()).find("max_arena"), std::string::npos) << line;
    EXPECT_FALSE(row.contains("time_us")) << line;
    EXPECT_FALSE(row.contains("wrong")) << line;
  }
  EXPECT_EQ(rows, 2) << out;
  EXPECT_NE(out.find("exit=1"), std::string::npos) << out;
  std::string table = shell(run + " 2>&1; echo exit=$?");
  size_t failed = 0;
  for (size_t at = table.find(" FAILED: 2 of 2 ranks did not finish it: "); at != std::string::npos;
       at = table.find(" FAILED: 2 of 2 ranks did not finish it: ", at + 1))
    failed++;
  EXPECT_EQ(failed, 2u) << table;
  EXPECT_NE(table.find("# FAILED: 2 rows did not finish on every rank"), std::string::npos)
      << table;
  EXPECT_NE(table.find("# wrong elements in total: 0 (every element of 0 checked ops"),
            std::string::npos) << table;
  EXPECT_NE(table.find("exit=1"), std::string::npos) << table;
  std::filesystem::remove_all(dir);
}

// gsync-perf --ps runs each size as a parameter server's push_pull beside
// the allreduce, on 3 hosts of 2 ranks: every element of the first
// push_pull is minus the ranks' mean (SGD at learning rate 1 from zeros),
// and its row says how its time compares with the allreduce's. At 16 MiB
// a shard (5.3 MiB) goes as several of the servers' pipelined pieces.
TEST(TestbedLoopback, GsyncPerfPushPullBesideAllreduce) {
  const char* perf = getenv("GSYNC_PERF");
  if (!perf) GTEST_SKIP() << "SKIPPED: GSYNC_PERF not set (run through meson test)";
  std::string out = shell(std::string(perf) +
                          " --hosts 3 --racks 1 -n 2 --loopback -b 64K -e 16M -f 16 --iters 8"
                          " --warmup 1 --ps --json 2>&1");
  std::vector<std::pair<std::string, uint64_t>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"", 0) != 0) continue;
    auto row = nlohmann::json::parse(line);
    if (!row.contains("bytes")) continue;
    const std::string collective = row["collective"].get<std::string>();
    rows.emplace_back(collective, row["bytes"].get<uint64_t>());
    EXPECT_EQ(row["wrong"].get<uint64_t>(), 0u) << line;
    EXPECT_GT(row["time_us"].get<double>(), 0) << line;
    if (collective == "push_pull") {
      EXPECT_EQ(row["algo"].get<std::string>(), "ps") << line;
      EXPECT_EQ(row["op"].get<std::string>(), "weighted_avg") << line;
      EXPECT_GT(row.value("vs_allreduce", 0.0), 0) << line;
    } else {
      EXPECT_FALSE(row.contains("vs_allreduce")) << line;
    }
  }
  using R = std::pair<std::string, uint64_t>;
  EXPECT_EQ(rows, (std::vector<R>{{"allreduce", 65536}, {"push_pull", 65536},
                                  {"allreduce", 1048576}, {"push_pull", 1048576},
                                  {"allreduce", 16777216}, {"push_pull", 16777216}}))
      << out;
}

// gsync-perf --reproducible runs each size as a reproducible allreduce
// beside the default one (docs/reproducibility.md), on 2 hosts of 2 ranks:
// every element of both right, and the reproducible row gives its time and
// its bytes on the wire against the default's - 1.25x where the tensor
// takes the two ops (1 MiB), a gather's share where it takes the slots.
TEST(TestbedLoopback, GsyncPerfReproducibleBesideDefault) {
  const char* perf = getenv("GSYNC_PERF");
  if (!perf) GTEST_SKIP() << "SKIPPED: GSYNC_PERF not set (run through meson test)";
  std::string out = shell(std::string(perf) +
                          " --hosts 2 --racks 1 -n 2 --loopback -b 4K -e 1M -f 256 --iters 8"
                          " --warmup 1 --reproducible --json 2>&1");
  std::vector<std::pair<bool, uint64_t>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"", 0) != 0) continue;
    auto row = nlohmann::json::parse(line);
    if (!row.contains("bytes")) continue;
    const bool repro = row.value("reproducible", false);
    rows.emplace_back(repro, row["bytes"].get<uint64_t>());
    EXPECT_EQ(row["wrong"].get<uint64_t>(), 0u) << line;
    if (!repro) continue;
    EXPECT_GT(row.value("time_vs_default", 0.0), 0) << line;
    if (row["bytes"] == 1048576) EXPECT_NEAR(row.value("wire_vs_default", 0.0), 1.25, 0.01) << line;
  }
  using R = std::pair<bool, uint64_t>;
  EXPECT_EQ(rows, (std::vector<R>{{false, 4096}, {true, 4096}, {false, 1048576}, {true, 1048576}}))
      << out;
}

TEST(TestbedLoopback, HostsSpreadOverRacksOrGivenPerRack) {
  Options o = network_only(5, 2);
  o.loopback = true;
  std::unique_ptr<Testbed> bed;
  ASSERT_TRUE(Testbed::create(o, &bed));
  std::vector<std::string> racks;
  for (int h = 0; h < bed->hosts(); h++) racks.push_back(bed->rack(h));
  EXPECT_EQ(racks, (std::vector<std::string>{"r1", "r1", "r1", "r2", "r2"}));

  o.rack_sizes = {1, 3};
  ASSERT_TRUE(Testbed::create(o, &bed));
  racks.clear();
  for (int h = 0; h < bed->hosts(); h++) racks.push_back(bed->rack(h));
  EXPECT_EQ(racks, (std::vector<std::string>{"r1", "r2", "r2", "r2"}));
  EXPECT_EQ(bed->host_id(3), "h4");

  o.rack_sizes.clear();
  o.hosts = 2;
  o.racks = 3;
  Status st = Testbed::create(o, &bed);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("racks <= hosts"), std::string::npos) << st.message();
}

// Daemons: needs a gsyncd with the multi-host flags.
class TestbedDaemons : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gsyncd_has_cluster_flag(tools::gsyncd_path()))
      GTEST_SKIP() << "SKIPPED: gsyncd has no --cluster yet (" << tools::gsyncd_path() << ")";
  }
};

// One gsyncd per host, found by its sockets; killed and restarted with the
// same identity. Runs in namespaces as root, on loopback otherwise.
TEST_F(TestbedDaemons, StartKillRestartOneHost) {
  Options o;
  o.hosts = 4;
  o.racks = 2;
  o.wait_tcp_listen = false;  // the lifecycle only; listening is the next test
  o.start_timeout_s = 10;
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(o, &bed);
  ASSERT_TRUE(st) << st.message();
  std::set<pid_t> pids;
  for (int h = 0; h < bed->hosts(); h++) {
    EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
    pids.insert(bed->daemon_pid(h));
    EXPECT_NE(tools::admin_query(bed->admin_socket(h), "status"), "") << bed->host_id(h);
  }
  EXPECT_EQ(pids.size(), 4u);
  std::vector<std::string> argv = bed->daemon_command(2);
  std::string joined;
  for (auto& a : argv) joined += a + " ";
  EXPECT_NE(joined.find("--cluster " + bed->cluster_file() + " --host-id h3 "), std::string::npos)
      << joined;

  pid_t old = bed->daemon_pid(1);
  bed->kill_daemon(1);
  EXPECT_FALSE(bed->daemon_alive(1));
  EXPECT_EQ(bed->daemon_pid(1), -1);
  EXPECT_TRUE(bed->daemon_alive(0));
  // Regression: gsyncd's io_uring kept its listening socket open for a few
  // ms after the process was reaped, and a restart failed with EADDRINUSE.
  // kill_daemon() returns only once the port can be bound again.
  std::string addr = bed->address(1);
  uint16_t port = bed->port(1);
  pid_t binder = bed->spawn_in_host(1, [addr, port] {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa = inet(addr, port);
    return bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 ? 0 : 1;
  });
  int status = 0;
  waitpid(binder, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "port " << port << " still in use";
  st = bed->start_daemon(1);
  ASSERT_TRUE(st) << st.message();
  EXPECT_TRUE(bed->daemon_alive(1));
  EXPECT_NE(bed->daemon_pid(1), old);
  EXPECT_NE(tools::admin_query(bed->admin_socket(1), "status"), "");
  EXPECT_NE(bed->daemon_log(1).find("--- testbed: restarting h2 ---"), std::string::npos);
  st = bed->start_daemon(1);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("already running"), std::string::npos) << st.message();

  // From a forked child (a rank process) too, where the daemons are siblings.
  pid_t rank = tools::spawn([&] {
    if (!bed->daemon_alive(0)) return 1;
    bed->kill_daemon(3);
    return 0;
  });
  ASSERT_EQ(waitpid(rank, &status, 0), rank);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(bed->daemon_alive(3));
  st = bed->start_daemon(3);
  ASSERT_TRUE(st) << st.message();

  std::vector<pid_t> all(pids.begin(), pids.end());
  all.push_back(bed->daemon_pid(1));
  all.push_back(bed->daemon_pid(3));
  bed.reset();
  for (pid_t p : all) EXPECT_NE(kill(p, 0), 0) << "pid " << p << " survived teardown";
}

// The address:port in the cluster file is where each daemon listens.
TEST_F(TestbedDaemons, EveryDaemonListensOnItsClusterAddress) {
  Options o;
  o.hosts = 3;
  o.racks = 2;
  o.start_timeout_s = 10;
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(o, &bed);  // waits for the TCP listeners too
  ASSERT_TRUE(st) << st.message();
}

TEST(TestbedCpus, SharesAreContiguousBlocksOrOneCpuEach) {
  using tools::cpu_share;
  EXPECT_EQ(cpu_share({0, 1, 2, 3, 4, 5, 6, 7}, 3, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(cpu_share({0, 1, 2, 3, 4, 5, 6, 7}, 3, 1), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(cpu_share({0, 1, 2, 3, 4, 5, 6, 7}, 3, 2), (std::vector<int>{5, 6, 7}));
  for (int h = 0; h < 5; h++) EXPECT_EQ(cpu_share({4, 6}, 5, h), (std::vector<int>{h % 2 ? 6 : 4}));
  EXPECT_TRUE(cpu_share({}, 2, 0).empty());
  EXPECT_EQ(tools::cpu_list({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(tools::cpu_list({3}), "3");
  EXPECT_EQ(tools::cpu_list({}), "");
}

std::string allowed_list_of(const std::string& status_path) {
  std::ifstream in(status_path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  return "?";
}

// --pin: every thread of each host's daemon, and what runs in the host, may
// use only that host's share; the peers' ranks are started there too.
TEST_F(TestbedDaemons, PinnedBedGivesEachHostItsOwnCpus) {
  Options o;
  o.hosts = 3;
  o.racks = 1;
  o.loopback = true;
  o.pin = true;
  o.start_timeout_s = 10;
  std::unique_ptr<Testbed> bed;
  Status st = Testbed::create(o, &bed);
  ASSERT_TRUE(st) << st.message();
  auto all = tools::allowed_cpus();
  for (int h = 0; h < 3; h++) {
    ASSERT_EQ(bed->cpus(h), tools::cpu_share(all, 3, h)) << bed->host_id(h);
    std::string want = tools::cpu_list(bed->cpus(h));
    std::string task_dir = "/proc/" + std::to_string(bed->daemon_pid(h)) + "/task";
    int threads = 0;
    for (const auto& t : std::filesystem::directory_iterator(task_dir)) {
      EXPECT_EQ(allowed_list_of(t.path().string() + "/status"), want) << bed->host_id(h) << " " << t.path();
      threads++;
    }
    EXPECT_GE(threads, 2) << "the daemon's reduce workers are threads too";
    pid_t child = bed->spawn_in_host(h, [&] { return tools::allowed_cpus() == bed->cpus(h) ? 0 : 3; });
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << bed->host_id(h) << " status " << status;
  }
  std::vector<peers::HostSlot> slots;
  for (int h = 0; h < 2; h++) slots.push_back({"", bed->address(h), bed->cpus(h)});
  // The MPI part of the check: a missing MPI is a skip that counts.
  if (peers::mpirun_path().empty() || peers::mpi_driver_path().empty())
    GTEST_SKIP() << "SKIPPED: mpirun or mpi-allreduce missing (openmpi-bin, libopenmpi-dev)";
  peers::Result r = peers::run_mpi_tcp(slots, 4096, 4096, 3, 60);
  ASSERT_TRUE(r.ok()) << r.error << "\ncommand: " << r.command;
  EXPECT_NE(r.command.find("GSYNC_PEER_CPUS=" + tools::cpu_list(bed->cpus(0)) + ";"), std::string::npos)
      << r.command;
}

}  // namespace
}  // namespace gsync::testbed
