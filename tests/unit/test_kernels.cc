// SPDX-License-Identifier: Apache-2.0
//
// The reduction kernels against a reference written here from the semantics
// in daemon/reduce/reduce.h, for every dtype x op x ISA this CPU can run.
// The reference shares no code with the kernels: fp16 goes through the
// compiler's _Float16 (libgcc's conversions), bf16 rounding picks the nearer
// of the two neighbouring bf16 values in double arithmetic.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "daemon/reduce/reduce.h"

namespace gsync::reduce {
namespace {

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16,
                                DType::kF64, DType::kI32, DType::kU8};
constexpr Op kAllOps[] = {Op::kSum, Op::kAvg, Op::kWeightedAvg, Op::kMin, Op::kMax};
constexpr size_t kSmallCounts[] = {0, 1, 2, 7, 15, 16, 17, 31, 33, 1000, 4097};
constexpr size_t kLargeCount = (size_t{1} << 20) + 3;
constexpr size_t kMaxInputs = 8;
// Bytes past the end of every buffer that the kernels must leave alone.
constexpr size_t kGuardBytes = 64;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kSum:
      return "sum";
    case Op::kAvg:
      return "avg";
    case Op::kWeightedAvg:
      return "wavg";
    case Op::kMin:
      return "min";
    case Op::kMax:
      return "max";
  }
  return "?";
}

size_t esize(DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF64:
      return 8;
    case DType::kU8:
      return 1;
    default:
      return 4;
  }
}

// ---------------------------------------------------------------------------
// Reference conversions.

float ref_f16_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
uint16_t ref_float_to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
float ref_bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t ref_float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;  // any NaN; results compare NaN by isnan
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t lo = bits & 0xffff0000u;  // truncated toward zero
  const uint32_t hi = lo + 0x10000u;       // next bf16 away from zero
  const double x = std::fabs(static_cast<double>(f));
  const double dlo = std::fabs(static_cast<double>(std::bit_cast<float>(lo)));
  if (x == dlo) return static_cast<uint16_t>(lo >> 16);
  // Past the largest finite bf16 the next step is 2^128, where inf sits.
  const double dhi = (hi & 0x7fffffffu) == 0x7f800000u
                         ? std::ldexp(1.0, 128)
                         : std::fabs(static_cast<double>(std::bit_cast<float>(hi)));
  const double below = x - dlo;
  const double above = dhi - x;
  if (below < above) return static_cast<uint16_t>(lo >> 16);
  if (above < below) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1u) == 0 ? lo >> 16 : hi >> 16);
}

// A product rounded to its type before it is added: a call boundary GCC
// cannot contract into an FMA, whatever -march the test is built with.
template <class S>
[[gnu::noipa]] S rounded_product(S a, S b) {
  return a * b;
}

// ---------------------------------------------------------------------------
// Tensors as raw bytes.

struct Tensor {
  DType dtype;
  std::vector<uint8_t> bytes;
  size_t count() const { return bytes.size() / esize(dtype); }
};

template <class T>
T get(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void put(uint8_t* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// The value of element i in the accumulator type (float for fp16/bf16).
double load_as_double(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::kF32:
      return get<float>(p, i);
    case DType::kF16:
      return ref_f16_to_float(get<uint16_t>(p, i));
    case DType::kBF16:
      return ref_bf16_to_float(get<uint16_t>(p, i));
    case DType::kF64:
      return get<double>(p, i);
    case DType::kI32:
      return get<int32_t>(p, i);
    case DType::kU8:
      return get<uint8_t>(p, i);
  }
  return 0;
}

bool is_float(DType t) { return t != DType::kI32 && t != DType::kU8; }

// Bit-exact, except that any NaN equals any NaN.
bool same_element(DType t, const uint8_t* a, const uint8_t* b, size_t i) {
  const size_t es = esize(t);
  if (std::memcmp(a + i * es, b + i * es, es) == 0) return true;
  return is_float(t) && std::isnan(load_as_double(t, a, i)) && std::isnan(load_as_double(t, b, i));
}

std::string hex_element(DType t, const uint8_t* p, size_t i) {
  const size_t es = esize(t);
  uint64_t v = 0;
  std::memcpy(&v, p + i * es, es);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "0x%0*llx (%.9g)", static_cast<int>(es * 2),
                static_cast<unsigned long long>(v), load_as_double(t, p, i));
  return buf;
}

// ---------------------------------------------------------------------------
// Reference reduction.

template <class S>
S ref_min(S acc, S x) {
  if constexpr (std::is_floating_point_v<S>) {
    if (std::isnan(acc) || std::isnan(x)) return std::numeric_limits<S>::quiet_NaN();
  }
  return x < acc ? x : acc;  // ties keep the value folded first
}

template <class S>
S ref_max(S acc, S x) {
  if constexpr (std::is_floating_point_v<S>) {
    if (std::isnan(acc) || std::isnan(x)) return std::numeric_limits<S>::quiet_NaN();
  }
  return x > acc ? x : acc;
}

