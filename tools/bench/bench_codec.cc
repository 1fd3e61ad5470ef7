// SPDX-License-Identifier: Apache-2.0
//
// Codec throughput (daemon/reduce/codec.h) next to the machine's own limits,
// measured in the same run: a single-thread memcpy and the reduction
// kernel's a += b. Not a test (the numbers depend on the machine and its
// neighbours); docs/compression.md quotes its output.
//
//   bench_codec [--passes N] [--isa scalar|avx2|avx512|all] [KiB ...]
//
// GB/s counts the fp32 tensor's bytes (4 * count) per second, whatever the
// operation moves: for memcpy the bytes copied, for a += b the bytes of b,
// for encode the values encoded, for decode_add the values added to dst, for
// int8_sum the values of the result. So every row reads as "how fast a
// tensor of this size goes through", and the ratios compare like with like.
// Rows: encode (no residual), encode+ef (with error feedback: the residual
// read and written too), decode_add, enc+dec and ef+dec (encode, or
// encode+ef, then decode_add: the time a step spends in the codec per byte
// of gradient, from the two medians), and int8_sum of 2 and 4 encodings.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/reduce.h"

namespace {

namespace r = gsync::reduce;
using r::Codec;
using r::CodecParams;
using r::Isa;

struct Options {
  int passes = 7;
  bool all_isas = false;
  Isa isa = r::active_isa();
  std::vector<size_t> kib = {256, 64 << 10};
};

// Median time of one call of fn, in seconds: `passes` samples after a
// warm-up call. A sample of a small tensor times enough calls to cover
// 8 MiB, so that each lasts well above the clock's and the scheduler's
// noise.
double median_seconds(const Options& o, size_t bytes, const std::function<void()>& fn) {
  const size_t calls = std::max<size_t>(1, (size_t{8} << 20) / bytes);
  fn();
  std::vector<double> t;
  for (int i = 0; i < o.passes; ++i) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t c = 0; c < calls; ++c) fn();
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    t.push_back(d.count() / static_cast<double>(calls));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Page-aligned and touched once, so that page faults stay out of the timings.
template <class T>
struct Buffer {
  explicit Buffer(size_t n)
      : p(static_cast<T*>(std::aligned_alloc(4096, (n * sizeof(T) + 4095) / 4096 * 4096))),
        count(n) {
    std::memset(static_cast<void*>(p), 0, n * sizeof(T));
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* p;
  size_t count;
};

// Gradient-like values: roughly gaussian (a sum of four uniforms) times
// sigma, from a fixed xorshift seed. Cheap enough for 64 MiB.
void fill(float* x, size_t n, float sigma, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int k = 0; k < 4; ++k) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      sum += static_cast<float>(s >> 40) * 0x1p-24f - 0.5f;
    }
    x[i] = sum * 1.7320508f * sigma;  // sd of the sum of 4 U(-0.5, 0.5) is 1/sqrt(3)
  }
}

struct Row {
  size_t bytes;
  const char* what;
  const char* op;
  double seconds;
  double wire_ratio;  // encoded bytes / fp32 bytes; < 0: not an encoding
};

struct Refs {
  double memcpy_gbs;
  double add_gbs;
};

void print(const Row& row, const Refs& refs) {
  const double gbs = static_cast<double>(row.bytes) / row.seconds / 1e9;
  char wire[16] = "-";
  if (row.wire_ratio >= 0) std::snprintf(wire, sizeof wire, "%.3f", row.wire_ratio);
  std::printf("%10zu %8s %10s %10.3f %8.2f %9.0f%% %8.0f%% %7s\n", row.bytes, row.what, row.op,
              row.seconds * 1e3, gbs, 100.0 * gbs / refs.memcpy_gbs, 100.0 * gbs / refs.add_gbs,
              wire);
}

// memcpy and the reduction kernel's in-place a += b (2 inputs, 1 output:
// the decode_add of a dense32 encoding does the same work), on the active
// ISA.
Refs references(const Options& o, size_t count) {
  const size_t bytes = 4 * count;
  Buffer<float> a(count), b(count);
  fill(a.p, count, 1.0f, 1);
  fill(b.p, count, 1e-6f, 2);
  const double t_copy = median_seconds(o, bytes, [&] { std::memcpy(b.p, a.p, bytes); });
  fill(b.p, count, 1e-6f, 2);
  const void* ins[] = {a.p, b.p};
  void* outs[] = {a.p};
  r::ReduceArgs args;
  args.inputs = ins;
  args.n_inputs = 2;
  args.outputs = outs;
  args.n_outputs = 1;
  args.count = count;
  const double t_add = median_seconds(o, bytes, [&] { r::reduce(args); });
  const Refs refs{bytes / t_copy / 1e9, bytes / t_add / 1e9};
  print({bytes, "memcpy", "-", t_copy, -1}, refs);
  print({bytes, "a+=b", "reduce", t_add, -1}, refs);
  return refs;
}

