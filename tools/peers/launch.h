// SPDX-License-Identifier: Apache-2.0
//
// Runs the peer systems gsync is compared with (Gloo, Open MPI, one plain TCP
// stream) over the same host slots as gsync-perf's own run, and returns their
// figures. The measuring is done by separate driver programs in this folder
// (gloo-allreduce, mpi-allreduce, tcp-stream); this library only starts them,
// bounds their runtime and parses the JSON lines they print.
//
// Error model: nothing here throws or aborts for a failed run. run_gloo and
// run_mpi_tcp return a Result whose `error` names what failed (which rank or
// program, its exit status, the tail of its stderr); tcp_stream_gbps returns
// a negative value and fills *error. Every child is killed (by pid, or by the
// process group it leads) and reaped before a call returns.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gsync::peers {

// One rank's place: a network namespace (a name under /var/run/netns, "" =
// the caller's namespace, i.e. loopback mode), the address to bind and be
// reached at ("" = 127.0.0.1), and CPUs.
struct HostSlot {
  std::string netns;
  std::string address;
  // The CPUs the slot's host may use on a pinned test bed (empty: any):
  // its peer ranks run there too, as gsync's do.
  std::vector<int> cpus;
};

// One message size, as the drivers print it (nccl-tests columns, GB = 1e9 B).
struct Row {
  uint64_t bytes = 0;
  double time_us = 0;     // median over ops of the slowest rank
  double algbw_gbps = 0;  // bytes / time
  double busbw_gbps = 0;  // algbw * 2(n-1)/n
  int64_t wrong = 0;      // elements that differed from n(n+1)/2 in the checked op, all ranks
  double cpu_s = -1;      // every rank's CPU over the timed samples, summed (-1: not said)
  int timed_ops = 0;      // the ops those samples ran
  // CPU seconds per GB of tensor reduced (bytes x timed ops), or -1.
  double cpu_s_per_gb() const {
    return cpu_s >= 0 && timed_ops > 0 && bytes > 0 ? cpu_s / (double(bytes) * timed_ops / 1e9)
                                                    : -1;
  }
};

struct Result {
  std::map<uint64_t, Row> rows;  // by bytes
  std::string error;             // empty when the run succeeded
  std::string algo;              // Gloo: the algorithm the driver measured; MPI: ""
  std::string command;           // what was run (rank 0's command line for Gloo)
  bool ok() const { return error.empty(); }
};

// The driver programs: the environment override if set, else the program
// beside the calling executable or in the build tree (tools/peers/), else "".
std::string gloo_driver_path();  // $GSYNC_GLOO_DRIVER, gloo-allreduce
std::string mpi_driver_path();   // $GSYNC_MPI_DRIVER, mpi-allreduce
std::string tcp_stream_path();   // $GSYNC_TCP_STREAM, tcp-stream
std::string netns_rsh_path();    // $GSYNC_NETNS_RSH, netns-rsh.sh
// mpirun on PATH, or "".
std::string mpirun_path();

// Runs the Gloo driver with one rank per slot (rank i = slots[i]); each rank
// is forked, enters its slot's namespace with setns(CLONE_NEWNET) and execs
// the driver. Sizes min_bytes..max_bytes by factor 4, `iters` timed ops per
// size. algo "" lets the driver pick (see gloo_allreduce.cc, "auto").
Result run_gloo(const std::vector<HostSlot>& slots, uint64_t min_bytes, uint64_t max_bytes,
                int iters, int timeout_s, const std::string& algo = "");

// Open MPI's MPI_Allreduce over its TCP btl, one rank per slot. On loopback
// (slots without a namespace) mpirun starts them here. In the test bed's
// namespaces mpirun runs in the first slot's namespace and starts its
// daemons in the others through netns-rsh.sh (instead of ssh), each
// namespace one "node"; it is told to yield when idle, which it would only
// do on its own if it knew the nodes share cores.
Result run_mpi_tcp(const std::vector<HostSlot>& slots, uint64_t min_bytes, uint64_t max_bytes,
                   int iters, int timeout_s);

// One plain TCP stream from slot `from` to slot `to` (server in `to`'s
// namespace, bound to its address) for `seconds`: GB/s, or < 0 on failure.
double tcp_stream_gbps(const HostSlot& from, const HostSlot& to, double seconds,
                       std::string* error = nullptr);

}  // namespace gsync::peers
