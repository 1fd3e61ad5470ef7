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

struct LocalExecutor::Plan {
  reduce::ReduceArgs a;
  bool copy_only = false;  // broadcast: plain copies
  const void* copy_src = nullptr;
  const std::vector<void*>* outputs = nullptr;
};

uint64_t LocalExecutor::start(Op& op) {
  op.running = true;
  Plan p;
  if (!plan(op, op.stage, &p)) return 0;
  return run(op, p, 0, op.count, op.stage == Op::Stage::kFold ? op.pipeline_elems : 0);
}

uint64_t LocalExecutor::start_store(Op& op, size_t begin, size_t end) {
  op.running = true;
  Plan p;
  if (begin >= end || !plan(op, Op::Stage::kStore, &p)) return 0;
  return run(op, p, begin, end, 0);
}

bool LocalExecutor::plan(Op& op, Op::Stage stage, Plan* p) const {
  if (op.opcode == proto::kOpBarrier || op.count == 0) return false;
  size_t n = op.arrivals.size();
  bool store = stage == Op::Stage::kStore;
  auto& ins = store ? op.store_inputs : op.inputs;
  auto& outs = store ? op.store_outputs : op.outputs;
  // The store's storage is filled once and then only read: a pipelined store
  // submits chunk after chunk while earlier ones still run.
  bool fill = !store || !op.store_planned;
  if (store) op.store_planned = true;
  if (fill) {
    ins.clear();
    outs.clear();
    if (!store) op.weights.clear();
  }
  auto add_in = [&](const void* d) { if (fill) ins.push_back(d); };
  auto add_out = [&](void* d) { if (fill) outs.push_back(d); };
  auto add_w = [&](double w) { if (fill) op.weights.push_back(w); };

  // Local ranks are folded in local-rank order whatever order they arrived
  // in, so the result is the same bits on every run.
  reduce::ReduceArgs& a = p->a;
  a = base_args(op);
  switch (stage) {
    case Op::Stage::kLocal:
      for (size_t r = 0; r < n; r++) {
        add_in(op.arrivals[r].data);
        add_out(op.arrivals[r].data);
        add_w(op.arrivals[r].weight);
      }
      a.op = static_cast<reduce::Op>(op.redop);
      if (op.opcode == proto::kOpBroadcast) {
        p->copy_only = true;
        for (size_t r = 0; r < n; r++)
          if (op.arrivals[r].session->rank == op.root) p->copy_src = op.arrivals[r].data;
      }
      break;
    case Op::Stage::kFold:
      // The host's contribution: sums stay sums (averages are taken once,
      // after the cross-host sum), weights are applied but not normalized.
      // One local rank: its tensor already is the contribution, unless a
      // weight must be applied.
      if (op.opcode == proto::kOpBroadcast || (n == 1 && op.redop != 2)) return false;
      for (size_t r = 0; r < n; r++) {
        add_in(op.arrivals[r].data);
        add_w(op.arrivals[r].weight);
      }
      add_out(op.host_data);
      a.op = op.redop == 3 ? reduce::Op::kMin
             : op.redop == 4 ? reduce::Op::kMax
             : op.redop == 2 ? reduce::Op::kWeightedAvg
                             : reduce::Op::kSum;
      a.normalize_weights = false;
      break;
    case Op::Stage::kStore: {
      add_in(op.host_data);
      a.op = reduce::Op::kSum;
      if (op.opcode == proto::kOpAllreduce && op.redop == 1) {
        a.op = reduce::Op::kAvg;
        a.divisor = static_cast<uint32_t>(op.world_size);
      } else if (op.opcode == proto::kOpAllreduce && op.redop == 2) {
        a.scale = op.weight_total > 0 ? 1.0 / op.weight_total : 0.0;
      }
      // The host's own copy needs rewriting only when the result changes.
      bool rewrite = a.op == reduce::Op::kAvg || a.scale != 1.0;
      for (size_t r = 0; r < n; r++)
        if (op.arrivals[r].data != op.host_data || rewrite) add_out(op.arrivals[r].data);
      if (outs.empty()) return false;
      if (op.opcode == proto::kOpBroadcast) {
        p->copy_only = true;
        p->copy_src = op.host_data;
      }
      break;
    }
    case Op::Stage::kCross:
      return false;
  }
  a.inputs = ins.data();
  a.n_inputs = ins.size();
  a.outputs = outs.data();
  a.n_outputs = outs.size();
  a.weights = store || op.weights.empty() ? nullptr : op.weights.data();
  p->outputs = &outs;
  return true;
}

uint64_t LocalExecutor::run(Op& op, const Plan& p, size_t begin, size_t end, size_t progress) {
  size_t elem = proto::dtype_size(op.dtype);
  WorkPool::RangeFn fn;
  if (p.copy_only) {
    fn = [outs = p.outputs, src = p.copy_src, elem, begin](size_t b, size_t e) {
      const auto* from = static_cast<const uint8_t*>(src);
      for (void* out : *outs)
        if (out != src)
          std::memcpy(static_cast<uint8_t*>(out) + (begin + b) * elem, from + (begin + b) * elem,
                      (e - b) * elem);
    };
  } else {
    fn = [a = p.a, begin](size_t b, size_t e) { reduce::reduce_range(a, begin + b, begin + e); };
  }
  if ((end - begin) * elem <= inline_bytes_) {
    fn(0, end - begin);
    return 0;
  }
  // Grains are whole cache lines of every dtype (a multiple of 64 elements).
  size_t grain = std::max<size_t>(kGrainBytes / elem / 64 * 64, 64);
  return pool_.submit(end - begin, grain, std::move(fn), progress);
}

}  // namespace gsync