template <class S>
S ref_load(DType t, const uint8_t* p, size_t i) {
  if constexpr (std::is_integral_v<S>) {
    return get<S>(p, i);
  } else if constexpr (std::is_same_v<S, double>) {
    return get<double>(p, i);
  } else {
    return static_cast<float>(load_as_double(t, p, i));  // exact for f32/f16/bf16
  }
}

template <class S>
void ref_store(DType t, uint8_t* p, size_t i, S v) {
  if constexpr (std::is_same_v<S, float>) {
    if (t == DType::kF16) return put<uint16_t>(p, i, ref_float_to_f16(v));
    if (t == DType::kBF16) return put<uint16_t>(p, i, ref_float_to_bf16(v));
  }
  put<S>(p, i, v);
}

template <class S>
Tensor ref_reduce_typed(DType t, Op op, const std::vector<const uint8_t*>& in, size_t count,
                        const double* weights) {
  const size_t n = in.size();
  std::vector<S> w(n);
  if (op == Op::kWeightedAvg) {
    double total = 0;
    for (size_t r = 0; r < n; ++r) total += weights[r];
    for (size_t r = 0; r < n; ++r) w[r] = static_cast<S>(weights[r] / total);
  }
  Tensor out{t, std::vector<uint8_t>(count * esize(t))};
  for (size_t i = 0; i < count; ++i) {
    S acc = ref_load<S>(t, in[0], i);
    if (op == Op::kWeightedAvg) acc = rounded_product(acc, w[0]);
    for (size_t r = 1; r < n; ++r) {
      const S x = ref_load<S>(t, in[r], i);
      switch (op) {
        case Op::kSum:
        case Op::kAvg:
          if constexpr (std::is_same_v<S, int32_t>) {
            acc = static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(x));
          } else if constexpr (std::is_same_v<S, uint8_t>) {
            acc = static_cast<uint8_t>(acc + x);  // wraps mod 256
          } else {
            acc = acc + x;
          }
          break;
        case Op::kWeightedAvg:
          acc = acc + rounded_product(x, w[r]);
          break;
        case Op::kMin:
          acc = ref_min(acc, x);
          break;
        case Op::kMax:
          acc = ref_max(acc, x);
          break;
      }
    }
    if (op == Op::kAvg) {
      if constexpr (std::is_same_v<S, uint8_t>) {
        ADD_FAILURE() << "no average of bytes";  // supported() refuses it
      } else if constexpr (std::is_same_v<S, int32_t>) {
        acc = static_cast<int32_t>(static_cast<int64_t>(acc) / static_cast<int64_t>(n));
      } else {
        acc = acc / static_cast<S>(n);
      }
    }
    ref_store<S>(t, out.bytes.data(), i, acc);
  }
  return out;
}

Tensor ref_reduce(DType t, Op op, const std::vector<const uint8_t*>& in, size_t count,
                  const double* weights) {
  switch (t) {
    case DType::kF64:
      return ref_reduce_typed<double>(t, op, in, count, weights);
    case DType::kI32:
      return ref_reduce_typed<int32_t>(t, op, in, count, weights);
    case DType::kU8:
      return ref_reduce_typed<uint8_t>(t, op, in, count, weights);
    default:
      return ref_reduce_typed<float>(t, op, in, count, weights);
  }
}

// ---------------------------------------------------------------------------
// Inputs.

// Mostly moderate values (sums that round in interesting places), some raw
// bit patterns over the whole finite range (subnormals, overflow on store).
Tensor random_tensor(DType t, size_t count, std::mt19937_64& rng) {
  Tensor x{t, std::vector<uint8_t>(count * esize(t))};
  std::uniform_real_distribution<double> moderate(-1000.0, 1000.0);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = rng();
    const bool raw = (bits & 3) == 0;
    switch (t) {
      case DType::kF32: {
        float v = static_cast<float>(moderate(rng));
        if (raw) {
          v = std::bit_cast<float>(static_cast<uint32_t>(bits >> 32));
          if (!std::isfinite(v)) v = 0.5f;
        }
        put<float>(x.bytes.data(), i, v);
        break;
      }
      case DType::kF64: {
        double v = moderate(rng);
        if (raw) {
          v = std::bit_cast<double>(bits);
          if (!std::isfinite(v)) v = 0.25;
        }
        put<double>(x.bytes.data(), i, v);
        break;
      }
      case DType::kF16: {
        uint16_t h = ref_float_to_f16(static_cast<float>(moderate(rng)) / 8);
        if (raw) {
          h = static_cast<uint16_t>(bits >> 16);
          if ((h & 0x7c00) == 0x7c00) h &= 0x83ff;  // inf/NaN -> subnormal
        }
        put<uint16_t>(x.bytes.data(), i, h);
        break;
      }
      case DType::kBF16: {
        uint16_t b = ref_float_to_bf16(static_cast<float>(moderate(rng)));
        if (raw) {
          b = static_cast<uint16_t>(bits >> 16);
          if ((b & 0x7f80) == 0x7f80) b &= 0x807f;  // inf/NaN -> subnormal
        }
        put<uint16_t>(x.bytes.data(), i, b);
        break;
      }
      case DType::kI32:
        put<int32_t>(x.bytes.data(), i, static_cast<int32_t>(bits >> 16));
        break;
      case DType::kU8:
        put<uint8_t>(x.bytes.data(), i, static_cast<uint8_t>(bits >> 24));
        break;
    }
  }
  return x;
}

