// SPDX-License-Identifier: Apache-2.0
//
// The GPU reduce kernels against the host kernels, bit for bit, and the
// host-side rules of a launch. Suite 'gpu' (release build).
//
// GpuLaunch and GpuDevices run everywhere: they check the launch's
// arithmetic and that a machine without a GPU (or a build without CUDA)
// gets a clear error. GpuReduce and GpuStream need a GPU and say SKIPPED
// with the reason on a machine without one (tests/skip-allowlist.txt).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "daemon/gpu/device.h"
#include "daemon/gpu/launch.h"
#include "daemon/reduce/half.h"
#include "daemon/reduce/reduce.h"
#include "tests/gpu/kernel_model.h"

namespace gsync::gpu {
namespace {

using reduce::DType;
using reduce::Op;

#define NEED_GPU()                                                \
  do {                                                            \
    if (devices().count == 0) GTEST_SKIP() << devices().why_none; \
  } while (0)

// ---- the launch, on the host ----

reduce::ReduceArgs args_over(std::vector<const void*>& in, std::vector<void*>& out, size_t count,
                             DType t, Op op) {
  reduce::ReduceArgs a;
  a.inputs = in.data();
  a.n_inputs = in.size();
  a.outputs = out.data();
  a.n_outputs = out.size();
  a.count = count;
  a.dtype = t;
  a.op = op;
  return a;
}

TEST(GpuLaunch, TheKernelsTakeTheThreeFloatTypesWithEveryOp) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Op op : {Op::kSum, Op::kAvg, Op::kWeightedAvg, Op::kMin, Op::kMax}) {
      EXPECT_TRUE(supported(t, op));
    }
  }
  EXPECT_FALSE(supported(DType::kF64, Op::kSum));
  EXPECT_FALSE(supported(DType::kI32, Op::kSum));
  alignas(16) float x[4] = {};
  std::vector<const void*> in = {x};
  std::vector<void*> out = {x};
  Launch k;
  Status s = plan_launch(args_over(in, out, 4, DType::kF64, Op::kSum), 4, &k);
  EXPECT_EQ(s.code(), GSYNC_ERR_UNSUPPORTED);
  EXPECT_NE(s.message().find("fp32, fp16 and bf16"), std::string::npos) << s.message();
}

TEST(GpuLaunch, TooManyOrNoInputsIsAnErrorNamingTheCount) {
  alignas(16) float x[4] = {};
  std::vector<const void*> none;
  std::vector<const void*> many(kMaxTensors + 1, x);
  std::vector<void*> out = {x};
  Launch k;
  Status s = plan_launch(args_over(none, out, 4, DType::kF32, Op::kSum), 4, &k);
  EXPECT_EQ(s.code(), GSYNC_ERR_INVALID);
  s = plan_launch(args_over(many, out, 4, DType::kF32, Op::kSum), 4, &k);
  EXPECT_EQ(s.code(), GSYNC_ERR_INVALID);
  EXPECT_NE(s.message().find("not 33 and 1"), std::string::npos) << s.message();
  std::vector<const void*> one = {x};
  s = plan_launch(args_over(one, out, 4, DType::kF32, Op::kWeightedAvg), 4, &k);
  EXPECT_EQ(s.code(), GSYNC_ERR_INVALID) << "a weighted average needs its weights";
}

