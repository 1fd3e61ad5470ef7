// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/local_stages.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "daemon/pipeline/guard_stage.h"
#include "daemon/reduce/nonfinite.h"

namespace gsync::pipeline {

namespace {
// A grain is this many bytes of one rank's tensor: big enough that the lock
// taken per grain is noise, small enough that two workers share a 4 MiB op.
constexpr size_t kGrainBytes = 512 << 10;

using proto::RedOp;
}  // namespace

const Buffer& host_buffer(const OpRequest& req) {
  if (copies_from_root(req))
    for (const auto& c : req.locals)
      if (c.rank == req.shape.root) return c.buf;
  return req.locals[0].buf;
}

uint64_t LocalWork::run(const reduce::ReduceArgs& a, const void* copy_src, uint64_t begin,
                        uint64_t end, uint64_t progress_step, uint64_t tag,
                        std::vector<int> mark_ranks, const std::vector<uint64_t>& after,
                        bool note) {
  if (gpu_ != nullptr) {
    // A slice per GPU, whole 64-element blocks but the last (the kernels'
    // 16-byte loop stays aligned in every slice).
    const uint64_t n = devices_.size();
    const uint64_t per = ((end - begin + n - 1) / n + 63) / 64 * 64;
    last_gpu_tasks_.clear();
    for (uint64_t i = 0, b = begin; i < n && b < end; i++, b += per) {
      in_flight_++;
      last_gpu_tasks_.push_back(gpu_->submit(devices_[i], GpuWork::Lane::kCompute, a, copy_src,
                                             b, std::min(end, b + per), tag, after, note));
    }
    return last_gpu_tasks_.empty() ? 0 : last_gpu_tasks_.back();
  }
  size_t elem = proto::dtype_size(a.dtype);
  WorkPool::RangeFn fn;
  if (copy_src) {
    fn = [a, copy_src, elem, begin](size_t b, size_t e) {
      const auto* from = static_cast<const uint8_t*>(copy_src);
      for (size_t o = 0; o < a.n_outputs; o++) {
        if (a.outputs[o] == copy_src) continue;
        std::memcpy(static_cast<uint8_t*>(a.outputs[o]) + (begin + b) * elem,
                    from + (begin + b) * elem, (e - b) * elem);
      }
    };
  } else if (!mark_ranks.empty()) {
    // The inputs are scanned before the fold overwrites the first (the
    // output is rank 0's tensor); the scan leaves them in cache for it.
    fn = [a, begin, ranks = std::move(mark_ranks)](size_t b, size_t e) {
      std::vector<std::pair<size_t, size_t>> hits;
      reduce::find_nonfinite(a, begin + b, begin + e, &hits);
      reduce::reduce_range(a, begin + b, begin + e);
      if (!hits.empty()) reduce::mark_nonfinite(a, ranks, hits);
    };
  } else {
    fn = [a, begin](size_t b, size_t e) { reduce::reduce_range(a, begin + b, begin + e); };
  }
  if ((end - begin) * elem <= inline_bytes_) {
    fn(0, end - begin);
    return 0;
  }
  // Grains are whole cache lines of every dtype (a multiple of 64 elements).
  size_t grain = std::max<size_t>(kGrainBytes / elem / 64 * 64, 64);
  in_flight_++;
  return pool_.submit(end - begin, grain, std::move(fn), progress_step, tag);
}

// ---------------------------------------------------------------- common

LocalStage::LocalStage(StageLink link, WorkPool& pool, uint64_t inline_bytes)
    : Stage(link), work_(pool, inline_bytes) {
  // The pipeline runs an op on device buffers only when every GPU of it
  // reaches every buffer (Pipeline::gpu_path_refusal); else its buffers are
  // pinned host stand-ins by now.
  const OpRequest& r = link_.request();
  if (r.locals.empty() || r.locals[0].buf.kind != MemoryKind::kDevice) return;
  // The host buffer's GPU first: a small op (one slice) runs where the
  // result stays.
  std::vector<int> gpus{host_buffer(r).device};
  for (const auto& c : r.locals)
    if (std::find(gpus.begin(), gpus.end(), c.buf.device) == gpus.end())
      gpus.push_back(c.buf.device);
  work_.use_gpu(link_.gpu(), std::move(gpus));
}

void LocalStage::abort(const Status& why) {
  (void)why;
  aborting_ = true;
  if (work_.in_flight() == 0) link_.quiet();
}

void LocalStage::task_done(uint64_t task) {
  (void)task;
  work_.task_done();
  if (aborting_) {
    if (work_.in_flight() == 0) link_.quiet();
    return;
  }
  on_task_done();
}

std::string LocalStage::waiting_for() const {
  return fmt::format("the {} of its {} bytes on this host ({} task{} running)", name(),
                     link_.request().shape.bytes(), work_.in_flight(),
                     work_.in_flight() == 1 ? "" : "s");
}

// ---------------------------------------------------------------- local reduce

LocalReduceStage::LocalReduceStage(StageLink link, WorkPool& pool, uint64_t inline_bytes)
    : LocalStage(link, pool, inline_bytes) {
  const OpRequest& r = link_.request();
  // Local ranks are folded in local-rank order whatever order they arrived
  // in, so the result is the same bits on every run.
  for (const auto& c : r.locals) {
    inputs_.push_back(c.buf.ptr);
    outputs_.push_back(c.buf.ptr);
    weights_.push_back(c.weight);
  }
  args_.count = r.shape.count;
  args_.dtype = r.shape.dtype;
  args_.op = r.shape.redop;
  if (copies_from_root(r)) copy_src_ = host_buffer(r).ptr;
  args_.inputs = inputs_.data();
  args_.n_inputs = inputs_.size();
  args_.outputs = outputs_.data();
  args_.n_outputs = outputs_.size();
  args_.weights = weights_.data();
}

void LocalReduceStage::ready(uint64_t, uint64_t) {}

void LocalReduceStage::input_done() {
  input_done_ = true;
  const OpRequest& r = link_.request();
  if (r.shape.opcode == proto::Opcode::kBarrier || r.shape.count == 0 || aborting_) {
    link_.finished();
    return;
  }
  if (work_.run(args_, copy_src_, 0, r.shape.count, 0, link_.pool_tag()) == 0) link_.finished();
}

void LocalReduceStage::on_task_done() {
  if (work_.in_flight() == 0) link_.finished();
}

// ---------------------------------------------------------------- fold

bool FoldStage::needed(const OpRequest& req) {
  // A push's gradient is weighed even from one rank: the servers divide
  // by the weights' sum.
  const proto::Opcode op = req.shape.opcode;
  if (op == proto::Opcode::kPush || op == proto::Opcode::kPushPull) return true;
  // A guarded allreduce marks its non-finite values with their rank here,
  // even from one rank (nonfinite.h).
  if (GuardStage::wanted(req)) return true;
  return op == proto::Opcode::kAllreduce &&
         (req.locals.size() > 1 || req.shape.redop == RedOp::kWeightedAvg);
}

FoldStage::FoldStage(StageLink link, WorkPool& pool, uint64_t inline_bytes, uint64_t unit)
    : LocalStage(link, pool, inline_bytes), unit_(unit) {
  const OpRequest& r = link_.request();
  for (const auto& c : r.locals) {
    inputs_.push_back(c.buf.ptr);
    weights_.push_back(c.weight);
  }
  outputs_.push_back(host_buffer(r).ptr);
  args_.count = r.shape.count;
  args_.dtype = r.shape.dtype;
  // The host's contribution: sums stay sums (averages are taken once,
  // after the cross-host sum), weights are applied but not normalized.
  switch (r.shape.redop) {
    case RedOp::kMin: args_.op = reduce::Op::kMin; break;
    case RedOp::kMax: args_.op = reduce::Op::kMax; break;
    case RedOp::kWeightedAvg: args_.op = reduce::Op::kWeightedAvg; break;
    case RedOp::kSum:
    case RedOp::kAvg: args_.op = reduce::Op::kSum; break;
  }
  args_.normalize_weights = false;
  args_.inputs = inputs_.data();
  args_.n_inputs = inputs_.size();
  args_.outputs = outputs_.data();
  args_.n_outputs = outputs_.size();
  args_.weights = weights_.data();
}

void FoldStage::ready(uint64_t, uint64_t) {}

void FoldStage::input_done() {
  input_done_ = true;
  if (aborting_) return;
  uint64_t count = link_.request().shape.count;
  std::vector<int> ranks;
  if (GuardStage::marks_ranks(link_.request()))
    for (const auto& c : link_.request().locals) ranks.push_back(c.rank);
  if (ranks.empty() && fold_queued(count)) return;
  if (work_.run(args_, nullptr, 0, count, unit_, link_.pool_tag(), std::move(ranks)) == 0)
    on_task_done();
}

bool FoldStage::fold_queued(uint64_t count) {
  // Chunks of whole 64-element blocks keep every kernel's 16-byte loop
  // aligned (the plan's chunk may be any size; then the fold goes whole).
  if (!work_.on_one_gpu() || count == 0 || unit_ % 64 != 0 || !link_.next_takes_queued())
    return false;
  // A kernel per chunk, each chunk's copy out queued behind it on the
  // device: the copy engine starts on the first chunk while the next is
  // folded, and no chunk waits for a note to come back first.
  const uint64_t step = unit_ == 0 ? count : unit_;
  // Only the last chunk's kernels bring a note back: the stream ran the
  // others before them (GpuWork::submit), and no host function stalls
  // the kernels' stream between chunks.
  for (uint64_t b = 0; b < count; b += step) {
    const uint64_t e = std::min(count, b + step);
    work_.run(args_, nullptr, b, e, 0, link_.pool_tag(), {}, {}, /*note=*/e == count);
    link_.emit_queued(b, e, work_.last_gpu_tasks());
  }
  emitted_ = count;
  return true;
}

void FoldStage::task_progress(uint64_t, uint64_t done) {
  if (aborting_ || done <= emitted_) return;
  link_.emit(emitted_, done);
  emitted_ = done;
}

void FoldStage::on_task_done() {
  if (work_.in_flight() > 0) return;  // slices on other GPUs still running
  uint64_t count = link_.request().shape.count;
  if (emitted_ < count) link_.emit(emitted_, count);
  emitted_ = count;
  link_.finished();
}

// ---------------------------------------------------------------- store

StoreStage::StoreStage(StageLink link, WorkPool& pool, uint64_t inline_bytes)
    : LocalStage(link, pool, inline_bytes) {}

// Set up on the first chunk: the sum of the weights is known by then.
void StoreStage::plan_once() {
  if (planned_) return;
  planned_ = true;
  const OpRequest& r = link_.request();
  const Buffer& host = host_buffer(r);
  inputs_.push_back(host.ptr);
  args_.count = r.shape.count;
  args_.dtype = r.shape.dtype;
  args_.op = reduce::Op::kSum;
  if (r.shape.opcode == proto::Opcode::kAllreduce && r.shape.redop == RedOp::kAvg) {
    args_.op = reduce::Op::kAvg;
    args_.divisor = static_cast<uint32_t>(r.world_size);
  } else if (r.shape.opcode == proto::Opcode::kAllreduce && r.shape.redop == RedOp::kWeightedAvg) {
    double w = link_.weight_total();
    args_.scale = w > 0 ? 1.0 / w : 0.0;
  }
  // The host's own copy needs rewriting only when the result changes.
  bool rewrite = args_.op == reduce::Op::kAvg || args_.scale != 1.0;
  for (const auto& c : r.locals)
    if (c.buf.ptr != host.ptr || rewrite) outputs_.push_back(c.buf.ptr);
  nothing_ = outputs_.empty() || r.shape.count == 0;
  if (copies_from_root(r)) copy_src_ = host.ptr;
  args_.inputs = inputs_.data();
  args_.n_inputs = inputs_.size();
  args_.outputs = outputs_.data();
  args_.n_outputs = outputs_.size();
}

void StoreStage::ready(uint64_t begin, uint64_t end) { store(begin, end, {}); }

void StoreStage::ready_queued(uint64_t begin, uint64_t end, const std::vector<uint64_t>& gpu_tasks) {
  store(begin, end, gpu_tasks);
}

void StoreStage::store(uint64_t begin, uint64_t end, const std::vector<uint64_t>& after) {
  if (aborting_) return;
  plan_once();
  if (nothing_ || begin >= end) return;
  work_.run(args_, copy_src_, begin, end, 0, link_.pool_tag(), {}, after);
}

void StoreStage::input_done() {
  input_done_ = true;
  if (!aborting_ && work_.in_flight() == 0) link_.finished();
}

void StoreStage::on_task_done() {
  if (input_done_ && work_.in_flight() == 0) link_.finished();
}

}  // namespace gsync::pipeline