Tensor from_bits(DType t, const std::vector<uint64_t>& bits) {
  Tensor x{t, std::vector<uint8_t>(bits.size() * esize(t))};
  for (size_t i = 0; i < bits.size(); ++i) {
    std::memcpy(x.bytes.data() + i * esize(t), &bits[i], esize(t));
  }
  return x;
}

// ---------------------------------------------------------------------------
// Running the kernels.

struct Layout {
  bool in_place = true;  // outputs are the input buffers themselves
  size_t offset = 0;     // elements: 1 misaligns every pointer
  size_t n_outputs = 1;  // out of place only
};

std::string describe(DType t, Op op, size_t count, size_t n, const Layout& l) {
  return std::string(dtype_name(t)) + " " + op_name(op) + " count=" + std::to_string(count) +
         " n=" + std::to_string(n) + (l.in_place ? " in-place" : " out-of-place") +
         " offset=" + std::to_string(l.offset) + " isa=" + isa_name(active_isa()) +
         " stream_threshold=" + std::to_string(streaming_threshold());
}

// Buffers laid out as the kernel sees them: `offset` elements of padding,
// the tensor, then guard bytes. Padding and guards hold one random byte per
// buffer (cheap to check, and a stray write still shows), as does the
// tensor area of out-of-place outputs.
struct Buffers {
  std::vector<std::vector<uint8_t>> in, out;
  std::vector<uint8_t> in_fill, out_fill;
  std::vector<const Tensor*> sources;
  Layout layout;
  size_t count = 0;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
};

Buffers make_buffers(const std::vector<const Tensor*>& inputs, size_t count, const Layout& l,
                     std::mt19937_64& rng) {
  const DType t = inputs[0]->dtype;
  const size_t es = esize(t);
  const size_t total = (l.offset + count) * es + kGuardBytes;
  Buffers b;
  b.sources = inputs;
  b.layout = l;
  b.count = count;
  for (const Tensor* x : inputs) {
    b.in_fill.push_back(static_cast<uint8_t>(rng() | 1));
    b.in.emplace_back(total, b.in_fill.back());
    std::memcpy(b.in.back().data() + l.offset * es, x->bytes.data(), count * es);
    b.in_ptrs.push_back(b.in.back().data() + l.offset * es);
  }
  if (l.in_place) {
    for (auto& v : b.in) b.out_ptrs.push_back(v.data() + l.offset * es);
  } else {
    for (size_t o = 0; o < l.n_outputs; ++o) {
      b.out_fill.push_back(static_cast<uint8_t>(rng() | 1));
      b.out.emplace_back(total, b.out_fill.back());
      b.out_ptrs.push_back(b.out.back().data() + l.offset * es);
    }
  }
  return b;
}

ReduceArgs make_args(const Buffers& b, DType t, Op op, const double* weights) {
  ReduceArgs a;
  a.inputs = b.in_ptrs.data();
  a.n_inputs = b.in_ptrs.size();
  a.outputs = b.out_ptrs.data();
  a.n_outputs = b.out_ptrs.size();
  a.weights = weights;
  a.count = b.count;
  a.dtype = t;
  a.op = op;
  return a;
}

