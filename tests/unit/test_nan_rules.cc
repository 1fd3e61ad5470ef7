// SPDX-License-Identifier: Apache-2.0
//
// The GPU kernels' NaN rules (daemon/gpu/nan_rules.h) against the host
// kernels, on this machine: a model of the kernel's fold (the launch the
// daemon plans, the GPU's canonical NaN for every NaN its arithmetic
// makes, then the rules' mending) must give the host's bits for NaNs of
// every kind - quiet and signalling, either sign, with payloads (the
// anomaly guard's rank marks among them) - and for the NaN of Inf - Inf.
// tests/gpu/test_gpu_reduce.cc checks the kernel itself against the host
// the same way where there is a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/gpu/launch.h"
#include "daemon/gpu/nan_rules.h"
#include "daemon/reduce/reduce.h"
#include "tests/gpu/kernel_model.h"

namespace gsync::gpu {
namespace {

namespace nr = nan_rules;
using reduce::DType;
using reduce::Op;
using namespace kernel_model;

std::string hex(const uint8_t* p, size_t es) {
  uint32_t v = 0;
  std::memcpy(&v, p, es);
  char s[16];
  std::snprintf(s, sizeof s, "0x%0*x", int(es * 2), v);
  return s;
}

// Of two or more NaN inputs, x86 keeps the payload of the first NaN
// operand of each instruction, but which operand is first is the
// compiler's choice (an add commutes): the host's AVX2 and scalar paths
// may give either input's NaN, the GPU's rules (and AVX-512) the first
// folded. Both are right if each is one of the inputs' NaNs - as it is
// (min and max), or made quiet (arithmetic) - or the default NaN of an
// Inf - Inf among them.
bool either_nan(const std::vector<std::vector<uint8_t>>& ins, size_t j, DType t,
                const uint8_t* host, const uint8_t* model) {
  const size_t es = reduce::dtype_size(t);
  std::vector<std::vector<uint8_t>> nans;
  bool plus_inf = false, minus_inf = false;
  for (const auto& in : ins) {
    const float x = load(t, &in[j * es]);
    plus_inf |= nr::bits_of(x) == 0x7f800000u;
    minus_inf |= nr::bits_of(x) == 0xff800000u;
    if (!nr::is_nan(x)) continue;
    nans.emplace_back(in.begin() + long(j * es), in.begin() + long((j + 1) * es));
    std::vector<uint8_t> quiet(es);
    store(t, nr::float_of(nr::bits_of(x) | nr::kQuietBit), quiet.data());
    nans.push_back(quiet);
  }
  if (plus_inf && minus_inf) {  // Inf - Inf: the default NaN is one more
    std::vector<uint8_t> made(es);
    store(t, nr::float_of(nr::kDefaultNaN), made.data());
    nans.push_back(made);
    nans.push_back(made);
  }
  if (nans.size() < 4) return false;  // one NaN: exact bits only
  auto one_of = [&](const uint8_t* p) {
    for (const auto& n : nans)
      if (std::memcmp(n.data(), p, es) == 0) return true;
    return false;
  };
  return one_of(host) && one_of(model);
}

// Every ordered pair and triple of the specials, through the host kernels
// of every ISA this CPU has and through the model: the same bits.
TEST(NanRules, TheKernelsFoldGivesTheHostsBitsForEveryNaN) {
  const reduce::Isa picked = reduce::active_isa();
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const size_t es = reduce::dtype_size(t);
    for (size_t n_in : {2u, 3u}) {
      std::vector<std::vector<uint8_t>> ins = combinations(t, n_in);
      const size_t count = ins[0].size() / es;
      std::vector<const void*> in_ptrs;
      for (auto& b : ins) in_ptrs.push_back(b.data());
      const std::vector<double> weights = {0.5, 0.25, 2.0};
      for (Op op : {Op::kSum, Op::kAvg, Op::kWeightedAvg, Op::kMin, Op::kMax}) {
        for (double scale : {1.0, 0.5}) {
          reduce::ReduceArgs a;
          a.inputs = in_ptrs.data();
          a.n_inputs = n_in;
          a.weights = weights.data();
          a.count = count;
          a.dtype = t;
          a.op = op;
          a.scale = scale;
          std::vector<uint8_t> model(count * es);
          void* model_out = model.data();
          a.outputs = &model_out;
          a.n_outputs = 1;
          Launch k;
          ASSERT_TRUE(plan_launch(a, 1, &k));
          for (size_t j = 0; j < count; j++) model_fold(k, op, t, j, es, model.data());
          for (reduce::Isa isa : {reduce::Isa::kScalar, reduce::Isa::kAvx2, reduce::Isa::kAvx512}) {
            if (!reduce::isa_available(isa)) continue;
            reduce::force_isa(isa);
            std::vector<uint8_t> host(count * es);
            void* host_out = host.data();
            a.outputs = &host_out;
            reduce::reduce(a);
            size_t bad = 0;
            for (size_t j = 0; j < count && bad < 3; j++) {
              if (std::memcmp(&host[j * es], &model[j * es], es) == 0) continue;
              if (either_nan(ins, j, t, &host[j * es], &model[j * es])) continue;
              bad++;
              std::string what;
              for (size_t r = 0; r < n_in; r++) what += hex(&ins[r][j * es], es) + " ";
              ADD_FAILURE() << reduce::isa_name(isa) << " dtype " << int(t) << " op " << int(op)
                            << " scale " << scale << " of " << what << ": host "
                            << hex(&host[j * es], es) << ", GPU's rules " << hex(&model[j * es], es);
            }
          }
          reduce::force_isa(picked);
        }
      }
    }
  }
}

// Without the rules the GPU's NaN would differ from the host's: the test
// above can fail (the sum of two marked NaNs keeps the first mark).
TEST(NanRules, TheFirstNaNsPayloadWins) {
  const float a = nr::float_of(0x7fc00003u), b = nr::float_of(0x7fc00005u);
  EXPECT_EQ(nr::bits_of(add(a, b)), 0x7fc00003u);
  EXPECT_EQ(nr::bits_of(add(1.0f, b)), 0x7fc00005u);
  EXPECT_EQ(nr::bits_of(add(nr::float_of(0x7f800000u), nr::float_of(0xff800000u))), nr::kDefaultNaN);
  EXPECT_EQ(nr::bits_of(add(nr::float_of(0x7f800001u), 1.0f)), 0x7fc00001u);  // made quiet
}

}  // namespace
}  // namespace gsync::gpu
