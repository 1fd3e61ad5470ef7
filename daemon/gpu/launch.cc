// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/launch.h"

#include <string>

namespace gsync::gpu {

using reduce::DType;
using reduce::Op;

bool supported(DType t, Op op) {
  const bool floats = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
  const bool ops = op == Op::kSum || op == Op::kAvg || op == Op::kWeightedAvg || op == Op::kMin ||
                   op == Op::kMax;
  return floats && ops;
}

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

Status plan_launch(const reduce::ReduceArgs& args, int sm_count, Launch* out) {
  if (!supported(args.dtype, args.op)) {
    return Status(GSYNC_ERR_UNSUPPORTED,
                  "the GPU reduce kernels take fp32, fp16 and bf16 with sum, avg, weighted avg, "
                  "min and max; not dtype " +
                      std::to_string(int(args.dtype)) + " with op " + std::to_string(int(args.op)));
  }
  if (args.n_inputs == 0 || args.n_inputs > kMaxTensors || args.n_outputs > kMaxTensors) {
    return Status(GSYNC_ERR_INVALID, "a GPU reduce takes 1 to " + std::to_string(kMaxTensors) +
                                         " inputs and up to as many outputs, not " +
                                         std::to_string(args.n_inputs) + " and " +
                                         std::to_string(args.n_outputs));
  }
  if (args.op == Op::kWeightedAvg && args.weights == nullptr) {
    return Status(GSYNC_ERR_INVALID, "a GPU weighted average without weights");
  }
  Launch k{};
  bool all_aligned = true;
  for (size_t r = 0; r < args.n_inputs; ++r) {
    k.in[r] = args.inputs[r];
    all_aligned = all_aligned && aligned16(args.inputs[r]);
  }
  for (size_t o = 0; o < args.n_outputs; ++o) {
    k.out[o] = args.outputs[o];
    all_aligned = all_aligned && aligned16(args.outputs[o]);
  }
  // The host kernels' arithmetic (kernels_impl.h): in double, cast to the
  // fp32 accumulator once.
  if (args.op == Op::kWeightedAvg) {
    double sum = 1.0;
    if (args.normalize_weights) {
      sum = 0.0;
      for (size_t r = 0; r < args.n_inputs; ++r) sum += args.weights[r];
    }
    for (size_t r = 0; r < args.n_inputs; ++r) k.w[r] = static_cast<float>(args.weights[r] / sum);
  }
  k.n_in = static_cast<int>(args.n_inputs);
  k.n_out = static_cast<int>(args.n_outputs);
  k.divisor = static_cast<float>(args.divisor ? args.divisor : args.n_inputs);
  k.scaled = args.scale != 1.0;
  k.scale = static_cast<float>(args.scale);
  k.count = args.count;
  const uint64_t vec = 16 / reduce::dtype_size(args.dtype);
  k.n_vec = all_aligned ? args.count / vec : 0;
  // Enough blocks to fill every multiprocessor several times over, no
  // more: the kernel's loops stride across the rest, so 256 MiB is one
  // cheap launch.
  const uint64_t items = k.n_vec + (args.count - k.n_vec * vec);
  const uint64_t wanted = (items + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const uint64_t most = static_cast<uint64_t>(sm_count > 0 ? sm_count : 1) * 8;
  k.blocks = args.n_outputs == 0 ? 0 : static_cast<unsigned>(wanted < most ? wanted : most);
  *out = k;
  return Status::ok();
}

}  // namespace gsync::gpu