bool all_bytes(const uint8_t* p, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

// Each output equals `expected`; padding and guards are untouched, and out
// of place, so are the inputs.
void check_buffers(const Buffers& b, const Tensor& expected, const std::string& what) {
  const DType t = expected.dtype;
  const size_t es = esize(t);
  const Layout& l = b.layout;
  const size_t count = b.count;
  const size_t tensor_end = (l.offset + count) * es;
  const auto& outs = l.in_place ? b.in : b.out;
  const auto& fills = l.in_place ? b.in_fill : b.out_fill;
  for (size_t o = 0; o < outs.size(); ++o) {
    const uint8_t* got = outs[o].data() + l.offset * es;
    for (size_t i = 0; i < count; ++i) {
      if (!same_element(t, got, expected.bytes.data(), i)) {
        ADD_FAILURE() << what << ": output " << o << " element " << i << " is "
                      << hex_element(t, got, i) << ", expected "
                      << hex_element(t, expected.bytes.data(), i);
        return;
      }
    }
    if (!all_bytes(outs[o].data(), l.offset * es, fills[o]) ||
        !all_bytes(outs[o].data() + tensor_end, kGuardBytes, fills[o])) {
      ADD_FAILURE() << what << ": output " << o << " written outside the tensor";
      return;
    }
  }
  if (!l.in_place) {
    for (size_t r = 0; r < b.in.size(); ++r) {
      if (std::memcmp(b.in[r].data() + l.offset * es, b.sources[r]->bytes.data(), count * es) !=
              0 ||
          !all_bytes(b.in[r].data(), l.offset * es, b.in_fill[r]) ||
          !all_bytes(b.in[r].data() + tensor_end, kGuardBytes, b.in_fill[r])) {
        ADD_FAILURE() << what << ": input " << r << " changed out of place";
        return;
      }
    }
  }
}

// One reduce over freshly laid-out buffers, checked against `expected`.
void run_and_check(const std::vector<const Tensor*>& inputs, Op op, size_t count,
                   const double* weights, const Layout& l, const Tensor& expected,
                   std::mt19937_64& rng) {
  const DType t = inputs[0]->dtype;
  const Buffers b = make_buffers(inputs, count, l, rng);
  reduce(make_args(b, t, op, weights));
  check_buffers(b, expected, describe(t, op, count, inputs.size(), l));
}

// Restores the ISA and streaming threshold the process started with.
class KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_isa_ = active_isa();
    saved_threshold_ = streaming_threshold();
  }
  void TearDown() override {
    force_isa(saved_isa_);
    set_streaming_threshold(saved_threshold_);
  }
  // Runs fn once per ISA this CPU has.
  template <class Fn>
  void for_each_isa(Fn fn) {
    for (Isa isa : kAllIsas) {
      if (!isa_available(isa)) continue;
      force_isa(isa);
      ASSERT_EQ(active_isa(), isa);
      fn(isa);
    }
  }

 private:
  Isa saved_isa_ = Isa::kScalar;
  size_t saved_threshold_ = 0;
};

// ---------------------------------------------------------------------------
// Every dtype x op x ISA against the reference.

class KernelMatrixTest : public KernelTest,
                         public ::testing::WithParamInterface<std::tuple<DType, Op>> {};

TEST_P(KernelMatrixTest, SmallCountsEveryLayout) {
  const auto [t, op] = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 131 + static_cast<uint64_t>(op));
  std::vector<Tensor> pool;
  for (size_t r = 0; r < kMaxInputs; ++r) pool.push_back(random_tensor(t, 4097, rng));
  // Not exact in float, so that computing w_r in float instead of double shows.
  const double weights[kMaxInputs] = {0.1, 0.7, 1.3, 0.3, 2.9, 0.01, 1.7, 0.9};

  for (size_t count : kSmallCounts) {
    for (size_t n = 1; n <= kMaxInputs; ++n) {
      std::vector<const Tensor*> in;
      std::vector<const uint8_t*> in_bytes;
      for (size_t r = 0; r < n; ++r) {
        in.push_back(&pool[r]);
        in_bytes.push_back(pool[r].bytes.data());
      }
      const Tensor expected = ref_reduce(t, op, in_bytes, count, weights);
      for_each_isa([&](Isa) {
        for (size_t threshold : {SIZE_MAX, size_t{0}}) {
          set_streaming_threshold(threshold);
          for (bool in_place : {true, false}) {
            for (size_t offset : {0, 1}) {
              const Layout l{in_place, offset, 1 + n % 3};
              run_and_check(in, op, count, weights, l, expected, rng);
              if (HasFailure()) return;
            }
          }
        }
      });
      if (HasFailure()) return;
    }
  }
}

TEST_P(KernelMatrixTest, LargeOddCount) {
  const auto [t, op] = GetParam();
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(t) * 131 + static_cast<uint64_t>(op));
  std::vector<Tensor> pool;
  for (size_t r = 0; r < 5; ++r) pool.push_back(random_tensor(t, kLargeCount, rng));
  const double weights[5] = {0.1, 2.0, 0.7, 4.0, 1.0 / 3};
  // Five inputs: a full pass of four, then a pass of one.
  std::vector<const Tensor*> in;
  std::vector<const uint8_t*> in_bytes;
  for (const Tensor& x : pool) {
    in.push_back(&x);
    in_bytes.push_back(x.bytes.data());
  }
  const Tensor expected = ref_reduce(t, op, in_bytes, kLargeCount, weights);
  for_each_isa([&](Isa) {
    set_streaming_threshold(SIZE_MAX);
    run_and_check(in, op, kLargeCount, weights, Layout{true, 1, 0}, expected, rng);
    set_streaming_threshold(0);
    run_and_check(in, op, kLargeCount, weights, Layout{false, 0, 2}, expected, rng);
  });
}

