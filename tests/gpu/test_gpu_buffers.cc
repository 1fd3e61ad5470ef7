// SPDX-License-Identifier: Apache-2.0
//
// Device memory through gsync end to end (docs/gpu.md): ranks as processes
// sharing one GPU allocate with gsync_alloc_device, fill their tensors on
// the GPU, and the daemon reduces them there, in place - on one host, and
// across two through pinned staging. Every dtype the
// kernels take and every op, 1 to 4 ranks, 0 elements to 256 MiB, checked
// element by element against tools/common/reference.h; what the GPU path
// does not take (float64, int32, host and device memory in one op, the
// anomaly guard) through host memory, checked the same way; a rank killed while the daemon reduces into its memory leaves the
// daemon serving. Needs a GPU: on a machine without one every case says
// SKIPPED with the runtime's reason (tests/skip-allowlist.txt).
//
// CUDA does not survive fork: the test process itself never touches it
// (the probe runs in a child); each rank process starts its own context.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "daemon/gpu/device.h"
#include "tools/common/gpu_probe.h"
#include "tests/integration/allreduce_cases.h"
#include "tests/integration/bed_util.h"
#include "tests/integration/client_util.h"

namespace gsync::test {
namespace {

#define NEED_GPUS(n)                                                            \
  do {                                                                          \
    std::string why;                                                            \
    const int have = tools::gpus_in_child(&why);                                           \
    if (have == 0) GTEST_SKIP() << why;                                         \
    if (have < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, has " << have;   \
  } while (0)
#define NEED_GPU() NEED_GPUS(1)

struct Tensor {
  int dtype;
  size_t count;
};

// One rank, connected by connect: allocates device memory, runs each op of
// the list on it (then, with bcast_root >= 0, a broadcast of each tensor
// from that rank), and checks every element of every result.
// exact: every element as expected() computes it. Across hosts a weighted
// average is scaled once by 1/sum(w) after the hosts' sums (docs/algorithms.md),
// where expected() weighs each rank by w/sum(w): an ulp apart, so compared
// within close_enough's tolerance there, as the host-memory tests do.
template <class Connect>
int run_rank_with(Connect connect, int world, int rank, const std::vector<Tensor>& tensors,
                  const std::vector<int>& ops, int bcast_root = -1, int device = 0,
                  bool exact = true, int host_rank = -1) {
  RANK_CHECK(gpu::use_device(device), "no GPU {} in the rank", device);
  gsync_comm_t* comm = nullptr;
  RANK_CHECK(connect(&comm) == 0, "{}", gsync_last_error());
  size_t most = 1;
  for (const auto& t : tensors) most = std::max(most, t.count * elem_size(t.dtype));
  // host_rank gives arena memory (copy_sync copies host to host as well):
  // an op of host and device memory.
  void* dev = nullptr;
  if (rank == host_rank)
    RANK_CHECK(gsync_alloc(comm, most, &dev) == 0, "{}", gsync_last_error());
  else
    RANK_CHECK(gsync_alloc_device(comm, most, &dev) == 0, "{}", gsync_last_error());
  std::vector<uint8_t> host(most);
  uint64_t key = 1;
  for (const auto& t : tensors) {
    for (int op : ops) {
      const size_t bytes = t.count * elem_size(t.dtype);
      for (size_t i = 0; i < t.count; i++) store(host.data(), t.dtype, i, test_value(rank, i));
      RANK_CHECK(gpu::copy_sync(dev, host.data(), bytes), "copy in");
      gsync_request_t* req = nullptr;
      RANK_CHECK(gsync_allreduce(comm, key, 0, dev, t.count, t.dtype, op, rank + 1, &req) == 0,
                 "dtype {} op {} count {}: {}", t.dtype, op, t.count, gsync_last_error());
      RANK_CHECK(gsync_wait(req, 60000) == 0, "dtype {} op {} count {}: {}", t.dtype, op, t.count,
                 gsync_request_error(req));
      gsync_request_free(req);
      RANK_CHECK(gpu::copy_sync(host.data(), dev, bytes), "copy out");
      for (size_t i = 0; i < t.count; i++) {
        const double want = expected(t.dtype, op, world, i);
        const double got = load(host.data(), t.dtype, i);
        RANK_CHECK(exact ? got == want : close_enough(got, want, op),
                   "dtype {} op {} count {} world {}: element {} is {}, not {}", t.dtype, op,
                   t.count, world, i, got, want);
      }
      key++;
    }
    if (bcast_root < 0) continue;
    const size_t bytes = t.count * elem_size(t.dtype);
    for (size_t i = 0; i < t.count; i++) store(host.data(), t.dtype, i, test_value(rank, i));
    RANK_CHECK(gpu::copy_sync(dev, host.data(), bytes), "copy in");
    gsync_request_t* req = nullptr;
    RANK_CHECK(gsync_broadcast(comm, key, 0, dev, t.count, t.dtype, bcast_root, &req) == 0,
               "broadcast dtype {} count {}: {}", t.dtype, t.count, gsync_last_error());
    RANK_CHECK(gsync_wait(req, 60000) == 0, "broadcast dtype {} count {}: {}", t.dtype, t.count,
               gsync_request_error(req));
    gsync_request_free(req);
    RANK_CHECK(gpu::copy_sync(host.data(), dev, bytes), "copy out");
    for (size_t i = 0; i < t.count; i++) {
      char want[8];
      store(want, t.dtype, 0, test_value(bcast_root, i));
      RANK_CHECK(load(host.data(), t.dtype, i) == load(want, t.dtype, 0),
                 "broadcast dtype {} count {}: element {} is {}, not rank {}'s {}", t.dtype,
                 t.count, i, load(host.data(), t.dtype, i), bcast_root, load(want, t.dtype, 0));
    }
    key++;
  }
  RANK_CHECK((rank == host_rank ? gsync_free(comm, dev) : gsync_free_device(comm, dev)) == 0, "{}",
             gsync_last_error());
  gsync_close(comm);
  return 0;
}

int run_rank(const std::string& socket, const std::string& job, int world, int rank,
             const std::vector<Tensor>& tensors, const std::vector<int>& ops) {
  return run_rank_with(
      [&](gsync_comm_t** comm) { return connect_rank(socket, job, world, rank, comm); }, world,
      rank, tensors, ops);
}

void expect_all_ok(const std::vector<ChildResult>& res, const DaemonProcess& d) {
  for (const auto& r : res) EXPECT_EQ(r.code, 0) << r.output << d.log();
}

// Which path the daemon's ops over device memory took (gsyncctl status,
// "device_memory"): a test of the GPU path that the daemon quietly sent
// through host memory (or the other way round) fails on these, not only
// on its results, which are the same either way.
struct Paths {
  uint64_t on_gpu = 0;
  uint64_t through_host = 0;
  std::string last_through_host;
  uint64_t gpu_tasks_in_flight = 0;
};
Paths paths_of(const std::string& admin) {
  const nlohmann::json j = admin_json(admin, "status");
  Paths p;
  if (!j.contains("device_memory")) {
    ADD_FAILURE() << "no device_memory in the daemon's status: " << j.dump();
    return p;
  }
  const nlohmann::json& d = j["device_memory"];
  p.on_gpu = d.value("ops_on_gpu", uint64_t{0});
  p.through_host = d.value("ops_through_host", uint64_t{0});
  p.last_through_host = d.value("last_through_host", std::string());
  p.gpu_tasks_in_flight = d.value("gpu_tasks_in_flight", uint64_t{0});
  return p;
}

// Whether GPUs 0 and 1 reach each other's memory, asked in a child.
bool peer_access_0_1() {
  const pid_t pid = fork();
  if (pid == 0) _exit(gpu::can_access_peer(0, 1) && gpu::can_access_peer(1, 0) ? 1 : 0);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 1;
}

TEST(GpuBuffers, EveryDtypeAndOpFrom1To4RanksMatchesTheReference) {
  NEED_GPU();
  DaemonProcess d;
  const std::vector<Tensor> tensors = {
      {GSYNC_FLOAT32, 0},       {GSYNC_FLOAT32, 1},      {GSYNC_FLOAT32, 4099},
      {GSYNC_FLOAT32, 1048579}, {GSYNC_FLOAT16, 7},      {GSYNC_FLOAT16, 1048579},
      {GSYNC_BFLOAT16, 13},     {GSYNC_BFLOAT16, 1048579}};
  const std::vector<int> ops = {GSYNC_SUM, GSYNC_AVG, GSYNC_WEIGHTED_AVG, GSYNC_MIN, GSYNC_MAX};
  for (int world = 1; world <= 4; world++) {
    const std::string job = "matrix-" + std::to_string(world);
    expect_all_ok(run_ranks(world, [&](int r) {
      return run_rank(d.socket(), job, world, r, tensors, ops);
    }), d);
  }
  ASSERT_TRUE(d.alive()) << d.log();
  // Every op with elements ran its kernels on the GPU: 7 tensors x 5 ops
  // x 4 worlds (an op of 0 elements has no path to take).
  const Paths p = paths_of(d.admin_socket());
  EXPECT_EQ(p.on_gpu, 7u * 5u * 4u);
  EXPECT_EQ(p.through_host, 0u) << "the last went through host memory: " << p.last_through_host;
}

TEST(GpuBuffers, AcrossTwoHostsThroughPinnedStaging) {
  NEED_GPU();
  // Two daemons (network namespaces, or loopback), 2 ranks on one and 1 on
  // the other, all on GPU 0: fold on the GPU, the staging copies, the wire,
  // the store. 16 MiB goes in several chunks, so the copies and the wire
  // overlap; the broadcast's root is on the second host.
  auto bed = make_bed({2}, "auto", 60000);
  ASSERT_TRUE(bed);
  const std::vector<Place> p = places({2, 1});
  const std::vector<Tensor> tensors = {{GSYNC_FLOAT32, 0},      {GSYNC_FLOAT32, 1},
                                       {GSYNC_FLOAT32, 4099},   {GSYNC_FLOAT32, 4u << 20},
                                       {GSYNC_FLOAT16, 1048579}, {GSYNC_BFLOAT16, 13}};
  const std::vector<int> ops = {GSYNC_SUM, GSYNC_AVG, GSYNC_WEIGHTED_AVG, GSYNC_MIN, GSYNC_MAX};
  auto res = run_ranks(3, [&](int r) {
    return run_rank_with(
        [&](gsync_comm_t** comm) { return connect_place(*bed, "hosts", p, r, comm); }, 3, r,
        tensors, ops, /*bcast_root=*/2, /*device=*/0, /*exact=*/false);
  }, 600);
  for (const auto& r : res) EXPECT_EQ(r.code, 0) << r.output;
  std::vector<Paths> before;
  for (int h = 0; h < bed->hosts(); h++) {
    before.push_back(paths_of(bed->admin_socket(h)));
    EXPECT_GT(before[h].on_gpu, 0u) << "host " << h;
    EXPECT_EQ(before[h].through_host, 0u) << "host " << h << ": " << before[h].last_through_host;
  }
  // Through host memory across the hosts: float64 (no GPU kernel), and
  // rank 0 giving host memory; the broadcasts from the second host land in
  // the first host's stand-ins from the wire.
  const std::vector<Tensor> through = {{GSYNC_FLOAT32, 4099}, {GSYNC_FLOAT64, 1048579}};
  res = run_ranks(3, [&](int r) {
    return run_rank_with(
        [&](gsync_comm_t** comm) { return connect_place(*bed, "hosts-mixed", p, r, comm); }, 3,
        r, through, ops, /*bcast_root=*/2, /*device=*/0, /*exact=*/false, /*host_rank=*/0);
  }, 600);
  for (const auto& r : res) EXPECT_EQ(r.code, 0) << r.output;
  for (int h = 0; h < bed->hosts(); h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
  // Host 0's allreduces mix host and device memory; host 1's float64 ones
  // have no GPU kernel.
  const Paths p0 = paths_of(bed->admin_socket(0)), p1 = paths_of(bed->admin_socket(1));
  EXPECT_GT(p0.through_host, before[0].through_host);
  EXPECT_NE(p0.last_through_host.find("host and device memory in one op"), std::string::npos)
      << p0.last_through_host;
  EXPECT_GT(p1.through_host, before[1].through_host);
  EXPECT_NE(p1.last_through_host.find("no GPU kernel for float64"), std::string::npos)
      << p1.last_through_host;
}

TEST(GpuBuffers, RanksOnTwoGpus) {
  NEED_GPUS(2);
  // One rank per GPU, as training runs: with peer access each GPU folds a
  // slice of every op, reading all ranks' buffers; without, through host
  // memory. Either way the results are the reference's, and the daemon
  // took the path the GPUs' peer access calls for.
  const bool peers = peer_access_0_1();
  DaemonProcess d;
  const std::vector<Tensor> tensors = {{GSYNC_FLOAT32, 1}, {GSYNC_FLOAT32, 1048579},
                                       {GSYNC_BFLOAT16, 4099}};
  const std::vector<int> ops = {GSYNC_SUM, GSYNC_AVG, GSYNC_WEIGHTED_AVG, GSYNC_MIN, GSYNC_MAX};
  expect_all_ok(run_ranks(4, [&](int r) {
    return run_rank_with(
        [&](gsync_comm_t** comm) { return connect_rank(d.socket(), "two-gpus", 4, r, comm); }, 4,
        r, tensors, ops, /*bcast_root=*/1, /*device=*/r % 2);
  }), d);
  const Paths p = paths_of(d.admin_socket());
  if (peers) {
    EXPECT_GT(p.on_gpu, 0u);
    EXPECT_EQ(p.through_host, 0u) << p.last_through_host;
  } else {
    EXPECT_EQ(p.on_gpu, 0u);
    EXPECT_GT(p.through_host, 0u);
    EXPECT_NE(p.last_through_host.find("no peer access"), std::string::npos) << p.last_through_host;
  }
}

TEST(GpuBuffers, A256MiBTensorOfTwoRanks) {
  NEED_GPU();
  DaemonProcess d;
  const std::vector<Tensor> big = {{GSYNC_FLOAT32, (256u << 20) / 4}};
  expect_all_ok(run_ranks(2, [&](int r) {
    return run_rank(d.socket(), "big", 2, r, big, {GSYNC_SUM});
  }, 300), d);
  EXPECT_EQ(paths_of(d.admin_socket()).on_gpu, 1u);
}

TEST(GpuBuffers, WhatTheGpuPathDoesNotTakeGoesThroughHostMemory) {
  NEED_GPU();
  DaemonProcess d;
  // float64 and int32 have no GPU kernel: the daemon copies each rank's
  // tensor to pinned host memory, reduces there and copies back.
  const std::vector<Tensor> host_kernels = {{GSYNC_FLOAT64, 4099}, {GSYNC_INT32, 1048579}};
  expect_all_ok(run_ranks(3, [&](int r) {
    return run_rank_with(
        [&](gsync_comm_t** comm) { return connect_rank(d.socket(), "f64-i32", 3, r, comm); }, 3,
        r, host_kernels, {GSYNC_SUM, GSYNC_AVG, GSYNC_MIN, GSYNC_MAX}, /*bcast_root=*/2);
  }), d);
  // Each allreduce through host memory (2 dtypes x 4 ops); the broadcasts
  // only copy, which the GPU path does for any dtype.
  Paths p = paths_of(d.admin_socket());
  EXPECT_EQ(p.through_host, 2u * 4u);
  EXPECT_EQ(p.on_gpu, 2u);
  EXPECT_NE(p.last_through_host.find("no GPU kernel for int32"), std::string::npos)
      << p.last_through_host;
  // Host memory and device memory in one op, and a job with the anomaly
  // guard (it reads host memory): the same way.
  auto res = run_ranks(2, [&](int r) {
    RANK_CHECK(gpu::use_device(0), "no GPU in the rank");
    gsync_comm_t* comm = nullptr;
    RANK_CHECK(connect_with(d.socket(), "mixed", 2, r, r, 2, &comm,
                            [](gsync_config_t& cfg) { cfg.anomaly_guard = 1; }) == 0,
               "{}", gsync_last_error());
    const size_t n = 300007;
    std::vector<float> host(n);
    for (size_t i = 0; i < n; i++) host[i] = float(test_value(r, i));
    void* buf = nullptr;
    if (r == 0) {
      RANK_CHECK(gsync_alloc(comm, n * 4, &buf) == 0, "{}", gsync_last_error());
      std::memcpy(buf, host.data(), n * 4);
    } else {
      RANK_CHECK(gsync_alloc_device(comm, n * 4, &buf) == 0, "{}", gsync_last_error());
      RANK_CHECK(gpu::copy_sync(buf, host.data(), n * 4), "copy in");
    }
    gsync_request_t* req = nullptr;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, buf, n, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0, "{}",
               gsync_last_error());
    RANK_CHECK(gsync_wait(req, 30000) == 0, "{}", gsync_request_error(req));
    gsync_request_free(req);
    if (r == 0)
      std::memcpy(host.data(), buf, n * 4);
    else
      RANK_CHECK(gpu::copy_sync(host.data(), buf, n * 4), "copy out");
    for (size_t i = 0; i < n; i++)
      RANK_CHECK(host[i] == float(expected(GSYNC_FLOAT32, GSYNC_SUM, 2, i)),
                 "mixed: element {} is {}", i, host[i]);
    // A tensor running past the allocation's end: refused by the library.
    if (r == 1)
      RANK_CHECK(gsync_allreduce(comm, 3, 0, static_cast<char*>(buf) + 4096, n, GSYNC_FLOAT32,
                                 GSYNC_SUM, 0, &req) == GSYNC_ERR_INVALID,
                 "past the end was taken");
    gsync_close(comm);
    return 0;
  });
  expect_all_ok(res, d);
  p = paths_of(d.admin_socket());
  EXPECT_EQ(p.through_host, 2u * 4u + 1u);
  EXPECT_NE(p.last_through_host.find("host and device memory in one op"), std::string::npos)
      << p.last_through_host;
}

TEST(GpuBuffers, ARankKilledWhileTheDaemonReducesItsMemoryLeavesTheDaemonServing) {
  NEED_GPU();
  // Two hosts, ranks 0 and 1 on the first: 256 MiB of device memory goes
  // through the fold, the staging copies, the wire and the copies back
  // into both ranks' buffers for as long as the wire takes. A fourth
  // process watches the first host's daemon and SIGKILLs rank 1 while GPU
  // work of the op is queued there (gsyncctl status: gpu_tasks_in_flight)
  // - kernels and copies then read and write memory of a process that is
  // gone (the daemon's mapping keeps it until the op ends). The other
  // ranks get a result or a named error, never a hang, and both daemons
  // serve the next job's device memory.
  auto bed = make_bed({2}, "auto", 60000);
  ASSERT_TRUE(bed);
  const std::vector<Place> p = places({2, 1});
  int pid_pipe[2];
  ASSERT_EQ(pipe(pid_pipe), 0);
  const std::string admin0 = bed->admin_socket(0);
  auto res = run_ranks(4, [&](int r) {
    if (r == 3) {  // the killer
      close(pid_pipe[1]);
      pid_t victim = 0;
      RANK_CHECK(read(pid_pipe[0], &victim, sizeof victim) == sizeof victim, "no pid from rank 1");
      const bool caught = wait_until(
          [&] { return paths_of(admin0).gpu_tasks_in_flight > 0; }, 60000, 0);
      kill(victim, SIGKILL);
      RANK_CHECK(caught, "no GPU work of the op was ever seen queued on host 0");
      return 0;
    }
    RANK_CHECK(gpu::use_device(0), "no GPU in the rank");
    gsync_comm_t* comm = nullptr;
    RANK_CHECK(connect_place(*bed, "killed", p, r, &comm) == 0, "{}", gsync_last_error());
    void* dev = nullptr;
    const size_t count = (256u << 20) / 4;
    RANK_CHECK(gsync_alloc_device(comm, count * 4, &dev) == 0, "{}", gsync_last_error());
    gsync_request_t* req = nullptr;
    RANK_CHECK(gsync_allreduce(comm, 1, 0, dev, count, GSYNC_FLOAT32, GSYNC_SUM, 0, &req) == 0,
               "{}", gsync_last_error());
    if (r == 1) {
      const pid_t self = getpid();
      RANK_CHECK(write(pid_pipe[1], &self, sizeof self) == sizeof self, "pid to the killer");
      for (;;) pause();  // until the killer's SIGKILL
    }
    const int rc = gsync_wait(req, 60000);
    RANK_CHECK(rc == 0 || rc == GSYNC_ERR_RANK_DEAD, "{}: {}", rc, gsync_request_error(req));
    gsync_close(comm);
    return 0;
  }, 300);
  close(pid_pipe[0]);
  close(pid_pipe[1]);
  EXPECT_EQ(res[0].code, 0) << res[0].output << bed->daemon_log(0);
  EXPECT_EQ(res[1].code, -SIGKILL) << res[1].output;
  EXPECT_EQ(res[2].code, 0) << res[2].output << bed->daemon_log(1);
  EXPECT_EQ(res[3].code, 0) << res[3].output;
  // And the next job's device memory goes through both daemons, on the GPU.
  const std::vector<Tensor> small = {{GSYNC_FLOAT32, 4099}};
  const uint64_t gpu_before = paths_of(admin0).on_gpu;
  auto after = run_ranks(3, [&](int r) {
    return run_rank_with(
        [&](gsync_comm_t** comm) { return connect_place(*bed, "after-kill", p, r, comm); }, 3, r,
        small, {GSYNC_SUM}, /*bcast_root=*/-1, /*device=*/0, /*exact=*/false);
  }, 300);
  for (const auto& r : after) EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(paths_of(admin0).on_gpu, gpu_before + 1);
  for (int h = 0; h < bed->hosts(); h++) EXPECT_TRUE(bed->daemon_alive(h)) << bed->daemon_log(h);
}

}  // namespace
}  // namespace gsync::test