void run_codec(const Options& o, const CodecParams& p, const char* name, size_t count,
               const Refs& refs) {
  const size_t bytes = 4 * count;
  Buffer<float> x(count), res(count), dst(count);
  Buffer<uint8_t> out(r::max_encoded_bytes(p, count));
  fill(x.p, count, 1.0f, 3);
  size_t len = 0;
  const double t_enc = median_seconds(
      o, bytes, [&] { len = r::encode(p, x.p, nullptr, count, nullptr, false, out.p); });
  const double wire = static_cast<double>(len) / static_cast<double>(bytes);
  print({bytes, name, "encode", t_enc, wire}, refs);
  const double t_ef = median_seconds(
      o, bytes, [&] { len = r::encode(p, x.p, res.p, count, nullptr, false, out.p); });
  print({bytes, name, "encode+ef", t_ef, static_cast<double>(len) / bytes}, refs);
  std::string why;
  const double t_dec =
      median_seconds(o, bytes, [&] { why = r::decode_add(out.p, len, count, dst.p); });
  if (!why.empty()) std::fprintf(stderr, "%s decode_add: %s\n", name, why.c_str());
  print({bytes, name, "decode_add", t_dec, -1}, refs);
  print({bytes, name, "enc+dec", t_enc + t_dec, -1}, refs);
  print({bytes, name, "ef+dec", t_ef + t_dec, -1}, refs);
}

// k hosts' int8 encodings on one grid (the max of their block maxima),
// summed without decoding.
void run_int8_sum(const Options& o, size_t k, size_t count, const Refs& refs) {
  const size_t bytes = 4 * count;
  const CodecParams p{Codec::kInt8, 1024};
  const size_t blocks = (count + p.block - 1) / p.block;
  std::vector<float> shared(blocks, 0.0f), mine(blocks);
  std::vector<std::unique_ptr<Buffer<float>>> xs;
  for (size_t j = 0; j < k; ++j) {
    xs.push_back(std::make_unique<Buffer<float>>(count));
    fill(xs[j]->p, count, 1.0f, 10 + j);
    r::block_absmax(p, xs[j]->p, nullptr, count, mine.data());
    for (size_t b = 0; b < blocks; ++b) shared[b] = std::max(shared[b], mine[b]);
  }
  std::vector<std::unique_ptr<Buffer<uint8_t>>> enc;
  std::vector<const uint8_t*> in;
  std::vector<size_t> len;
  for (size_t j = 0; j < k; ++j) {
    enc.push_back(std::make_unique<Buffer<uint8_t>>(r::max_encoded_bytes(p, count)));
    len.push_back(r::encode(p, xs[j]->p, nullptr, count, shared.data(), false, enc[j]->p));
    in.push_back(enc[j]->p);
  }
  xs.clear();
  Buffer<float> dst(count);
  std::string why;
  const double t =
      median_seconds(o, bytes, [&] { why = r::int8_sum(in.data(), len.data(), k, count, dst.p); });
  if (!why.empty()) std::fprintf(stderr, "int8_sum: %s\n", why.c_str());
  char op[16];
  std::snprintf(op, sizeof op, "sum-of-%zu", k);
  print({bytes, "int8", op, t, -1}, refs);
}

void run_size(const Options& o, size_t kib) {
  const size_t count = (kib << 10) / 4;
  const Refs refs = references(o, count);
  const struct {
    CodecParams p;
    const char* name;
  } codecs[] = {{{Codec::kNone}, "none"},
                {{Codec::kF16}, "fp16"},
                {{Codec::kBF16}, "bf16"},
                {{Codec::kInt8, 1024}, "int8"},
                {{Codec::kTopk, 1024, 0.01}, "topk"}};
  for (const auto& c : codecs) run_codec(o, c.p, c.name, count, refs);
  for (size_t k : {2, 4}) run_int8_sum(o, k, count, refs);
}

bool parse(int argc, char** argv, Options* o) {
  std::vector<size_t> kib;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--passes" && has_value) {
      o->passes = std::atoi(argv[++i]);
    } else if (a == "--isa" && has_value) {
      const std::string_view v = argv[++i];
      if (v == "all") {
        o->all_isas = true;
      } else if (v == "scalar" || v == "avx2" || v == "avx512") {
        o->isa = v == "scalar" ? Isa::kScalar : v == "avx2" ? Isa::kAvx2 : Isa::kAvx512;
        if (!r::isa_available(o->isa)) return false;
      } else {
        return false;
      }
    } else if (!a.empty() && a[0] != '-') {
      kib.push_back(std::strtoul(argv[i], nullptr, 10));
    } else {
      return false;
    }
  }
  if (!kib.empty()) o->kib = kib;
  return o->passes >= 1 &&
         std::all_of(o->kib.begin(), o->kib.end(), [](size_t k) { return k > 0; });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr, "usage: %s [--passes N] [--isa scalar|avx2|avx512|all] [KiB ...]\n",
                 argv[0]);
    return 2;
  }
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (o.all_isas ? r::isa_available(isa) : isa == o.isa) isas.push_back(isa);
  }
  std::printf("# gsync codecs: fp32 tensors, int8 blocks of 1024, topk 1%%, median of %d passes\n",
              o.passes);
  std::printf("# GB/s: 4*count/t, the fp32 tensor's bytes per second (one thread)\n");
  for (Isa isa : isas) {
    r::force_isa(isa);
    std::printf("# isa %s\n", r::isa_name(isa));
    std::printf("# %8s %8s %10s %10s %8s %10s %9s %7s\n", "bytes", "codec", "op", "time(ms)",
                "GB/s", "vs-memcpy", "vs-a+=b", "wire");
    for (size_t kib : o.kib) run_size(o, kib);
  }
  return 0;
}