// Ranges, as threads split a tensor, give the same bytes as one call.
TEST_P(KernelMatrixTest, RangesEqualWhole) {
  const auto [t, op] = GetParam();
  std::mt19937_64 rng(2000 + static_cast<uint64_t>(t) * 131 + static_cast<uint64_t>(op));
  const size_t count = 10007;
  std::vector<Tensor> pool;
  for (size_t r = 0; r < 3; ++r) pool.push_back(random_tensor(t, count, rng));
  const double weights[3] = {0.3, 2.0, 1.1};
  std::vector<const Tensor*> in = {&pool[0], &pool[1], &pool[2]};
  for_each_isa([&](Isa) {
    for (bool in_place : {true, false}) {
      const Layout l{in_place, 1, 2};
      Buffers whole = make_buffers(in, count, l, rng);
      Buffers split = whole;
      for (size_t r = 0; r < 3; ++r) {
        split.in_ptrs[r] = split.in[r].data() + l.offset * esize(t);
      }
      for (size_t o = 0; o < split.out_ptrs.size(); ++o) {
        split.out_ptrs[o] = (in_place ? split.in[o] : split.out[o]).data() + l.offset * esize(t);
      }
      reduce(make_args(whole, t, op, weights));
      const ReduceArgs a = make_args(split, t, op, weights);
      const size_t cuts[] = {0, 1, 17, 4096, 4099, 9000, count};
      for (size_t c = 0; c + 1 < std::size(cuts); ++c) reduce_range(a, cuts[c], cuts[c + 1]);
      EXPECT_EQ(whole.in, split.in) << describe(t, op, count, 3, l);
      EXPECT_EQ(whole.out, split.out) << describe(t, op, count, 3, l);
    }
  });
}

