// SPDX-License-Identifier: Apache-2.0
//
// The GPU reduce kernel's bandwidth next to the GPU's own device-to-device
// cudaMemcpy, measured in the same run (docs/gpu.md). Not a test. Without a
// GPU it prints "SKIPPED: <why>" and exits 0.
//
//   bench_gpu_reduce [--inputs N] [--passes N] [--dtype f32|f16|bf16] [MiB ...]
//
// GB/s counts every byte read and written once: 2 * bytes for the copy,
// (inputs + 1) * bytes for the reduce (every input read, one output
// written: in place, into the first input). The ratio is the reduce's GB/s
// over the copy's; the target is 0.8 for fp32 sum of 4 inputs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "daemon/gpu/device.h"

namespace {

using gsync::Status;
using gsync::gpu::DeviceBuffer;
using gsync::gpu::Stream;
using gsync::reduce::DType;

void check(const Status& s, const char* what) {
  if (s) return;
  std::fprintf(stderr, "bench_gpu_reduce: %s: %s\n", what, s.message().c_str());
  std::exit(1);
}

// Median over passes of one queued piece of work, waited for each time.
double median_seconds(int passes, Stream& stream, const std::function<void()>& queue) {
  queue();  // warm-up: the module loads and the first touch happen here
  check(stream.synchronize(), "warm-up");
  std::vector<double> t;
  for (int i = 0; i < passes; ++i) {
    const auto start = std::chrono::steady_clock::now();
    queue();
    check(stream.synchronize(), "synchronize");
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t inputs = 4;
  int passes = 20;
  DType dtype = DType::kF32;
  std::vector<size_t> mib;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--inputs" && i + 1 < argc) {
      inputs = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--passes" && i + 1 < argc) {
      passes = std::atoi(argv[++i]);
    } else if (a == "--dtype" && i + 1 < argc) {
      const std::string d = argv[++i];
      dtype = d == "f16" ? DType::kF16 : d == "bf16" ? DType::kBF16 : DType::kF32;
    } else {
      mib.push_back(std::strtoul(argv[i], nullptr, 10));
    }
  }
  if (mib.empty()) mib = {16, 64, 256};
  if (inputs < 1 || inputs > gsync::gpu::kMaxTensors || passes < 1) {
    std::fprintf(stderr, "bench_gpu_reduce: --inputs 1..%zu, --passes >= 1\n",
                 gsync::gpu::kMaxTensors);
    return 2;
  }
  if (gsync::gpu::devices().count == 0) {
    std::printf("SKIPPED: %s\n", gsync::gpu::devices().why_none.c_str());
    return 0;
  }
  std::unique_ptr<Stream> stream;
  check(Stream::create(0, &stream), "stream");
  std::printf("%8s %8s %12s %12s %8s\n", "MiB", "inputs", "copy GB/s", "reduce GB/s", "ratio");
  for (size_t m : mib) {
    const size_t bytes = m << 20;
    std::vector<DeviceBuffer> bufs(inputs);
    for (auto& b : bufs) check(DeviceBuffer::allocate(0, bytes, &b), "allocate");
    // A fixed byte pattern: every element a small normal or subnormal
    // number; in-place sums never reach infinity in the passes run (the
    // GPU's adds take subnormals at full speed, so they do not skew it).
    std::vector<uint8_t> init(bytes);
    for (size_t i = 0; i < bytes; ++i) init[i] = (i % 7) == 0 ? 0x3c : 0x00;
    for (auto& b : bufs) check(gsync::gpu::copy_sync(b.get(), init.data(), bytes), "fill");

    const double copy_s = median_seconds(passes, *stream, [&] {
      check(stream->copy(bufs[0].get(), bufs[inputs - 1].get(), bytes), "copy");
    });
    std::vector<const void*> in;
    for (auto& b : bufs) in.push_back(b.get());
    void* out[1] = {bufs[0].get()};
    gsync::reduce::ReduceArgs args;
    args.inputs = in.data();
    args.n_inputs = inputs;
    args.outputs = out;
    args.n_outputs = 1;
    args.count = bytes / gsync::reduce::dtype_size(dtype);
    args.dtype = dtype;
    const double reduce_s =
        median_seconds(passes, *stream, [&] { check(stream->reduce(args), "reduce"); });
    const double copy_gbs = 2.0 * bytes / copy_s / 1e9;
    const double reduce_gbs = double(inputs + 1) * bytes / reduce_s / 1e9;
    std::printf("%8zu %8zu %12.1f %12.1f %8.3f\n", m, inputs, copy_gbs, reduce_gbs,
                reduce_gbs / copy_gbs);
  }
  return 0;
}
