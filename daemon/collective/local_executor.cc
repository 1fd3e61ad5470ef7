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
}  // namespace

uint64_t LocalExecutor::start(Op& op) {
  op.running = true;
  if (op.opcode == proto::kOpBarrier || op.count == 0) return 0;
  size_t elem = proto::dtype_size(op.dtype);
  size_t n = op.arrivals.size();
  op.inputs.assign(n, nullptr);
  op.outputs.assign(n, nullptr);
  op.weights.assign(n, 0.0);
  for (size_t r = 0; r < n; r++) {
    op.inputs[r] = op.arrivals[r].data;
    op.outputs[r] = op.arrivals[r].data;
    op.weights[r] = op.arrivals[r].weight;
  }

  WorkPool::RangeFn fn;
  if (op.opcode == proto::kOpAllreduce) {
    // Local ranks are folded in local-rank order whatever order they arrived
    // in, so the result is the same bits on every run.
    fn = [&op](size_t begin, size_t end) {
      reduce::ReduceArgs a;
      a.inputs = op.inputs.data();
      a.n_inputs = op.inputs.size();
      a.outputs = op.outputs.data();
      a.n_outputs = op.outputs.size();
      a.weights = op.weights.data();
      a.count = op.count;
      a.dtype = static_cast<reduce::DType>(op.dtype);
      a.op = static_cast<reduce::Op>(op.redop);
      reduce::reduce_range(a, begin, end);
    };
  } else {  // broadcast: the root's tensor to every other local rank
    size_t root = 0;
    for (size_t r = 0; r < n; r++)
      if (op.arrivals[r].session->rank == op.root) root = r;
    fn = [&op, root, elem](size_t begin, size_t end) {
      const auto* src = static_cast<const uint8_t*>(op.inputs[root]);
      for (size_t r = 0; r < op.outputs.size(); r++)
        if (r != root)
          std::memcpy(static_cast<uint8_t*>(op.outputs[r]) + begin * elem, src + begin * elem,
                      (end - begin) * elem);
    };
  }
  if (op.bytes() <= inline_bytes_) {
    fn(0, op.count);
    return 0;
  }
  // Grains are whole cache lines of every dtype (a multiple of 64 elements).
  size_t grain = std::max<size_t>(kGrainBytes / elem / 64 * 64, 64);
  return pool_.submit(op.count, grain, std::move(fn));
}

}  // namespace gsync