std::vector<std::tuple<DType, Op>> all_supported() {
  std::vector<std::tuple<DType, Op>> v;
  for (DType t : kAllDTypes) {
    for (Op op : kAllOps) {
      if (supported(t, op)) v.emplace_back(t, op);
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllSupported, KernelMatrixTest, ::testing::ValuesIn(all_supported()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  op_name(std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------
// Special values.

// Bit patterns per float dtype.
struct Specials {
  uint64_t nan, inf, minus_inf, one, two;
};

Specials specials(DType t) {
  switch (t) {
    case DType::kF32:
      return {0x7fc00000, 0x7f800000, 0xff800000, 0x3f800000, 0x40000000};
    case DType::kF16:
      return {0x7e00, 0x7c00, 0xfc00, 0x3c00, 0x4000};
    case DType::kBF16:
      return {0x7fc0, 0x7f80, 0xff80, 0x3f80, 0x4000};
    case DType::kF64:
      return {0x7ff8000000000000, 0x7ff0000000000000, 0xfff0000000000000, 0x3ff0000000000000,
              0x4000000000000000};
    default:
      return {};
  }
}

TEST_F(KernelTest, NanAndInfPropagate) {
  std::mt19937_64 rng(7);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const Specials s = specials(t);
    // Per element, the three inputs; each pattern repeats across vector lanes
    // and the tail (count 37).
    const std::vector<std::array<uint64_t, 3>> patterns = {
        {s.nan, s.one, s.two},       {s.one, s.nan, s.two}, {s.one, s.two, s.nan},
        {s.inf, s.minus_inf, s.one}, {s.inf, s.one, s.two}, {s.minus_inf, s.two, s.one},
        {s.one, s.minus_inf, s.nan}, {s.two, s.one, s.inf},
    };
    const size_t count = 37;
    std::vector<uint64_t> cols[3];
    for (size_t i = 0; i < count; ++i) {
      for (size_t r = 0; r < 3; ++r) cols[r].push_back(patterns[i % patterns.size()][r]);
    }
    const Tensor a = from_bits(t, cols[0]), b = from_bits(t, cols[1]), c = from_bits(t, cols[2]);
    const std::vector<const Tensor*> in = {&a, &b, &c};
    const std::vector<const uint8_t*> in_bytes = {a.bytes.data(), b.bytes.data(), c.bytes.data()};
    for (Op op : {Op::kSum, Op::kAvg, Op::kMin, Op::kMax}) {
      const Tensor expected = ref_reduce(t, op, in_bytes, count, nullptr);
      // The reference itself, checked by hand on the patterns.
      for (size_t i = 0; i < count; ++i) {
        const size_t p = i % patterns.size();
        const double v = load_as_double(t, expected.bytes.data(), i);
        const bool sum_like = op == Op::kSum || op == Op::kAvg;
        double want = 1.0;  // 1.0: a finite value, not checked by hand
        if (p <= 2 || p == 6 || (p == 3 && sum_like)) {
          want = NAN;
        } else if ((p == 3 && op == Op::kMin) || (p == 5 && op != Op::kMax)) {
          want = -INFINITY;
        } else if ((p == 3 && op == Op::kMax) || ((p == 4 || p == 7) && op != Op::kMin)) {
          want = INFINITY;
        }
        const std::string where =
            std::string(dtype_name(t)) + " " + op_name(op) + " " + std::to_string(i);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(v)) << where;
        } else if (std::isinf(want)) {
          EXPECT_EQ(v, want) << where;
        }
      }
      for_each_isa([&](Isa) {
        for (size_t offset : {0, 1}) {
          run_and_check(in, op, count, nullptr, Layout{true, offset, 0}, expected, rng);
        }
      });
    }
  }
}

// Min/max ties keep the value folded first: min(-0, +0) = -0, min(+0, -0) = +0.
TEST_F(KernelTest, SignedZeroTiesKeepFirst) {
  std::mt19937_64 rng(8);
  const Tensor neg = from_bits(DType::kF32, std::vector<uint64_t>(19, 0x80000000));
  const Tensor pos = from_bits(DType::kF32, std::vector<uint64_t>(19, 0x00000000));
  for_each_isa([&](Isa) {
    for (Op op : {Op::kMin, Op::kMax}) {
      run_and_check({&neg, &pos}, op, 19, nullptr, Layout{}, neg, rng);
      run_and_check({&pos, &neg}, op, 19, nullptr, Layout{}, pos, rng);
    }
  });
}

// ---------------------------------------------------------------------------
// Rounding on store, with results written out by hand.

struct RoundingCase {
  const char* what;
  Op op;
  uint16_t a, b;  // two inputs
  uint16_t expected;
};

void check_rounding(DType t, const std::vector<RoundingCase>& cases) {
  std::mt19937_64 rng(9);
  for (const RoundingCase& c : cases) {
    // 33 copies: every vector lane and a tail.
    const Tensor a = from_bits(t, std::vector<uint64_t>(33, c.a));
    const Tensor b = from_bits(t, std::vector<uint64_t>(33, c.b));
    const Tensor expected = from_bits(t, std::vector<uint64_t>(33, c.expected));
    // The reference agrees with the hand-written result...
    const Tensor ref = ref_reduce(t, c.op, {a.bytes.data(), b.bytes.data()}, 33, nullptr);
    EXPECT_EQ(get<uint16_t>(ref.bytes.data(), 0), c.expected) << dtype_name(t) << " " << c.what;
    // ...and so does every ISA.
    for (Isa isa : kAllIsas) {
      if (!isa_available(isa)) continue;
      force_isa(isa);
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.what);
      run_and_check({&a, &b}, c.op, 33, nullptr, Layout{}, expected, rng);
    }
  }
}

TEST_F(KernelTest, Fp16RoundsToNearestEven) {
  check_rounding(DType::kF16, {
                                  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1.
                                  {"tie to even (down)", Op::kSum, 0x3c00, 0x1000, 0x3c00},
                                  // (1 + 2^-10) + 2^-11: halfway, even is 1 + 2^-9.
                                  {"tie to even (up)", Op::kSum, 0x3c01, 0x1000, 0x3c02},
                                  // 1 + 2^-11 + 2^-12 is past halfway.
                                  {"above halfway", Op::kSum, 0x3c00, 0x1200, 0x3c01},
                                  // 65504 + 16 = 65520: halfway to 65536, odd mantissa: inf.
                                  {"overflow at halfway", Op::kSum, 0x7bff, 0x4c00, 0x7c00},
                                  // 65504 + 8 = 65512 rounds back to 65504.
                                  {"no overflow below halfway", Op::kSum, 0x7bff, 0x4800, 0x7bff},
                                  {"negative overflow", Op::kSum, 0xfbff, 0xfbff, 0xfc00},
                                  // Subnormals: 2^-24 + 2^-24, then largest subnormal + 2^-24.
                                  {"subnormal sum", Op::kSum, 0x0001, 0x0001, 0x0002},
                                  {"subnormal to normal", Op::kSum, 0x03ff, 0x0001, 0x0400},
                                  // 2^-25 (avg of 2^-24 and 0) ties to even: 0.
                                  {"subnormal tie to zero", Op::kAvg, 0x0001, 0x0000, 0x0000},
                                  // 1.5 * 2^-24 ties to even: 2 * 2^-24.
                                  {"subnormal tie up", Op::kAvg, 0x0003, 0x0000, 0x0002},
                                  {"negative subnormal tie", Op::kAvg, 0x8003, 0x8000, 0x8002},
                                  // 2.5 * 2^-24 ties to even: 2 * 2^-24.
                                  {"subnormal tie down", Op::kAvg, 0x0005, 0x0000, 0x0002},
                                  {"min keeps subnormal", Op::kMin, 0x0001, 0x0002, 0x0001},
                              });
}

TEST_F(KernelTest, Bf16RoundsToNearestEven) {
  check_rounding(DType::kBF16, {
                                   // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even is 1.
                                   {"tie to even (down)", Op::kSum, 0x3f80, 0x3b80, 0x3f80},
                                   // (1 + 2^-7) + 2^-8: halfway, even is 1 + 2^-6.
                                   {"tie to even (up)", Op::kSum, 0x3f81, 0x3b80, 0x3f82},
                                   {"above halfway", Op::kSum, 0x3f80, 0x3bc0, 0x3f81},
                                   // Largest bf16 + 2^119 is halfway to 2^128, odd mantissa: inf.
                                   {"overflow at halfway", Op::kSum, 0x7f7f, 0x7b00, 0x7f80},
                                   {"no overflow below halfway", Op::kSum, 0x7f7f, 0x7a80, 0x7f7f},
                                   {"negative overflow", Op::kSum, 0xff7f, 0xff7f, 0xff80},
                                   {"subnormal sum", Op::kSum, 0x0001, 0x0001, 0x0002},
                                   // 2^-134 (avg of 2^-133 and 0) ties to even: 0.
                                   {"subnormal tie to zero", Op::kAvg, 0x0001, 0x0000, 0x0000},
                                   {"subnormal tie up", Op::kAvg, 0x0003, 0x0000, 0x0002},
                                   {"negative subnormal tie", Op::kAvg, 0x8003, 0x8000, 0x8002},
                               });
}

// ---------------------------------------------------------------------------
// Integers and weights.

TEST_F(KernelTest, Int32Wraps) {
  std::mt19937_64 rng(10);
  const auto i32 = [](std::vector<int32_t> v) {
    std::vector<uint64_t> bits;
    for (int32_t x : v) bits.push_back(static_cast<uint32_t>(x));
    return from_bits(DType::kI32, bits);
  };
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  // Repeated to 17 elements: a vector and a tail on every ISA.
  const auto rep = [](std::vector<int32_t> v) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < 17; ++i) out.push_back(v[i % v.size()]);
    return out;
  };
  const Tensor a = i32(rep({kMax, kMin, -7, 7, kMax, -1}));
  const Tensor b = i32(rep({1, -1, 0, 0, kMax, 0}));
  const Tensor sum = i32(rep({kMin, kMax, -7, 7, -2, -1}));
  // Truncating division of the wrapped sum: -7 / 2 = -3, not -4.
  const Tensor avg = i32(rep({kMin / 2, kMax / 2, -3, 3, -1, 0}));
  for_each_isa([&](Isa) {
    run_and_check({&a, &b}, Op::kSum, 17, nullptr, Layout{}, sum, rng);
    run_and_check({&a, &b}, Op::kAvg, 17, nullptr, Layout{}, avg, rng);
  });
}

