// SPDX-License-Identifier: Apache-2.0
//
// An allreduce of device memory across two test-bed hosts next to the same
// bytes in host memory, through the same daemons in the same run
// (docs/gpu.md, "Measured on a GPU"). Not a test. One rank per host, both
// on GPU 0 of this machine; the device memory goes through the daemon's GPU
// path (fold on the GPU, pinned staging, the wire, the copies back), the
// host memory through the arena. Without a GPU it prints "SKIPPED: <why>"
// and exits 0 (tools/gpu/device-check.sh counts that as a failure).
//
//   bench_device_allreduce [--mib N] [--iters N] [--loopback] [--host-only]
//
// Prints, per memory, the median time per op and its algbw (bytes / time),
// then device's time over host's. --host-only runs the host memory half
// alone (no GPU needed): the harness itself, checked where there is none.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "daemon/gpu/device.h"
#include "gsync/gsync.h"
#include "tools/common/gpu_probe.h"
#include "tools/common/procs.h"
#include "tools/testbed/testbed.h"

namespace {

using gsync::Status;

// A rank: `iters` timed allreduces of `bytes` in device memory, then in
// host memory; reports "device <median s>" and "host <median s>".
int rank_main(const gsync::testbed::Testbed& bed, int rank, size_t bytes, int iters,
              bool host_only) {
  if (Status st = host_only ? Status::ok() : gsync::gpu::use_device(0); !st) {
    gsync::tools::report("error GPU 0: " + st.message() + "\n");
    return 1;
  }
  const std::string socket = bed.socket(rank), job = fmt::format("bench-dev-{}", getppid());
  gsync_config_t cfg;
  gsync_config_init(&cfg);
  cfg.socket_path = socket.c_str();
  cfg.job_id = job.c_str();
  cfg.world_size = 2;
  cfg.rank = rank;
  cfg.local_rank = 0;
  cfg.local_size = 1;
  cfg.arena_bytes = bytes + (16 << 20);
  gsync_comm_t* comm = nullptr;
  if (gsync_connect(&cfg, &comm) != 0) {
    gsync::tools::report(fmt::format("error connect: {}\n", gsync_last_error()));
    return 1;
  }
  const size_t count = bytes / 4;
  std::vector<float> fill(count, float(rank + 1));
  uint64_t key = 1;
  for (const bool device : {true, false}) {
    if (device && host_only) continue;
    void* buf = nullptr;
    const int rc = device ? gsync_alloc_device(comm, bytes, &buf) : gsync_alloc(comm, bytes, &buf);
    if (rc != 0) {
      gsync::tools::report(fmt::format("error alloc: {}\n", gsync_last_error()));
      return 1;
    }
    if (device) {
      if (Status st = gsync::gpu::copy_sync(buf, fill.data(), bytes); !st) {
        gsync::tools::report("error copy in: " + st.message() + "\n");
        return 1;
      }
    } else {
      std::memcpy(buf, fill.data(), bytes);
    }
    std::vector<double> t;
    for (int i = -2; i < iters; i++) {  // two untimed: the plan, the staging
      const auto t0 = std::chrono::steady_clock::now();
      gsync_request_t* req = nullptr;
      if (gsync_allreduce(comm, key, uint64_t(i + 2), buf, count, GSYNC_FLOAT32, GSYNC_SUM, 0,
                          &req) != 0 ||
          gsync_wait(req, 120000) != 0) {
        gsync::tools::report(fmt::format("error allreduce ({} memory): {}\n",
                                         device ? "device" : "host",
                                         req ? gsync_request_error(req) : gsync_last_error()));
        return 1;
      }
      gsync_request_free(req);
      if (i >= 0)
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    gsync::tools::report(fmt::format("{} {:.9f}\n", device ? "device" : "host", t[t.size() / 2]));
    if ((device ? gsync_free_device(comm, buf) : gsync_free(comm, buf)) != 0) {
      gsync::tools::report(fmt::format("error free: {}\n", gsync_last_error()));
      return 1;
    }
    key++;
  }
  gsync_close(comm);
  return 0;
}

double reported(const gsync::tools::ChildResult& r, const std::string& what) {
  const auto at = r.output.find(what + " ");
  return at == std::string::npos ? -1 : std::atof(r.output.c_str() + at + what.size() + 1);
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256;
  int iters = 10;
  bool loopback = false, host_only = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--loopback") {
      loopback = true;
    } else if (a == "--host-only") {
      host_only = true;
    } else {
      std::fprintf(stderr, "usage: %s [--mib N] [--iters N] [--loopback] [--host-only]\n",
                   argv[0]);
      return 2;
    }
  }
  // Asked in a child: this process forks the ranks, and CUDA does not
  // survive fork.
  std::string why;
  if (!host_only && gsync::tools::gpus_in_child(&why) == 0) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 0;
  }
  gsync::testbed::Options o;
  o.hosts = 2;
  o.racks = 1;
  o.loopback = loopback;
  o.log_level = "warn";
  std::unique_ptr<gsync::testbed::Testbed> bed;
  if (Status st = gsync::testbed::Testbed::create(o, &bed); !st) {
    std::fprintf(stderr, "bench_device_allreduce: cannot build the test bed: %s\n",
                 st.message().c_str());
    return 1;
  }
  const size_t bytes = mib << 20;
  auto res = gsync::tools::run_ranks(
      2, [&](int r) { return rank_main(*bed, r, bytes, iters, host_only); }, 900);
  double device = 0, host = 0;
  for (const auto& r : res) {
    const double d = host_only ? 1 : reported(r, "device"), h = reported(r, "host");
    if (r.code != 0 || d <= 0 || h <= 0) {
      std::fprintf(stderr, "bench_device_allreduce: a rank failed (exit %d): %s\n", r.code,
                   r.output.c_str());
      return 1;
    }
    device = std::max(device, d);  // the slower rank's
    host = std::max(host, h);
  }
  std::printf("# 2 test-bed hosts (%s) x 1 rank on GPU 0, fp32 sum of %zu MiB, median of %d\n",
              bed->namespaces() ? "network namespaces" : "loopback", mib, iters);
  if (!host_only)
    std::printf("device memory: %.2f ms per op, algbw %.3f GB/s\n", device * 1e3,
                double(bytes) / device / 1e9);
  std::printf("host memory:   %.2f ms per op, algbw %.3f GB/s\n", host * 1e3,
              double(bytes) / host / 1e9);
  if (!host_only) std::printf("device / host time: %.3f\n", device / host);
  return 0;
}
