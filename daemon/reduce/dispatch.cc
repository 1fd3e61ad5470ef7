// SPDX-License-Identifier: Apache-2.0
//
// Picks the kernel ISA once from CPUID and routes reduce_range() to it. This
// file is compiled without -m flags: it must run on any x86-64 to decide
// which of the ISA translation units may be entered.
#include <cpuid.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "daemon/reduce/reduce.h"

namespace gsync::reduce {
namespace {

using RangeFn = void (*)(const ReduceArgs&, size_t, size_t);

constexpr RangeFn kRangeFns[] = {
    impl::reduce_range_scalar,
    impl::reduce_range_avx2,
    impl::reduce_range_avx512,
};

// 16 MiB of output: half the 32 MiB L3 of the EPYC hosts. Above it the
// results would be evicted before anybody reads them, so bypassing the cache
// costs nothing and saves the read-for-ownership of out-of-place outputs.
constexpr size_t kDefaultStreamingThreshold = size_t{16} << 20;

std::atomic<size_t> g_streaming_threshold{kDefaultStreamingThreshold};
// -1: no override; otherwise the Isa forced by force_isa().
std::atomic<int> g_forced_isa{-1};

// CPUID leaf 1, ECX bit 29. Not __builtin_cpu_supports("f16c"): clang does
// not know that name, and the fuzz build is clang's. F16C needs no state
// of its own beyond AVX's, which the avx2 check has covered.
bool has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

bool cpu_has(Isa isa) {
  // GCC's cpu_supports also checks XCR0, so a kernel that does not save the
  // AVX-512 state disables the AVX-512 path.
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      // The flags kernels_avx2.cc is built with.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::kAvx512:
      // The flags kernels_avx512.cc is built with.
      return cpu_has(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa detected_isa() {
  static const Isa isa = cpu_has(Isa::kAvx512) ? Isa::kAvx512
                         : cpu_has(Isa::kAvx2) ? Isa::kAvx2
                                               : Isa::kScalar;
  return isa;
}

}  // namespace

bool supported(DType t, Op op) {
  // Values off the wire are checked before they become enums; a corrupt
  // one that got here anyway names nothing.
  DType known_t{};
  Op known_op{};
  if (!proto::dtype_from_wire(static_cast<int>(t), &known_t) ||
      !proto::redop_from_wire(static_cast<int>(op), &known_op))
    return false;
  return proto::defined(t, op);
}

void reduce_range(const ReduceArgs& args, size_t begin, size_t end) {
  // Nothing defined to do: return without touching memory rather than abort
  // (callers check supported() when they accept a request).
  if (end > args.count) end = args.count;
  if (begin >= end || args.n_inputs == 0 || !supported(args.dtype, args.op)) return;
  if (args.op == Op::kWeightedAvg && args.weights == nullptr) return;
  kRangeFns[static_cast<int>(active_isa())](args, begin, end);
}

Isa active_isa() {
  const int forced = g_forced_isa.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Isa>(forced) : detected_isa();
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool isa_available(Isa isa) {
  return static_cast<uint8_t>(isa) <= static_cast<uint8_t>(detected_isa());
}

void force_isa(Isa isa) {
  // An ISA this CPU lacks would fault on the first instruction; fall back to
  // the best one it has instead.
  if (!isa_available(isa)) isa = detected_isa();
  g_forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

size_t streaming_threshold() { return g_streaming_threshold.load(std::memory_order_relaxed); }

void set_streaming_threshold(size_t bytes) {
  g_streaming_threshold.store(bytes, std::memory_order_relaxed);
}

}  // namespace gsync::reduce
