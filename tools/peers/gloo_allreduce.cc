// SPDX-License-Identifier: Apache-2.0
//
// Gloo's allreduce measured the way gsync-perf measures gsync (and the way
// mpi_allreduce.c measures Open MPI), so the three can be set side by side in
// one run. This is ONE rank; tools/peers/launch.cc starts one process per
// host slot, each possibly inside its own network namespace, and they meet in
// a gloo::rendezvous::FileStore directory that all of them can see.
//
// In-place float32 sum; per size one checked op (rank r contributes r+1, every
// element must be n(n+1)/2), 3 warm-up ops, then at least `iters` timed ops in
// samples of k back-to-back ops after a barrier (sampling.h); time = median
// over samples of the slowest rank's time per op. Rank 0 prints one JSON
// object per line, the same keys as mpi_allreduce.c plus "algo".
//
//   gloo-allreduce --rank R --size N --store DIR [--address 127.0.0.1]
//                  [--min-bytes 4096] [--max-bytes 268435456] [--iters 20]
//                  [--algo auto|allreduce|ring_chunked] [--timeout 170]

#include <getopt.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sampling.h"

namespace {

struct Options {
  int rank = -1;
  int size = 0;
  std::string store;
  std::string address = "127.0.0.1";
  uint64_t min_bytes = 4096;
  uint64_t max_bytes = uint64_t{256} << 20;
  int iters = 20;
  std::string algo = "auto";
  int timeout_s = 170;
};

constexpr int kWarmupOps = 3;  // as mpi_allreduce.c

// "auto" picks, per rank count, the Gloo entry point that was faster on this
// machine in the peers baseline (/work/shared/peers/RESULTS.md, median of 6
// runs): with 4 ranks the legacy AllreduceRingChunked beats gloo::allreduce
// at every size (1.02 vs 0.26 GB/s busbw at 1 MiB, 1.11 vs 1.04 at 256 MiB;
// gloo::allreduce pays a ~6 ms hand-off per op up to 1 MiB). With 2 ranks
// gloo::allreduce wins up to 16 MiB and ties at 64 MiB, and RingChunked has
// a reproducible ~72 ms/op stall at 16 KiB after the 4 KiB run, so 2 ranks
// use gloo::allreduce.
std::string resolve_algo(const std::string& algo, int size) {
  if (algo != "auto") return algo;
  return size >= 3 ? "ring_chunked" : "allreduce";
}

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --rank R --size N --store DIR [--address ADDR] [--min-bytes B]\n"
               "          [--max-bytes B] [--iters K] [--algo auto|allreduce|ring_chunked]\n"
               "          [--timeout S]\n",
               argv0);
}

bool parse_options(int argc, char** argv, Options* o) {
  enum { kRank = 1, kSize, kStore, kAddress, kMin, kMax, kIters, kAlgo, kTimeout };
  static const option kLong[] = {
      {"rank", required_argument, nullptr, kRank},
      {"size", required_argument, nullptr, kSize},
      {"store", required_argument, nullptr, kStore},
      {"address", required_argument, nullptr, kAddress},
      {"min-bytes", required_argument, nullptr, kMin},
      {"max-bytes", required_argument, nullptr, kMax},
      {"iters", required_argument, nullptr, kIters},
      {"algo", required_argument, nullptr, kAlgo},
      {"timeout", required_argument, nullptr, kTimeout},
      {nullptr, 0, nullptr, 0},
  };
  int c;
  while ((c = getopt_long(argc, argv, "", kLong, nullptr)) != -1) {
    switch (c) {
      case kRank:
        o->rank = std::atoi(optarg);
        break;
      case kSize:
        o->size = std::atoi(optarg);
        break;
      case kStore:
        o->store = optarg;
        break;
      case kAddress:
        o->address = optarg;
        break;
      case kMin:
        o->min_bytes = std::strtoull(optarg, nullptr, 0);
        break;
      case kMax:
        o->max_bytes = std::strtoull(optarg, nullptr, 0);
        break;
      case kIters:
        o->iters = std::atoi(optarg);
        break;
      case kAlgo:
        o->algo = optarg;
        break;
      case kTimeout:
        o->timeout_s = std::atoi(optarg);
        break;
      default:
        return false;
    }
  }
  if (optind != argc || o->size < 1 || o->rank < 0 || o->rank >= o->size || o->store.empty() ||
      o->min_bytes < sizeof(float) || o->min_bytes % sizeof(float) != 0 ||
      o->max_bytes < o->min_bytes || o->iters < 1 || o->timeout_s < 1) {
    return false;
  }
  const std::string algo = resolve_algo(o->algo, o->size);
  return algo == "allreduce" || algo == "ring_chunked";
}

// Reduction kernels handed to gloo::allreduce. Written here rather than taken
// from gloo/math.h so that they are compiled with this file's flags.
void sum_f32(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  auto* x = static_cast<const float*>(a);
  auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}
