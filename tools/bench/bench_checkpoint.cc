// SPDX-License-Identifier: Apache-2.0
//
// What checkpoints cost a training job (docs/fault-tolerance.md,
// "Measured"): a job whose parameter server holds MB of state (sgd, one
// array) computes for --compute-ms (a busy loop standing in for forward
// and backward) and push_pulls, step after step, on a real gsyncd, with a checkpoint
// every --every-ms and without, in alternating rounds; printed beside each
// other: the median and worst step, their ratio, the longest stall the
// event thread had copying blocks itself, the checkpoints' write bandwidth
// beside dd oflag=direct into the same folder in the same run, and the
// time from a kill -9 of the daemon to the first update applied again by
// a restarted one (daemon start, declaration with its checkpoint's load,
// the first push_pull); and, with the anomaly guard on, how long a server
// takes to roll the state back from memory after a NaN gradient, beside
// the step time of the same job.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gsync/gsync.h"
#include "protocol/admin_jobs.h"
#include "tools/common/procs.h"

namespace {

using Clock = std::chrono::steady_clock;
using gsync::tools::DaemonProcess;
namespace k = gsync::admin::jobs;

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Client {
  gsync_comm_t* comm = nullptr;
  float* buf = nullptr;
  size_t n = 0;
  uint64_t clock = 0;
};

bool open_client(const DaemonProcess& d, size_t n, uint32_t every_ms, bool resume, Client* c,
                 bool guard = false) {
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.anomaly_guard = guard ? 1 : 0;
  cfg.socket_path = d.socket().c_str();
  cfg.job_id = "bench-ckpt";
  cfg.arena_bytes = 2 * n * 4 + (64 << 20);  // the tensor, and a declaration is staged
  cfg.timeout_ms = 120000;
  if (gsync_connect(&cfg, &c->comm) != 0) return false;
  if (gsync_alloc(c->comm, n * 4, reinterpret_cast<void**>(&c->buf)) != 0) return false;
  for (size_t i = 0; i < n; i++) c->buf[i] = 0.001f * float(i % 1000);
  gsync_ps_opts_t o;
  gsync_ps_opts_init(&o);
  o.lr = 0.001f;
  o.checkpoint_ms = every_ms;
  o.resume = resume;
  gsync_request_t* req;
  if (gsync_ps_declare(c->comm, 1, c->buf, n, GSYNC_FLOAT32, &o, &req) != 0) return false;
  int rc = gsync_wait(req, 120000);
  if (rc == 0) rc = gsync_ps_resume_clock(req, &c->clock);
  gsync_request_free(req);
  c->n = n;
  return rc == 0;
}

bool step(Client* c, bool nan = false) {
  for (size_t i = 0; i < c->n; i += 1024) c->buf[i] = 1e-3f;  // the gradient (touched, as a step does)
  if (nan) c->buf[7] = std::numeric_limits<float>::quiet_NaN();
  gsync_request_t* req;
  if (gsync_ps_push_pull(c->comm, 1, c->clock, c->buf, c->n, GSYNC_FLOAT32, nullptr, &req) != 0)
    return false;
  int rc = gsync_wait(req, 120000);
  gsync_request_free(req);
  c->clock++;
  return rc == 0;
}

nlohmann::json key_report(const DaemonProcess& d) {
  auto j = nlohmann::json::parse(gsync::tools::admin_query(d.admin_socket(), "jobs"), nullptr,
                                 false);
  if (!j.is_object() || !j[k::kJobs].is_array()) return nullptr;
  for (auto& row : j[k::kJobs])
    if (row.value(k::kJob, "") == "bench-ckpt" && row[k::kParameters].is_array() &&
        !row[k::kParameters].empty())
      return row[k::kParameters][0];
  return nullptr;
}

nlohmann::json checkpoint_report(const DaemonProcess& d) {
  nlohmann::json key = key_report(d);
  return key.is_object() ? key[k::kCheckpoint] : nlohmann::json();
}

// dd's MB/s writing `mb` MiB with O_DIRECT into dir (its own figure).
double dd_mbps(const std::string& dir, int mb) {
  std::string out = gsync::tools::run_command(fmt::format(
      "dd if=/dev/zero of={}/dd.bin bs=4M count={} oflag=direct conv=fsync 2>&1; rm -f {}/dd.bin",
      dir, mb / 4, dir));
  // "104857600 bytes (105 MB, 100 MiB) copied, 0.0863 s, 1.2 GB/s"
  unsigned long long bytes = 0;
  double s = 0;
  const char* copied = std::strstr(out.c_str(), " bytes");
  const char* comma = std::strstr(out.c_str(), "copied, ");
  if (!copied || !comma) return 0;
  for (const char* p = out.c_str(); p < copied; p++)
    if (*p >= '0' && *p <= '9') bytes = bytes * 10 + unsigned(*p - '0');
    else bytes = 0;
  s = std::atof(comma + 8);
  return s > 0 ? double(bytes) / s / 1e6 : 0;
}

struct Round {
  std::vector<double> steps;
  nlohmann::json ckpt;
};

// A step's compute: the core busy for ms, as forward and backward keep it.
void compute(double ms) {
  const auto until = Clock::now() + std::chrono::duration<double, std::milli>(ms);
  volatile double x = 1;
  while (Clock::now() < until)
    for (int i = 0; i < 1000; i++) x = x * 1.0000001;
}

double g_compute_ms = 30;

Round run_round(const std::string& dir, size_t n, int steps, uint32_t every_ms) {
  Round r;
  gsync::tools::run_command("rm -rf " + dir + "/bench-ckpt");
  DaemonProcess d({"--checkpoint-dir", dir}, "", "warn");
  Client c;
  if (!open_client(d, n, every_ms, false, &c)) {
    std::fprintf(stderr, "bench_checkpoint: declare failed: %s\n", gsync_last_error());
    return r;
  }
  for (int s = 0; s < steps; s++) {
    auto t0 = Clock::now();
    compute(g_compute_ms);
    if (!step(&c)) {
      std::fprintf(stderr, "bench_checkpoint: step failed: %s\n", gsync_last_error());
      break;
    }
    r.steps.push_back(secs(Clock::now() - t0));
  }
  r.ckpt = checkpoint_report(d);
  gsync_close(c.comm);
  return r;
}

// Rounds with checkpoints off and on, alternating: the steps' times and
// what the daemon says of its checkpoints.
struct Overhead {
  std::vector<double> off, on, worst_off, worst_on, stall, write_mbps, copy_ms;
  uint64_t taken = 0;
};

bool measure_overhead(const std::string& dir, size_t n, int steps, int rounds, uint32_t every_ms,
                      Overhead* o) {
  for (int r = 0; r < rounds; r++) {
    Round a = run_round(dir, n, steps, 0);
    Round b = run_round(dir, n, steps, every_ms);
    if (a.steps.empty() || b.steps.empty()) return false;
    o->off.push_back(median(a.steps));
    o->on.push_back(median(b.steps));
    o->worst_off.push_back(*std::max_element(a.steps.begin(), a.steps.end()));
    o->worst_on.push_back(*std::max_element(b.steps.begin(), b.steps.end()));
    if (b.ckpt.is_object()) {
      o->stall.push_back(b.ckpt.value(k::kLongestStallS, 0.0));
      o->taken += b.ckpt.value(k::kTaken, 0ull);
      auto& last = b.ckpt[k::kLast];
      if (last.is_object() && last.value(k::kDurationS, 0.0) > 0) {
        o->write_mbps.push_back(last.value(k::kBytes, 0.0) / last.value(k::kDurationS, 1.0) / 1e6);
        o->copy_ms.push_back(1e3 * last.value(k::kCopyS, 0.0));
      }
    }
  }
  return true;
}

// Recovery: the state checkpointed, the daemon killed, a new one started.
struct Recovery {
  double restart_s = 0, declare_s = 0, first_s = 0;
  uint64_t resumed = 0;
};

bool measure_recovery(const std::string& dir, size_t n, Recovery* rec) {
  auto* d = new DaemonProcess({"--checkpoint-dir", dir}, "", "warn");
  Client c;
  if (!open_client(*d, n, 1, true, &c)) return false;  // every clock: the newest is the last
  for (int s = 0; s < 5; s++) step(&c);
  for (int i = 0; i < 600; i++) {  // until the fifth is on disk (at most a minute)
    auto ck = checkpoint_report(*d);
    if (ck.is_object() && ck[k::kLast].is_object() && ck[k::kLast].value(k::kClock, 0) >= 5 &&
        !ck.value(k::kWriting, true))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(d->pid(), SIGKILL);
  gsync_close(c.comm);
  auto t0 = Clock::now();
  DaemonProcess d2({"--checkpoint-dir", dir}, "", "warn");
  auto t1 = Clock::now();
  Client c2;
  if (!open_client(d2, n, 1, true, &c2)) return false;
  auto t2 = Clock::now();
  rec->resumed = c2.clock;
  if (!step(&c2)) return false;
  auto t3 = Clock::now();
  rec->restart_s = secs(t1 - t0);
  rec->declare_s = secs(t2 - t1);
  rec->first_s = secs(t3 - t0);
  gsync_close(c2.comm);
  delete d;
  return true;
}

// Rollback: the guard on, clean steps, then one with a NaN.
struct Rollback {
  double rollback_s = 0, guarded_step_s = 0;
  uint64_t rolled = 0;
};

bool measure_rollback(size_t n, Rollback* rb) {
  DaemonProcess d({}, "", "warn");
  Client c;
  if (!open_client(d, n, 0, false, &c, true)) return false;
  std::vector<double> times;
  for (int s = 0; s < 12; s++) {
    auto t0 = Clock::now();
    if (!step(&c)) return false;
    times.push_back(secs(Clock::now() - t0));
  }
  rb->guarded_step_s = median(times);
  if (!step(&c, true)) return false;
  auto key = key_report(d);
  if (key.is_object()) {
    rb->rollback_s = key.value(k::kLastRollbackS, 0.0);
    rb->rolled = key.value(k::kAnomalies, 0ull);
  }
  gsync_close(c.comm);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_checkpoint: what parameter-server checkpoints cost a training job"};
  int mb = 100, steps = 60, rounds = 3;
  uint32_t every_ms = 2000;
  std::string dir = "/var/tmp/gsync-bench-ckpt";
  app.add_option("--mb", mb, "the server's state, MiB (sgd: one fp32 array)");
  app.add_option("--steps", steps, "steps per round");
  app.add_option("--rounds", rounds, "rounds of each kind, alternating");
  app.add_option("--every-ms", every_ms, "checkpoint cadence");
  app.add_option("--compute-ms", g_compute_ms, "a step's compute before its push_pull");
  app.add_option("--dir", dir, "the checkpoint folder (its disk is what is measured)");
  CLI11_PARSE(app, argc, argv);
  gsync::tools::run_command("mkdir -p " + dir);
  const size_t n = size_t(mb) << 18;

  Overhead o;
  if (!measure_overhead(dir, n, steps, rounds, every_ms, &o)) return 1;
  const double dd = dd_mbps(dir, mb);
  gsync::tools::run_command("rm -rf " + dir + "/bench-ckpt");
  Recovery rec;
  if (!measure_recovery(dir, n, &rec)) return 1;
  gsync::tools::run_command("rm -rf " + dir + "/bench-ckpt");
  Rollback rb;
  if (!measure_rollback(n, &rb)) return 1;

  std::printf("# bench_checkpoint: %d MiB of state (sgd), %d steps x %d rounds each, a "
              "checkpoint every %u ms, %.0f ms of compute a step; medians of the rounds\n",
              mb, steps, rounds, every_ms, g_compute_ms);
  std::printf("step_ms_without     %8.2f   (worst %.2f)\n", 1e3 * median(o.off),
              1e3 * median(o.worst_off));
  std::printf("step_ms_with        %8.2f   (worst %.2f)\n", 1e3 * median(o.on),
              1e3 * median(o.worst_on));
  std::printf("step_overhead       %8.3f   (with / without - 1; target <= 0.02)\n",
              median(o.on) / median(o.off) - 1);
  std::printf("longest_stall_ms    %8.2f   (the most one checkpoint took from the event thread, its copy-before-write all told; target <= 30)\n",
              1e3 * (o.stall.empty() ? 0 : *std::max_element(o.stall.begin(), o.stall.end())));
  std::printf("checkpoints_taken   %8llu\n", static_cast<unsigned long long>(o.taken));
  std::printf("write_MBps          %8.0f   (copy, hash, write, fsync, rename)\n",
              median(o.write_mbps));
  std::printf("  snapshot_copy_ms  %8.2f   (of which the snapshot's copy, by the writer's thread)\n",
              median(o.copy_ms));
  std::printf("dd_direct_MBps      %8.0f   (dd oflag=direct conv=fsync, same folder)\n", dd);
  std::printf("write_vs_dd         %8.2f\n", dd > 0 ? median(o.write_mbps) / dd : 0);
  std::printf("recovery_s          %8.3f   (kill -9 to the first update applied; target <= 2)\n",
              rec.first_s);
  std::printf("  daemon_start_s    %8.3f\n  declare_load_s    %8.3f   (resumed from clock %llu)\n",
              rec.restart_s, rec.declare_s, static_cast<unsigned long long>(rec.resumed));
  std::printf("rollback_ms         %8.2f   (a NaN clock rolled back from memory; target <= 50; "
              "%llu rolled back)\n",
              1e3 * rb.rollback_s, static_cast<unsigned long long>(rb.rolled));
  std::printf("guarded_step_ms     %8.2f   (the guard on: copy and norm while applying)\n",
              1e3 * rb.guarded_step_s);
  return 0;
}
