// SPDX-License-Identifier: Apache-2.0
//
// Reduction kernel bandwidth next to the machine's own limits, measured in
// the same run: a single-thread memcpy and an `a += b` loop. Not a test (the
// numbers depend on the machine and its neighbours); docs/reduce.md quotes
// its output.
//
//   bench_reduce [--inputs N] [--passes N] [--dtype f32|f16|bf16|f64|i32]
//                [--op sum|avg|wavg|min|max] [--out-of-place] [MiB ...]
//
// GB/s counts bytes crossing the memory bus once per pass: 2 * n * bytes for
// the kernels (n tensors read, n written: inputs alias outputs), 2 * bytes
// for memcpy, 3 * bytes for a += b (two reads, one write).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/reduce/reduce.h"

namespace {

using gsync::reduce::DType;
using gsync::reduce::Isa;
using gsync::reduce::Op;

struct Options {
  size_t inputs = 4;
  int passes = 5;
  DType dtype = DType::kF32;
  Op op = Op::kSum;
  bool out_of_place = false;
  std::vector<size_t> mib = {64, 256};
};

// Median wall time of `passes` runs of fn, in seconds.
double median_seconds(int passes, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < passes; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Page-aligned, touched once so that page faults stay out of the timings.
struct Buffer {
  explicit Buffer(size_t bytes)
      : p(static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))) {
    // Small positive values: in-place sums grow by n per pass and reach
    // infinity, which costs nothing extra, but never reach subnormals, which
    // would.
    auto* f = reinterpret_cast<uint32_t*>(p);
    for (size_t i = 0; i < bytes / 4; ++i) f[i] = 0x3c003c00u;  // fp32 ~0.0078, fp16/bf16 > 0
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* p;
};

template <class T>
struct Named {
  std::string_view name;
  T value;
};
constexpr Named<DType> kDTypes[] = {{"f32", DType::kF32},
                                    {"f16", DType::kF16},
                                    {"bf16", DType::kBF16},
                                    {"f64", DType::kF64},
                                    {"i32", DType::kI32}};
constexpr Named<Op> kOps[] = {{"sum", Op::kSum},
                              {"avg", Op::kAvg},
                              {"wavg", Op::kWeightedAvg},
                              {"min", Op::kMin},
                              {"max", Op::kMax}};

template <class T, size_t kN>
bool lookup(const Named<T> (&table)[kN], std::string_view name, T* out) {
  for (const auto& e : table) {
    if (e.name == name) {
      *out = e.value;
      return true;
    }
  }
  return false;
}

template <class T, size_t kN>
const char* name_of(const Named<T> (&table)[kN], T value) {
  for (const auto& e : table) {
    if (e.value == value) return e.name.data();
  }
  return "?";
}

bool parse(int argc, char** argv, Options* o) {
  std::vector<size_t> mib;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--inputs" && has_value) {
      o->inputs = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--passes" && has_value) {
      o->passes = std::atoi(argv[++i]);
    } else if (a == "--dtype" && has_value) {
      if (!lookup(kDTypes, argv[++i], &o->dtype)) return false;
    } else if (a == "--op" && has_value) {
      if (!lookup(kOps, argv[++i], &o->op)) return false;
    } else if (a == "--out-of-place") {
      o->out_of_place = true;
    } else if (!a.empty() && a[0] != '-') {
      mib.push_back(std::strtoul(argv[i], nullptr, 10));
    } else {
      return false;
    }
  }
  if (!mib.empty()) o->mib = mib;
  return o->inputs >= 1 && o->passes >= 1 && gsync::reduce::supported(o->dtype, o->op);
}