void sum_f64(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  auto* x = static_cast<const double*>(a);
  auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}
void max_f64(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<double*>(out);
  auto* x = static_cast<const double*>(a);
  auto* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; i++) o[i] = std::max(x[i], y[i]);
}

// One rank's Gloo context: TCP device bound to the slot's address, full mesh
// built through the file store.
class GlooRank {
 public:
  explicit GlooRank(const Options& o) : rank_(o.rank), size_(o.size) {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.address;  // the address peers will connect to
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(o.store);
    auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    context->setTimeout(std::chrono::seconds(o.timeout_s));
    context->connectFullMesh(store, device);
    context_ = std::move(context);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  void barrier() {
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag_++);
    gloo::barrier(opts);
  }

  void allreduce_f64(std::vector<double>& v, void (*fn)(void*, const void*, const void*, size_t)) {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(v.data(), v.size());
    opts.setReduceFunction(fn);
    opts.setTag(next_tag_++);
    gloo::allreduce(opts);
  }

  // Prepares one in-place float32 sum-allreduce of buf[0..count) and returns
  // the call that runs it. RingChunked registers its buffers with the pairs
  // in the constructor (prepare once, run many); gloo::allreduce sets up per
  // call, which is part of what it costs.
  std::function<void()> prepare(const std::string& algo, float* buf, size_t count) {
    if (algo == "ring_chunked") {
      std::vector<float*> ptrs{buf};
      auto alg = std::make_shared<gloo::AllreduceRingChunked<float>>(context_, ptrs,
                                                                     static_cast<int>(count));
      return [alg] { alg->run(); };
    }
    return [this, buf, count] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(buf, count);
      opts.setReduceFunction(sum_f32);
      opts.setTag(next_tag_++);
      gloo::allreduce(opts);
    };
  }

 private:
  int rank_, size_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 1;
};

void run_size(GlooRank& g, const std::string& algo, std::vector<float>& buf, uint64_t bytes,
              int iters) {
  const int n = g.size();
  const size_t count = bytes / sizeof(float);
  std::fill_n(buf.begin(), count, static_cast<float>(g.rank() + 1));
  auto op = g.prepare(algo, buf.data(), count);

  op();
  const float expect = static_cast<float>(n * (n + 1) / 2);
  std::vector<double> wrong{0};
  for (size_t i = 0; i < count; i++) wrong[0] += buf[i] != expect;

  for (int w = 0; w < kWarmupOps; w++) op();
  const int k = gsync_ops_per_sample(bytes);
  std::vector<double> times(static_cast<size_t>(gsync_samples_for(iters, bytes)));
  const double cpu0 = gsync_process_cpu_s();
  for (auto& t : times) {
    g.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < k; j++) op();
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / k;
  }
  // Every rank's CPU over the samples, summed (sampling.h).
  std::vector<double> cpu{gsync_process_cpu_s() - cpu0};
  // One reduction per size instead of one per sample: the slowest rank per
  // sample is the same, and Gloo's small ops cost milliseconds here.
  g.allreduce_f64(times, max_f64);
  g.allreduce_f64(wrong, sum_f64);
  g.allreduce_f64(cpu, sum_f64);

  if (g.rank() == 0) {
    std::sort(times.begin(), times.end());
    const double us = times[times.size() / 2] * 1e6;  // same pick as mpi_allreduce.c
    const double algbw = static_cast<double>(bytes) / us / 1e3;
    const double busbw = n > 1 ? algbw * 2.0 * (n - 1) / n : 0.0;
    std::printf(
        "{\"peer\": \"gloo\", \"ranks\": %d, \"bytes\": %llu, \"time_us\": %.3f, "
        "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"wrong\": %lld, \"algo\": \"%s\", "
        "\"cpu_s\": %.6f, \"timed_ops\": %d}\n",
        n, static_cast<unsigned long long>(bytes), us, algbw, busbw,
        static_cast<long long>(wrong[0]), algo.c_str(), cpu[0],
        static_cast<int>(times.size()) * k);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, &o)) {
    usage(argv[0]);
    return 2;
  }
  // Kill switch: a rank whose peer vanished must not outlive its budget,
  // even where Gloo's own timeout does not cover the call that hangs.
  alarm(static_cast<unsigned>(o.timeout_s));
  const std::string algo = resolve_algo(o.algo, o.size);
  try {
    GlooRank g(o);
    std::vector<float> buf(o.max_bytes / sizeof(float));  // touched once, reused by every size
    for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      run_size(g, algo, buf, bytes, o.iters);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-allreduce rank %d/%d (%s, store %s): %s\n", o.rank, o.size,
                 o.address.c_str(), o.store.c_str(), e.what());
    return 1;
  }
  return 0;
}