TEST_F(KernelTest, WeightedAverage) {
  std::mt19937_64 rng(11);
  // w = {0.25, 0.75}: 2 * 0.25 + 6 * 0.75 = 5, exact in every float type.
  const double weights[] = {1.0, 3.0};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const uint64_t two = specials(t).two;
    uint64_t six = 0, five = 0;
    switch (t) {
      case DType::kF32:
        six = 0x40c00000, five = 0x40a00000;
        break;
      case DType::kF16:
        six = 0x4600, five = 0x4500;
        break;
      case DType::kBF16:
        six = 0x40c0, five = 0x40a0;
        break;
      default:
        six = 0x4018000000000000, five = 0x4014000000000000;
        break;
    }
    const Tensor a = from_bits(t, std::vector<uint64_t>(21, two));
    const Tensor b = from_bits(t, std::vector<uint64_t>(21, six));
    const Tensor expected = from_bits(t, std::vector<uint64_t>(21, five));
    for_each_isa([&](Isa) {
      run_and_check({&a, &b}, Op::kWeightedAvg, 21, weights, Layout{}, expected, rng);
    });
  }
}

// The multi-host fields: a divisor other than n, weights used as given, and a
// scale applied to the result. Values chosen exact in fp32 and fp16.
TEST_F(KernelTest, DivisorRawWeightsAndScale) {
  const size_t n = 5003;  // several blocks and a vector tail
  std::vector<float> a(n, 6.0f), b(n, 2.0f), out(n);
  const void* in[] = {a.data(), b.data()};
  void* outs[] = {out.data()};
  for_each_isa([&](Isa isa) {
    ReduceArgs args;
    args.inputs = in;
    args.n_inputs = 2;
    args.outputs = outs;
    args.n_outputs = 1;
    args.count = n;
    args.op = Op::kAvg;
    args.divisor = 4;  // (6 + 2) / 4
    reduce(args);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], 2.0f) << isa_name(isa) << " i=" << i;
    const double raw[] = {0.5, 2.0};  // 6 * 0.5 + 2 * 2 = 7, not normalized
    args.op = Op::kWeightedAvg;
    args.divisor = 0;
    args.weights = raw;
    args.normalize_weights = false;
    reduce(args);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], 7.0f) << isa_name(isa) << " i=" << i;
    args.op = Op::kSum;
    args.n_inputs = 1;  // a plain copy, scaled: 6 * 0.25
    args.scale = 0.25;
    reduce(args);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], 1.5f) << isa_name(isa) << " i=" << i;
  });
  // fp16: the scale is applied before the single rounding.
  std::vector<_Float16> h(n, static_cast<_Float16>(3.0f)), hout(n);
  const void* hin[] = {h.data()};
  void* houts[] = {hout.data()};
  for_each_isa([&](Isa isa) {
    ReduceArgs args;
    args.inputs = hin;
    args.n_inputs = 1;
    args.outputs = houts;
    args.n_outputs = 1;
    args.count = n;
    args.dtype = DType::kF16;
    args.op = Op::kAvg;
    args.divisor = 2;
    args.scale = 0.5;  // 3 / 2 * 0.5 = 0.75
    reduce(args);
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(static_cast<float>(hout[i]), 0.75f) << isa_name(isa) << " i=" << i;
  });
}