void run_size(const Options& o, size_t mib) {
  namespace r = gsync::reduce;
  const size_t bytes = mib << 20;
  const size_t n = o.inputs;
  const double gb = 1e9;

  std::vector<std::unique_ptr<Buffer>> in, out;
  for (size_t i = 0; i < n; ++i) in.push_back(std::make_unique<Buffer>(bytes));
  if (o.out_of_place) {
    for (size_t i = 0; i < n; ++i) out.push_back(std::make_unique<Buffer>(bytes));
  }
  std::vector<const void*> ins;
  std::vector<void*> outs;
  for (size_t i = 0; i < n; ++i) {
    ins.push_back(in[i]->p);
    outs.push_back(o.out_of_place ? out[i]->p : in[i]->p);
  }
  std::vector<double> weights(n, 1.0);

  r::ReduceArgs args;
  args.inputs = ins.data();
  args.n_inputs = n;
  args.outputs = outs.data();
  args.n_outputs = n;
  args.weights = weights.data();
  args.dtype = o.dtype;
  args.op = o.op;
  args.count = bytes / r::dtype_size(o.dtype);

  // Out-of-place kernels also read the outputs' lines for ownership unless
  // they stream; the figure counts only the bytes the algorithm needs.
  const double kernel_bytes = 2.0 * static_cast<double>(n * bytes);

  Buffer copy_dst(bytes);
  const double t_memcpy =
      median_seconds(o.passes, [&] { std::memcpy(copy_dst.p, in[0]->p, bytes); });
  const double memcpy_gbs = 2.0 * bytes / t_memcpy / gb;
  auto* a = reinterpret_cast<float*>(copy_dst.p);
  const auto* b = reinterpret_cast<const float*>(in[1 % n]->p);
  const double t_add = median_seconds(o.passes, [&] {
    for (size_t i = 0; i < bytes / sizeof(float); ++i) a[i] += b[i];
  });

  std::printf("%10zu %8s %6s %10.2f %8.2f %9s\n", bytes, "memcpy", "-", t_memcpy * 1e3, memcpy_gbs,
              "100%");
  const double add_gbs = 3.0 * bytes / t_add / gb;
  std::printf("%10zu %8s %6s %10.2f %8.2f %8.0f%%\n", bytes, "a+=b", "-", t_add * 1e3, add_gbs,
              100.0 * add_gbs / memcpy_gbs);

  const size_t default_threshold = r::streaming_threshold();
  const Isa original = r::active_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!r::isa_available(isa)) continue;
    r::force_isa(isa);
    // In place, outputs are inputs and never stream (see reduce.h): one row.
    const std::vector<bool> modes =
        o.out_of_place ? std::vector<bool>{false, true} : std::vector<bool>{false};
    for (bool stream : modes) {
      r::set_streaming_threshold(stream ? 0 : SIZE_MAX);
      r::reduce(args);  // warm-up: first touch of the code and the TLB
      const double t = median_seconds(o.passes, [&] { r::reduce(args); });
      const double gbs = kernel_bytes / t / gb;
      std::printf("%10zu %8s %6s %10.2f %8.2f %8.0f%%\n", bytes, r::isa_name(isa),
                  stream ? "nt" : "cached", t * 1e3, gbs, 100.0 * gbs / memcpy_gbs);
    }
  }
  r::set_streaming_threshold(default_threshold);
  r::force_isa(original);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: %s [--inputs N] [--passes N] [--dtype f32|f16|bf16|f64|i32]\n"
                 "          [--op sum|avg|wavg|min|max] [--out-of-place] [MiB ...]\n",
                 argv[0]);
    return 2;
  }
  std::printf("# gsync reduce: %s %s, %zu inputs -> %zu outputs (%s), median of %d passes\n",
              name_of(kDTypes, o.dtype), name_of(kOps, o.op), o.inputs, o.inputs,
              o.out_of_place ? "out of place" : "in place", o.passes);
  std::printf("# GB/s: kernels 2*n*bytes/t, memcpy 2*bytes/t, a+=b 3*bytes/t (one thread)\n");
  std::printf("# %8s %8s %6s %10s %8s %9s\n", "bytes", "kernel", "stores", "time(ms)", "GB/s",
              "vs-memcpy");
  for (size_t mib : o.mib) run_size(o, mib);
  return 0;
}
