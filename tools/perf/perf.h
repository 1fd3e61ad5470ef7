// SPDX-License-Identifier: Apache-2.0
//
// What gsync-perf's parts share (gsync_perf.cc: the command line and the
// test bed; sweep.cc and sweep_print.cc: the size sweep, its ranks and its
// printing; workload.cc: the ResNet-50 workload; common.cc: the ranks'
// connect and allreduce, the reports they send back).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gsync/gsync.h"
#include "tools/common/procs.h"
#include "tools/peers/launch.h"
#include "tools/perf/codecs.h"
#include "tools/perf/membw.h"
#include "tools/perf/plot.h"

namespace gsync::perf {

using Clock = std::chrono::steady_clock;

// A sample's barrier waits this long for every rank before the run fails
// with the daemon's report of who is missing.
constexpr int kBarrierTimeoutMs = 60000;

// Where one rank runs: its host's daemon socket and its numbers.
struct Place {
  std::string socket;
  int host = 0, rank = 0, local_rank = 0, local_size = 1;
  std::vector<int> cpus;  // its host's CPUs on a pinned test bed, else empty
  std::string admin;      // its host's admin socket, where known
};

struct Options {
  std::string socket;
  int ranks = 4;  // per host
  int hosts = 1, racks = 1;
  bool loopback = false, pin = false;
  uint32_t uplink_mbit = 0;
  std::string transport;          // the test bed daemons' --transport; "": their default
  std::string dpdk_vdev = "memif";  // with transport dpdk: the virtual device (testbed.h)
  uint32_t dpdk_payload = 0;        // and bytes per frame (0: the port's MTU's)
  std::string cluster, sockets, algo = "auto", compare;
  std::vector<std::string> daemon_args;
  std::vector<Place> places;  // by rank
  std::vector<std::string> racks_of;  // rack per host
  int world() const { return static_cast<int>(places.size()); }
  uint64_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int factor = 4;
  std::string dtype = "float32", op = "sum";
  int iters = 20, warmup = 5;
  bool json_out = false;
  // --cpu: each row's CPU per GB reduced (ranks and daemons, over the timed
  // samples), against the peers' (their ranks) in the same run.
  bool cpu = false;
  std::string workload;
  int steps = 10;
  int dtype_id = GSYNC_FLOAT32, op_id = GSYNC_SUM;
  // --compress, in order (one uncompressed run when none is given); when
  // given, every op's bytes on the compressed hop are measured too.
  std::vector<std::string> compress;
  std::vector<CodecRun> codecs;
  // --reproducible: each size also as a reproducible allreduce
  // (docs/reproducibility.md), beside the default one, with the bytes both
  // put on the wire to every peer.
  bool reproducible = false;
  bool measure_wire() const { return (!compress.empty() || reproducible) && hosts > 1; }
  // --ps: each size also as a parameter server's push_pull (SGD, BSP) in
  // the same run, beside the allreduce (docs/performance.md, "The parameter
  // server").
  bool ps = false;
  // --plot: busbw by size drawn to this PNG at the end (plot.h).
  std::string plot;
  // --tune / --autotune-check (tune.cc): the table's file, and the hosts'
  // ids it names. plan_algo/plan_chunk: the job's own plan for a candidate
  // run ("" and 0: the daemons choose), job_tag: its job id's suffix.
  bool tune = false, autotune_check = false;
  int tune_rounds = 3;
  uint32_t tune_seed = 1;
  std::string tune_out = "gsync-tuning.json";
  std::vector<std::string> host_ids;
  std::string plan_algo, job_tag;
  uint64_t plan_chunk = 0;
};

inline const std::map<std::string, int> kDtypes = {{"float32", GSYNC_FLOAT32}, {"float16", GSYNC_FLOAT16},
                                            {"bfloat16", GSYNC_BFLOAT16}, {"float64", GSYNC_FLOAT64},
                                            {"int32", GSYNC_INT32}};
inline const std::map<std::string, int> kOps = {{"sum", GSYNC_SUM}, {"avg", GSYNC_AVG},
                                         {"weighted_avg", GSYNC_WEIGHTED_AVG}, {"min", GSYNC_MIN},
                                         {"max", GSYNC_MAX}};

// Peer results in the same run, for the ratio columns.
struct Peers {
  peers::Result gloo, mpi;
  double tcp_gbps = -1;
  double uplink_gbps = -1;  // one plain TCP stream across a shaped uplink
};

// common.cc
double median(std::vector<double> v);
int connect(const Options& o, int rank, uint64_t arena, gsync_comm_t** comm);
// In a rank process: allreduce and wait, or report why not (reproducible:
// gsync_allreduce_opts_t's, -1 the session's).
bool allreduce(gsync_comm_t* comm, uint64_t key, uint64_t step, void* buf, size_t count,
               const Options& o, int rank, const gsync_compression_t* codec = nullptr,
               int reproducible = -1);
// --ps: declare a parameter of count elements (every rank; rank 0's buf the
// initial values) for SGD with learning rate 1, and push_pull it.
bool ps_declare(gsync_comm_t* comm, uint64_t key, void* buf, size_t count, const Options& o,
                int rank);
bool push_pull(gsync_comm_t* comm, uint64_t key, uint64_t clock, void* buf, size_t count,
               const Options& o, int rank);
size_t fill_and_count_wrong(void* buf, size_t count, const Options& o, int rank, bool check);
// A barrier of the ranks (step counts them), or a report of why not.
bool barrier(gsync_comm_t* comm, uint64_t* step, int rank);
// Per line kind, the ranks' reports as rows of numbers.
bool collect(const std::vector<tools::ChildResult>& res, const std::string& kind,
             std::vector<std::vector<std::vector<double>>>* rows);
// Each rank's first error line (its text after "error "), or how it
// exited when it printed none; "" for a rank that ended well.
std::vector<std::string> rank_errors(const std::vector<tools::ChildResult>& res);
double bus_factor(int n);
std::string daemon_isa(const std::string& admin_socket);
// The daemon's CPU seconds so far (admin `cpu`), or -1.
double daemon_cpu_s(const std::string& admin_socket);

// sweep.cc
std::vector<uint64_t> sweep_sizes(const Options& o);
// Each size's time per op (the median over samples of the slowest rank);
// false when a rank failed or a result was wrong.
bool measure_sizes(const Options& o, const std::vector<uint64_t>& sizes, std::vector<double>* us);
// sweep_print.cc
int run_sweep(const Options& o, const MemoryReference& ref, const std::string& isa,
              const Peers& peer);
// The first host outside host 1's rack, or -1.
int first_host_elsewhere(const Options& o);

// workload.cc
int run_workload(const Options& o);

// tune.cc: --tune measures every candidate plan at every size and loads
// the winners into the daemons; --autotune-check then measures the tuned
// daemons against the candidates.
int run_tune(const Options& o);

}  // namespace gsync::perf