// ---------------------------------------------------------------------------
// The API around the kernels.

TEST(ReduceApiTest, SupportedCombinations) {
  for (DType t : kAllDTypes) {
    for (Op op : kAllOps) {
      const bool bytes_ok = op == Op::kSum || op == Op::kMin || op == Op::kMax;
      const bool want = t == DType::kU8 ? bytes_ok : !(t == DType::kI32 && op == Op::kWeightedAvg);
      EXPECT_EQ(supported(t, op), want) << dtype_name(t) << " " << op_name(op);
    }
  }
  EXPECT_FALSE(supported(DType::kI32, Op::kWeightedAvg));
  EXPECT_FALSE(supported(DType::kU8, Op::kAvg));
  EXPECT_FALSE(supported(static_cast<DType>(200), Op::kSum));
  EXPECT_FALSE(supported(DType::kF32, static_cast<Op>(200)));
}

TEST(ReduceApiTest, DtypeSizes) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
}

TEST_F(KernelTest, IsasAndForcing) {
  EXPECT_TRUE(isa_available(Isa::kScalar));
  EXPECT_TRUE(isa_available(active_isa()));
  std::string have;
  for (Isa isa : kAllIsas) {
    EXPECT_STRNE(isa_name(isa), "unknown");
    if (isa_available(isa)) have += std::string(" ") + isa_name(isa);
  }
  // Shown in the test log, so a run on a CPU without AVX-512 is visible.
  RecordProperty("isas", have);
  std::printf("kernels tested on:%s (picked: %s)\n", have.c_str(), isa_name(active_isa()));
  force_isa(Isa::kScalar);
  EXPECT_EQ(active_isa(), Isa::kScalar);
}

// Nothing to do means nothing is written.
TEST_F(KernelTest, EmptyAndInvalidCallsWriteNothing) {
  std::vector<float> in(8, 1.0f), out(8, 7.0f);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  ReduceArgs a;
  a.inputs = ins;
  a.n_inputs = 1;
  a.outputs = outs;
  a.n_outputs = 1;
  a.count = 8;
  for_each_isa([&](Isa) {
    a.n_inputs = 0;
    reduce(a);
    a.n_inputs = 1;
    reduce_range(a, 5, 5);
    reduce_range(a, 9, 20);   // past count
    a.op = Op::kWeightedAvg;  // without weights
    reduce(a);
    a.op = Op::kSum;
    a.dtype = DType::kI32;
    a.op = Op::kWeightedAvg;
    a.weights = nullptr;
    reduce(a);
    a.dtype = DType::kF32;
    a.op = Op::kSum;
    EXPECT_EQ(out, std::vector<float>(8, 7.0f));
  });
}

// Two threads on disjoint ranges of one in-place tensor.
TEST_F(KernelTest, ThreadsOnDisjointRanges) {
  std::mt19937_64 rng(12);
  const size_t count = kLargeCount;
  std::vector<Tensor> pool;
  for (size_t r = 0; r < 4; ++r) pool.push_back(random_tensor(DType::kF32, count, rng));
  std::vector<const Tensor*> in;
  std::vector<const uint8_t*> in_bytes;
  for (const Tensor& x : pool) {
    in.push_back(&x);
    in_bytes.push_back(x.bytes.data());
  }
  const Tensor expected = ref_reduce(DType::kF32, Op::kSum, in_bytes, count, nullptr);
  for_each_isa([&](Isa) {
    const Layout l{true, 0, 0};
    const Buffers b = make_buffers(in, count, l, rng);
    const ReduceArgs a = make_args(b, DType::kF32, Op::kSum, nullptr);
    std::thread t1([&] { reduce_range(a, 0, count / 2 + 5); });
    std::thread t2([&] { reduce_range(a, count / 2 + 5, count); });
    t1.join();
    t2.join();
    check_buffers(b, expected, "two threads");
  });
}

}  // namespace
}  // namespace gsync::reduce
