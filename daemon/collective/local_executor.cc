// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/local_executor.h"

#include <algorithm>
#include <cstring>

#include "daemon/reduce/reduce.h"
#include "protocol/wire.h"

namespace gsync {

namespace {
// A grain is this many bytes of one rank's tensor: big enough that the lock
// taken per grain is noise, small enough that two workers share a 4 MiB op.
constexpr size_t kGrainBytes = 512 << 10;

reduce::ReduceArgs base_args(const Op& op) {
  reduce::ReduceArgs a;
  a.count = op.count;
  a.dtype = static_cast<reduce::DType>(op.dtype);
  return a;
}
}  // namespace

uint64_t LocalExecutor::start(Op& op) {
  op.running = true;
  if (op.opcode == proto::kOpBarrier || op.count == 0) return 0;
  size_t elem = proto::dtype_size(op.dtype);
  size_t n = op.arrivals.size();
  op.inputs.clear();
  op.outputs.clear();
  op.weights.clear();

  // Local ranks are folded in local-rank order whatever order they arrived
  // in, so the result is the same bits on every run.
  reduce::ReduceArgs a = base_args(op);
  bool copy_only = false;  // broadcast: plain copies
  const void* copy_src = nullptr;
  switch (op.stage) {
    case Op::Stage::kLocal:
      for (size_t r = 0; r < n; r++) {
        op.inputs.push_back(op.arrivals[r].data);
        op.outputs.push_back(op.arrivals[r].data);
        op.weights.push_back(op.arrivals[r].weight);
      }
      a.op = static_cast<reduce::Op>(op.redop);
      if (op.opcode == proto::kOpBroadcast) {
        copy_only = true;
        for (size_t r = 0; r < n; r++)
          if (op.arrivals[r].session->rank == op.root) copy_src = op.arrivals[r].data;
      }
      break;
    case Op::Stage::kFold:
      // The host's contribution: sums stay sums (averages are taken once,
      // after the cross-host sum), weights are applied but not normalized.
      // One local rank: its tensor already is the contribution, unless a
      // weight must be applied.
      if (op.opcode == proto::kOpBroadcast || (n == 1 && op.redop != 2)) return 0;
      for (size_t r = 0; r < n; r++) {
        op.inputs.push_back(op.arrivals[r].data);
        op.weights.push_back(op.arrivals[r].weight);
      }
      op.outputs.push_back(op.host_data);
      a.op = op.redop == 3 ? reduce::Op::kMin
             : op.redop == 4 ? reduce::Op::kMax
             : op.redop == 2 ? reduce::Op::kWeightedAvg
                             : reduce::Op::kSum;
      a.normalize_weights = false;
      break;
    case Op::Stage::kStore:
      op.inputs.push_back(op.host_data);
      a.op = reduce::Op::kSum;
      if (op.opcode == proto::kOpAllreduce && op.redop == 1) {
        a.op = reduce::Op::kAvg;
        a.divisor = static_cast<uint32_t>(op.world_size);
      } else if (op.opcode == proto::kOpAllreduce && op.redop == 2) {
        a.scale = op.weight_total > 0 ? 1.0 / op.weight_total : 0.0;
      }
      for (size_t r = 0; r < n; r++) {
        // The host's own copy needs rewriting only when the result changes.
        bool rewrite = a.op == reduce::Op::kAvg || a.scale != 1.0;
        if (op.arrivals[r].data != op.host_data || rewrite) op.outputs.push_back(op.arrivals[r].data);
      }
      if (op.outputs.empty()) return 0;
      if (op.opcode == proto::kOpBroadcast) {
        copy_only = true;
        copy_src = op.host_data;
      }
      break;
    case Op::Stage::kCross:
      return 0;
  }
  a.inputs = op.inputs.data();
  a.n_inputs = op.inputs.size();
  a.outputs = op.outputs.data();
  a.n_outputs = op.outputs.size();
  a.weights = op.weights.empty() ? nullptr : op.weights.data();

  WorkPool::RangeFn fn;
  if (copy_only) {
    fn = [&op, copy_src, elem](size_t begin, size_t end) {
      const auto* src = static_cast<const uint8_t*>(copy_src);
      for (void* out : op.outputs)
        if (out != copy_src)
          std::memcpy(static_cast<uint8_t*>(out) + begin * elem, src + begin * elem,
                      (end - begin) * elem);
    };
  } else {
    fn = [a](size_t begin, size_t end) { reduce::reduce_range(a, begin, end); };
  }
  if (op.bytes() <= inline_bytes_) {
    fn(0, op.count);
    return 0;
  }
  // Grains are whole cache lines of every dtype (a multiple of 64 elements).
  size_t grain = std::max<size_t>(kGrainBytes / elem / 64 * 64, 64);
  size_t progress = op.stage == Op::Stage::kFold ? op.pipeline_elems : 0;
  return pool_.submit(op.count, grain, std::move(fn), progress);
}

}  // namespace gsync
