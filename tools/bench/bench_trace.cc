// SPDX-License-Identifier: Apache-2.0
//
// What recording ops costs ([trace] record; docs/performance.md, "What
// recording ops costs"): two test beds of the same shape (2 hosts on
// loopback, a rank on each), one with recording on and one with it off,
// their ranks connected for the whole run. The beds take turns in short
// blocks - on/off, off/on, on/off, ... - so that what drifts on this
// machine (other work, clock boost, cache state) falls on both alike:
// a 4 KiB block is --small-ops allreduces timed one by one after a
// warm-up, a 64 MiB block --large-ops of them. Printed per size: the median
// of the blocks' medians, on and off; the median of the pairs' ratios (two
// blocks one after the other see the same load) and its 95% bootstrap
// interval, which says how small a difference this run could see.
// --control runs both beds recording: what the method reads when nothing
// differs. Each host's daemon and rank share a CPU of their own (the test
// bed's --pin), so any work the daemon does is time its rank waits;
// --poll-mode always (as --daemon-arg) makes the ops shortest and so the
// share of recording largest.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "gsync/gsync.h"
#include "tools/common/procs.h"
#include "tools/testbed/testbed.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Size {
  const char* name;
  size_t bytes;
  int warmup, ops;  // per block
};

// One rank, for the whole run: connects, then per command byte (a size's
// index; 'q' ends) runs a block of that size and answers its median op in
// seconds as a double (negative: it failed, said on stderr).
int rank_main(const std::string& socket, const std::string& job, int rank,
              const std::vector<Size>& sizes, int cmd_fd, int res_fd) {
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.socket_path = socket.c_str();
  cfg.job_id = job.c_str();
  cfg.world_size = 2;
  cfg.rank = rank;
  cfg.local_rank = 0;
  cfg.local_size = 1;
  cfg.timeout_ms = 120000;
  size_t most = 0;
  for (const Size& s : sizes) most = std::max(most, s.bytes);
  cfg.arena_bytes = most + (16 << 20);
  gsync_comm_t* comm = nullptr;
  void* buf = nullptr;
  if (gsync_connect(&cfg, &comm) != 0 || gsync_alloc(comm, most, &buf) != 0) {
    std::fprintf(stderr, "bench_trace: rank %d: %s\n", rank, gsync_last_error());
    return 1;
  }
  std::memset(buf, 0, most);
  std::vector<uint64_t> step(sizes.size(), 0);
  char c;
  while (read(cmd_fd, &c, 1) == 1 && c != 'q') {
    const size_t k = size_t(c - '0');
    const Size& s = sizes.at(k);
    std::vector<double> times;
    double answer = 0;
    for (int i = 0; i < s.warmup + s.ops && answer >= 0; i++) {
      gsync_request_t* req = nullptr;
      auto t0 = Clock::now();
      int rc = gsync_allreduce(comm, k + 1, step[k]++, buf, s.bytes / 4, GSYNC_FLOAT32, GSYNC_SUM,
                               0, &req);
      if (rc == 0) rc = gsync_wait(req, 120000);
      auto t1 = Clock::now();
      if (req) gsync_request_free(req);
      if (rc != 0) {
        std::fprintf(stderr, "bench_trace: rank %d: %s\n", rank, gsync_last_error());
        answer = -1;
      }
      if (i >= s.warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    if (answer >= 0) answer = median(times);
    if (write(res_fd, &answer, sizeof answer) != sizeof answer) return 1;
  }
  gsync_close(comm);
  return 0;
}

// A bed and its two ranks' pipes.
struct Side {
  std::unique_ptr<gsync::testbed::Testbed> bed;
  pid_t pids[2] = {-1, -1};
  int cmd[2] = {-1, -1}, res[2] = {-1, -1};  // the parent's ends
};

// How the beds are built: the same for both but for [trace] record.
struct BedShape {
  bool pin = true;
  std::vector<std::string> daemon_args;
};

bool start_side(const BedShape& shape, bool record, const std::string& job,
                const std::vector<Size>& sizes, Side* side) {
  gsync::testbed::Options o;
  o.hosts = 2;
  o.racks = 1;
  o.loopback = true;
  o.log_level = "warn";
  o.pin = shape.pin;
  o.daemon_args = shape.daemon_args;
  o.daemon_args.insert(o.daemon_args.end(), {"--trace-record", record ? "true" : "false"});
  if (gsync::Status st = gsync::testbed::Testbed::create(o, &side->bed); !st) {
    std::fprintf(stderr, "bench_trace: cannot build a test bed: %s\n", st.message().c_str());
    return false;
  }
  for (int r = 0; r < 2; r++) {
    int cmd[2], res[2];
    if (pipe2(cmd, O_CLOEXEC) != 0 || pipe2(res, O_CLOEXEC) != 0) return false;
    const std::string socket = side->bed->socket(r);
    const std::vector<int> cpus = side->bed->cpus(r);
    side->pids[r] = gsync::tools::spawn([&] {
      if (!gsync::tools::pin_to(cpus)) return 1;
      return rank_main(socket, job, r, sizes, cmd[0], res[1]);
    });
    close(cmd[0]);
    close(res[1]);
    side->cmd[r] = cmd[1];
    side->res[r] = res[0];
  }
  return true;
}

// One block of size k on side: both ranks run it; rank 0's median (the two
// end every op together). Negative on a failure or after 10 minutes.
double block(const Side& side, size_t k) {
  const char c = char('0' + k);
  for (int r = 0; r < 2; r++)
    if (write(side.cmd[r], &c, 1) != 1) return -1;
  double out[2] = {-1, -1};
  for (int r = 0; r < 2; r++) {
    pollfd p{side.res[r], POLLIN, 0};
    if (poll(&p, 1, 600000) != 1 || read(side.res[r], &out[r], sizeof(double)) != sizeof(double))
      return -1;
  }
  return out[1] < 0 ? -1 : out[0];
}

// The CPU time the bed's daemons have had, every thread, in ns
// (/proc/PID/task/*/schedstat: its first field). With --poll-us 0 it is
// the work the ops cost them, no polling.
uint64_t daemons_cpu_ns(const Side& side) {
  uint64_t total = 0;
  for (int h = 0; h < 2; h++) {
    const std::string dir = fmt::format("/proc/{}/task", side.bed->daemon_pid(h));
    for (const auto& task : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(task.path() / "schedstat");
      uint64_t ns = 0;
      if (in >> ns) total += ns;
    }
  }
  return total;
}

void stop_side(Side* side) {
  for (int r = 0; r < 2; r++) {
    if (side->cmd[r] >= 0 && write(side->cmd[r], "q", 1) != 1) kill(side->pids[r], SIGKILL);
    if (side->pids[r] > 0) waitpid(side->pids[r], nullptr, 0);
  }
  side->bed.reset();
}

// The pairs' ratios (on / off of two blocks run one after the other, so
// under the same load): their median, and its 95% bootstrap interval.
struct Ratio {
  double median, lo, hi;
};
Ratio paired_ratio(const std::vector<double>& on, const std::vector<double>& off) {
  std::vector<double> r;
  for (size_t i = 0; i < on.size(); i++) r.push_back(on[i] / off[i]);
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<size_t> pick(0, r.size() - 1);
  std::vector<double> medians;
  for (int b = 0; b < 2000; b++) {
    std::vector<double> sample;
    for (size_t i = 0; i < r.size(); i++) sample.push_back(r[pick(rng)]);
    medians.push_back(median(sample));
  }
  std::sort(medians.begin(), medians.end());
  return {median(r), medians[medians.size() * 25 / 1000], medians[medians.size() * 975 / 1000]};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_trace: what recording ops ([trace] record) costs an allreduce"};
  int small_pairs = 300, small_ops = 200, large_pairs = 30, large_ops = 3;
  bool control = false, no_pin = false;
  BedShape shape;
  app.add_option("--small-pairs", small_pairs, "pairs of 4 KiB blocks (on, off)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--small-ops", small_ops, "timed 4 KiB allreduces per block")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--large-pairs", large_pairs, "pairs of 64 MiB blocks (0: none)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--large-ops", large_ops, "timed 64 MiB allreduces per block")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--control", control,
               "both beds record (an A/A run: what the method reads when nothing differs)");
  app.add_flag("--no-pin", no_pin, "let the hosts' daemons and ranks run on any CPU");
  app.add_option("--daemon-arg", shape.daemon_args, "extra gsyncd argument (both beds)")
      ->allow_extra_args(false);
  CLI11_PARSE(app, argc, argv);
  shape.pin = !no_pin;
  const std::vector<Size> sizes = {{"4KiB", 4 << 10, 20, small_ops},
                                   {"64MiB", 64 << 20, 1, large_ops}};
  const int pairs[] = {small_pairs, large_pairs};

  Side on_side, off_side;
  if (!start_side(shape, true, "bench-trace-on", sizes, &on_side) ||
      !start_side(shape, control, "bench-trace-off", sizes, &off_side))
    return 1;
  if (control) std::printf("# --control: both beds record; \"off\" is the second one\n");
  std::string args;
  for (const auto& a : shape.daemon_args) args += " " + a;
  std::printf("# daemons:%s%s\n", args.empty() ? " (defaults)" : args.c_str(),
              shape.pin ? "; each host pinned to a CPU" : "");
  std::printf("# bench_trace: 2 hosts (loopback test bed) x 1 rank, float32 sum, one bed "
              "recording and one not, taking turns in blocks (on/off, off/on, ...); the median "
              "of the blocks' median ops; on/off: the median of the pairs' ratios, with its 95%% "
              "bootstrap interval; cpu/op: the two daemons' CPU time per op, warm-up included "
              "(their polling too, unless --poll-us 0)\n");
  std::printf("%-6s %12s %8s %14s %14s %8s  %-16s  %12s %12s\n", "size", "ops/block", "pairs",
              "on", "off", "on/off", "95% interval", "cpu/op on", "cpu/op off");
  int rc = 0;
  for (size_t k = 0; k < sizes.size() && rc == 0; k++) {
    std::vector<double> on, off;
    uint64_t cpu[2] = {0, 0};  // on, off: the daemons' CPU ns over every block
    for (int i = 0; i < pairs[k] && rc == 0; i++) {
      for (bool record : {i % 2 == 0, i % 2 != 0}) {
        const Side& side = record ? on_side : off_side;
        const uint64_t before = daemons_cpu_ns(side);
        const double t = block(side, k);
        cpu[record ? 0 : 1] += daemons_cpu_ns(side) - before;
        if (t < 0) rc = 1;
        (record ? on : off).push_back(t);
      }
    }
    if (rc != 0 || on.empty()) break;
    const bool small = sizes[k].bytes < (1 << 20);
    const double unit = small ? 1e6 : 1e3;
    const char* u = small ? "us" : "ms";
    const Ratio q = paired_ratio(on, off);
    const double ops = double(pairs[k]) * (sizes[k].warmup + sizes[k].ops);
    std::printf("%-6s %12d %8d %11.2f %s %11.2f %s %8.4f  %.4f .. %.4f  %9.2f us %9.2f us\n",
                sizes[k].name, sizes[k].ops, pairs[k], unit * median(on), u, unit * median(off),
                u, q.median, q.lo, q.hi, 1e-3 * double(cpu[0]) / ops, 1e-3 * double(cpu[1]) / ops);
    std::fflush(stdout);
  }
  stop_side(&on_side);
  stop_side(&off_side);
  if (rc != 0) std::fprintf(stderr, "bench_trace: a block failed\n");
  return rc;
}