TEST(GpuLaunch, AlignedTensorsGoSixteenBytesAThreadAndTheTailOneByOne) {
  alignas(16) static uint16_t a[1000], b[1000];
  std::vector<const void*> in = {a, b};
  std::vector<void*> out = {a};
  Launch k;
  ASSERT_TRUE(plan_launch(args_over(in, out, 1000 - 3, DType::kF16, Op::kSum), 132, &k));
  EXPECT_EQ(k.n_vec, (1000u - 3) / 8);  // 8 halves in 16 bytes
  EXPECT_EQ(k.count, 997u);
  EXPECT_EQ(k.n_in, 2);
  EXPECT_EQ(k.n_out, 1);
  EXPECT_EQ(k.in[1], b);
  // One pointer off 16 bytes: every element one by one, still correct.
  std::vector<const void*> off = {a, b + 1};
  ASSERT_TRUE(plan_launch(args_over(off, out, 990, DType::kF16, Op::kSum), 132, &k));
  EXPECT_EQ(k.n_vec, 0u);
  EXPECT_EQ(k.blocks, (990u + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

TEST(GpuLaunch, BlocksFillTheMultiprocessorsAndNoMore) {
  alignas(16) static float a[64];
  std::vector<const void*> in = {a};
  std::vector<void*> out = {a};
  Launch k;
  // 64 Mi fp32 elements: far more work than 132 SMs x 8 blocks; the kernel
  // strides over the rest.
  ASSERT_TRUE(plan_launch(args_over(in, out, size_t{64} << 20, DType::kF32, Op::kSum), 132, &k));
  EXPECT_EQ(k.blocks, 132u * 8);
  ASSERT_TRUE(plan_launch(args_over(in, out, 5, DType::kF32, Op::kSum), 132, &k));
  EXPECT_EQ(k.blocks, 1u);
  ASSERT_TRUE(plan_launch(args_over(in, out, 0, DType::kF32, Op::kSum), 132, &k));
  EXPECT_EQ(k.blocks, 0u) << "no elements: nothing to launch";
  std::vector<void*> no_out;
  ASSERT_TRUE(plan_launch(args_over(in, no_out, 5, DType::kF32, Op::kSum), 132, &k));
  EXPECT_EQ(k.blocks, 0u) << "no outputs: nothing to launch";
}

TEST(GpuLaunch, WeightsDivisorAndScaleAreTheHostKernelsArithmetic) {
  alignas(16) static float a[4], b[4], c[4];
  std::vector<const void*> in = {a, b, c};
  std::vector<void*> out = {a};
  const double w[3] = {1.0, 2.0, 0.1};
  auto args = args_over(in, out, 4, DType::kF32, Op::kWeightedAvg);
  args.weights = w;
  Launch k;
  ASSERT_TRUE(plan_launch(args, 1, &k));
  const double sum = 1.0 + 2.0 + 0.1;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(k.w[r], static_cast<float>(w[r] / sum)) << r;
  args.normalize_weights = false;
  ASSERT_TRUE(plan_launch(args, 1, &k));
  EXPECT_EQ(k.w[2], static_cast<float>(0.1));
  args.op = Op::kAvg;
  ASSERT_TRUE(plan_launch(args, 1, &k));
  EXPECT_EQ(k.divisor, 3.0f) << "kAvg divides by the inputs when no divisor is set";
  EXPECT_FALSE(k.scaled);
  args.divisor = 8;
  args.scale = 0.5;
  ASSERT_TRUE(plan_launch(args, 1, &k));
  EXPECT_EQ(k.divisor, 8.0f);
  EXPECT_TRUE(k.scaled);
  EXPECT_EQ(k.scale, 0.5f);
}

// ---- a machine without a GPU gets a clear error ----

TEST(GpuDevices, TheProbeGivesACountOrSaysWhyNot) {
  const Devices& d = devices();
  if (d.count > 0) {
    EXPECT_TRUE(built_with_cuda());
    EXPECT_TRUE(d.why_none.empty()) << d.why_none;
    return;
  }
  EXPECT_EQ(d.why_none.rfind("no GPU: ", 0), 0u) << d.why_none;
  if (!built_with_cuda()) {
    EXPECT_NE(d.why_none.find("built without CUDA"), std::string::npos);
  }
  // Everything that needs a GPU fails with the same reason, nothing thrown.
  DeviceBuffer buf;
  Status s = DeviceBuffer::allocate(0, 1024, &buf);
  EXPECT_EQ(s.code(), GSYNC_ERR_UNSUPPORTED);
  EXPECT_EQ(s.message(), d.why_none);
  EXPECT_EQ(buf.get(), nullptr);
  std::unique_ptr<Stream> stream;
  s = Stream::create(0, &stream);
  EXPECT_EQ(s.code(), GSYNC_ERR_UNSUPPORTED);
  EXPECT_EQ(stream, nullptr);
  char x = 0, y = 1;
  EXPECT_EQ(copy_sync(&x, &y, 1).code(), GSYNC_ERR_UNSUPPORTED);
}

TEST(GpuDevices, ADeviceThatIsNotThereIsNamed) {
  NEED_GPU();
  std::unique_ptr<Stream> stream;
  Status s = Stream::create(devices().count, &stream);
  EXPECT_EQ(s.code(), GSYNC_ERR_INVALID);
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s.message();
  DeviceBuffer buf;
  EXPECT_EQ(DeviceBuffer::allocate(-1, 16, &buf).code(), GSYNC_ERR_INVALID);
}

// ---- the kernels, on a GPU ----

// Host values of a dtype, from floats.
std::vector<uint8_t> encode(DType t, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * reduce::dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h =
          t == DType::kF16 ? reduce::half::f32_to_f16(v[i]) : reduce::half::f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// One element as fp32 (kernel_model.h: NaNs keep their payloads).
float decode_one(DType t, const uint8_t* p) { return kernel_model::load(t, p); }

// Equal bits, except that two NaNs are equal whatever their payloads: of
// two NaN inputs the host's AVX2 and scalar paths may keep either's payload
// (test_nan_rules.cc); NaNPayloadsOfEveryDtypeAreTheHosts checks the bits.
void expect_same(DType t, const std::vector<uint8_t>& want, const std::vector<uint8_t>& got,
                 const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  const size_t es = reduce::dtype_size(t);
  size_t bad = 0;
  for (size_t i = 0; i < want.size() / es; ++i) {
    const uint8_t* w = want.data() + i * es;
    const uint8_t* g = got.data() + i * es;
    if (std::memcmp(w, g, es) == 0) continue;
    if (std::isnan(decode_one(t, w)) && std::isnan(decode_one(t, g))) continue;
    if (++bad <= 3) {
      ADD_FAILURE() << what << ": element " << i << " want " << decode_one(t, w) << " got "
                    << decode_one(t, g);
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

struct Case {
  DType t;
  Op op;
  size_t n_in;
  size_t count;
  bool in_place;
  size_t misalign;       // elements the tensors start past 16 bytes
  bool also_in = false;  // out of place: the first input is an output too
  uint32_t divisor = 0;
  double scale = 1.0;
  // Values instead of random ones (every input the same list, cycled).
  std::vector<float> values = {};
};

std::string describe(const Case& c) {
  return "dtype " + std::to_string(int(c.t)) + " op " + std::to_string(int(c.op)) + " inputs " +
         std::to_string(c.n_in) + " count " + std::to_string(c.count) +
         (c.in_place  ? " in place"
          : c.also_in ? " out of place and in place"
                      : " out of place") +
         " misalign " + std::to_string(c.misalign) + " divisor " + std::to_string(c.divisor) +
         " scale " + std::to_string(c.scale);
}

// Runs c on the host kernels and on the GPU and compares every output.
void run_case(const Case& c, Stream& stream, std::mt19937& rng) {
  const size_t es = reduce::dtype_size(c.t);
  const size_t bytes = c.count * es;
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<std::vector<uint8_t>> host_in(c.n_in);
  for (auto& h : host_in) {
    std::vector<float> v(c.count);
    for (size_t i = 0; i < c.count; ++i) {
      v[i] = c.values.empty() ? dist(rng) : c.values[i % c.values.size()];
    }
    // Ties of min/max and a sign of zero: the value folded first is kept,
    // +0 first at [1], -0 first at [2].
    const bool first = &h == &host_in[0];
    if (c.values.empty() && c.count > 2) {
      v[1] = first ? 0.0f : -0.0f;
      v[2] = first ? -0.0f : 0.0f;
    }
    h = encode(c.t, v);
  }
  std::vector<double> weights(c.n_in);
  for (size_t r = 0; r < c.n_in; ++r) weights[r] = 0.5 + static_cast<double>(r);

  // Host reference, out of place.
  std::vector<uint8_t> want(bytes);
  std::vector<const void*> hin;
  for (auto& h : host_in) hin.push_back(h.data());
  std::vector<void*> hout = {want.data()};
  reduce::ReduceArgs ha;
  ha.inputs = hin.data();
  ha.n_inputs = c.n_in;
  ha.outputs = hout.data();
  ha.n_outputs = 1;
  ha.weights = weights.data();
  ha.count = c.count;
  ha.dtype = c.t;
  ha.op = c.op;
  ha.divisor = c.divisor;
  ha.scale = c.scale;
  reduce::reduce(ha);

  // The same on the GPU: one allocation per input (misaligned on purpose
  // when asked), outputs the inputs themselves or one of their own.
  const size_t pad = c.misalign * es;
  std::vector<DeviceBuffer> dbuf(c.n_in);
  std::vector<const void*> din;
  std::vector<void*> dout;
  for (size_t r = 0; r < c.n_in; ++r) {
    ASSERT_TRUE(DeviceBuffer::allocate(stream.device(), bytes + pad, &dbuf[r]));
    uint8_t* p = static_cast<uint8_t*>(dbuf[r].get()) + pad;
    ASSERT_TRUE(copy_sync(p, host_in[r].data(), bytes));
    din.push_back(p);
    if (c.in_place) dout.push_back(p);
  }
  DeviceBuffer extra;
  if (!c.in_place) {
    ASSERT_TRUE(DeviceBuffer::allocate(stream.device(), bytes + pad, &extra));
    dout.push_back(static_cast<uint8_t*>(extra.get()) + pad);
    if (c.also_in) dout.push_back(const_cast<void*>(din[0]));
  }
  reduce::ReduceArgs da = ha;
  da.inputs = din.data();
  da.outputs = dout.data();
  da.n_outputs = dout.size();
  ASSERT_TRUE(stream.reduce(da));
  ASSERT_TRUE(stream.synchronize());
  for (size_t o = 0; o < dout.size(); ++o) {
    std::vector<uint8_t> got(bytes);
    ASSERT_TRUE(copy_sync(got.data(), dout[o], bytes));
    expect_same(c.t, want, got, describe(c) + " output " + std::to_string(o));
  }
}

class GpuReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    NEED_GPU();
    ASSERT_TRUE(Stream::create(0, &stream_));
  }
  std::unique_ptr<Stream> stream_;
  std::mt19937 rng_{20261206};
};

TEST_F(GpuReduce, EveryDtypeAndOpGivesTheHostKernelsBits) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Op op : {Op::kSum, Op::kAvg, Op::kWeightedAvg, Op::kMin, Op::kMax}) {
      for (size_t n_in : {1, 2, 3, 4}) {
        for (size_t count :
             {size_t{0}, size_t{1}, size_t{7}, size_t{9}, size_t{4097}, (size_t{1} << 20) + 3}) {
          run_case({t, op, n_in, count, true, 0}, *stream_, rng_);
          run_case({t, op, n_in, count, false, 1}, *stream_, rng_);
          // Aligned, into a buffer of its own and into the first input.
          run_case({t, op, n_in, count, false, 0, true}, *stream_, rng_);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_F(GpuReduce, TheMultiHostDivisorAndScaleAsOnTheHost) {
  // The store of a multi-host average divides by the world, not by the
  // local inputs, and a weighted average's store scales by 1 / the sum of
  // all weights (daemon/pipeline/local_stages.h).
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (Op op : {Op::kAvg, Op::kSum, Op::kMax}) {
      run_case({t, op, 3, 4097, true, 0, false, 8, 0.25}, *stream_, rng_);
      run_case({t, op, 2, 1000, false, 1, false, 3, 1.0 / 3.0}, *stream_, rng_);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(GpuReduce, RoundingAtTheEdgesOfFp16AndBf16AsOnTheHost) {
  // Sums that land on fp16's largest value, its rounding edge to infinity
  // (65520), its subnormals and below them, and past bf16's largest.
  const std::vector<float> edges = {65504.0f / 2,   65519.0f / 2,  65520.0f / 2,  65536.0f / 2,
                                    0x1p-24f / 2,   0x1p-25f,      0x3p-26f,      0x1p-14f / 2,
                                    3.3895e38f / 2, 3.4e38f / 2,   -65520.0f / 2, 1.0f + 0x1p-11f,
                                    1.0f + 0x1p-8f, -0x1p-24f / 2, 0.0f,          1.0f};
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (Op op : {Op::kSum, Op::kAvg, Op::kWeightedAvg}) {
      Case c{t, op, 2, edges.size() * 4 + 3, true, 0};
      c.values = edges;
      run_case(c, *stream_, rng_);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(GpuReduce, TensorsUpTo256MiB) {
  for (size_t mib : {16, 64, 256}) {
    run_case({DType::kF32, Op::kSum, 2, (mib << 20) / 4, true, 0}, *stream_, rng_);
    if (HasFatalFailure()) return;
  }
  run_case({DType::kBF16, Op::kAvg, 4, (size_t{64} << 20) / 2, true, 0}, *stream_, rng_);
}

TEST_F(GpuReduce, NaNsGoThroughMinAndMaxAsOnTheHost) {
  for (Op op : {Op::kMin, Op::kMax}) {
    const std::vector<float> a = {1.0f, NAN, 3.0f, -0.0f};
    const std::vector<float> b = {NAN, 2.0f, -3.0f, 0.0f};
    std::vector<uint8_t> ha = encode(DType::kF32, a), hb = encode(DType::kF32, b);
    std::vector<uint8_t> want(16);
    std::vector<const void*> hin = {ha.data(), hb.data()};
    std::vector<void*> hout = {want.data()};
    reduce::ReduceArgs args = args_over(hin, hout, 4, DType::kF32, op);
    reduce::reduce(args);
    DeviceBuffer da, db;
    ASSERT_TRUE(DeviceBuffer::allocate(0, 16, &da));
    ASSERT_TRUE(DeviceBuffer::allocate(0, 16, &db));
    ASSERT_TRUE(copy_sync(da.get(), ha.data(), 16));
    ASSERT_TRUE(copy_sync(db.get(), hb.data(), 16));
    std::vector<const void*> din = {da.get(), db.get()};
    std::vector<void*> dout = {da.get()};
    args.inputs = din.data();
    args.outputs = dout.data();
    ASSERT_TRUE(stream_->reduce(args));
    ASSERT_TRUE(stream_->synchronize());
    std::vector<uint8_t> got(16);
    ASSERT_TRUE(copy_sync(got.data(), da.get(), 16));
    // min and max pass a NaN input through as it is (its own bits), and -0
    // against +0 keeps the first.
    EXPECT_EQ(std::memcmp(want.data(), got.data(), 16), 0) << "op " << int(op);
  }
}

TEST_F(GpuReduce, NaNPayloadsOfEveryDtypeAreTheHosts) {
  // Every pair and triple of NaNs (quiet and signalling, either sign,
  // payloads such as the anomaly guard's rank marks), infinities and
  // numbers, through every op: the kernel gives the bits the model of it
  // gives (kernel_model.h), which test_nan_rules holds to the host
  // kernels. A GPU that canonicalises NaNs in its arithmetic or its fp16
  // and bf16 conversions, unmended, fails here.
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const size_t es = reduce::dtype_size(t);
    for (size_t n_in : {2u, 3u}) {
      std::vector<std::vector<uint8_t>> ins = kernel_model::combinations(t, n_in);
      const size_t count = ins[0].size() / es;
      std::vector<DeviceBuffer> dev(n_in + 1);
      std::vector<const void*> din;
      for (size_t r = 0; r < n_in; r++) {
        ASSERT_TRUE(DeviceBuffer::allocate(0, count * es, &dev[r]));
        ASSERT_TRUE(copy_sync(dev[r].get(), ins[r].data(), count * es));
        din.push_back(dev[r].get());
      }
      ASSERT_TRUE(DeviceBuffer::allocate(0, count * es, &dev[n_in]));
      std::vector<void*> dout = {dev[n_in].get()};
      const std::vector<double> weights = {0.5, 0.25, 2.0};
      for (Op op : {Op::kSum, Op::kAvg, Op::kWeightedAvg, Op::kMin, Op::kMax}) {
        for (double scale : {1.0, 0.5}) {
          reduce::ReduceArgs a = args_over(din, dout, count, t, op);
          a.weights = weights.data();
          a.scale = scale;
          Launch k;
          ASSERT_TRUE(plan_launch(a, 1, &k));
          std::vector<const void*> hin;
          for (auto& b : ins) hin.push_back(b.data());
          for (size_t r = 0; r < n_in; r++) k.in[r] = hin[r];
          std::vector<uint8_t> want(count * es), got(count * es);
          for (size_t j = 0; j < count; j++) kernel_model::model_fold(k, op, t, j, es, want.data());
          ASSERT_TRUE(stream_->reduce(a));
          ASSERT_TRUE(stream_->synchronize());
          ASSERT_TRUE(copy_sync(got.data(), dout[0], count * es));
          size_t bad = 0;
          for (size_t j = 0; j < count; j++) {
            if (std::memcmp(&want[j * es], &got[j * es], es) == 0) continue;
            if (++bad > 3) continue;
            uint32_t w = 0, g = 0;
            std::memcpy(&w, &want[j * es], es);
            std::memcpy(&g, &got[j * es], es);
            ADD_FAILURE() << "dtype " << int(t) << " op " << int(op) << " scale " << scale
                          << " inputs " << n_in << " element " << j << ": want 0x" << std::hex
                          << w << ", the GPU gave 0x" << g << std::dec;
          }
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
}

TEST(GpuStream, DoneIsPolledWithoutWaitingAndSaysWhenTheWorkEnded) {
  NEED_GPU();
  std::unique_ptr<Stream> stream;
  ASSERT_TRUE(Stream::create(0, &stream));
  const size_t count = size_t{64} << 20;  // 256 MiB of fp32
  DeviceBuffer a, b;
  ASSERT_TRUE(DeviceBuffer::allocate(0, count * 4, &a));
  ASSERT_TRUE(DeviceBuffer::allocate(0, count * 4, &b));
  std::vector<float> ones(count, 1.0f);
  ASSERT_TRUE(copy_sync(a.get(), ones.data(), count * 4));
  ASSERT_TRUE(copy_sync(b.get(), ones.data(), count * 4));
  std::vector<const void*> in = {a.get(), b.get()};
  std::vector<void*> out = {a.get()};
  const reduce::ReduceArgs args = args_over(in, out, count, DType::kF32, Op::kSum);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(stream->reduce(args));  // a = 1 + 8
  ASSERT_TRUE(stream->record());
  Status err;
  int polls = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!stream->done(&err)) {
    ++polls;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the stream never ended";
  }
  EXPECT_TRUE(err) << err.message();
  // 8 reductions of 256 MiB take milliseconds: the first poll came back
  // before they ended, so done() did not wait.
  EXPECT_GT(polls, 0);
  std::vector<float> got(4);
  ASSERT_TRUE(copy_sync(got.data(), static_cast<float*>(a.get()) + count - 4, 16));
  for (float x : got) EXPECT_EQ(x, 9.0f);
}

}  // namespace
}  // namespace gsync::gpu
