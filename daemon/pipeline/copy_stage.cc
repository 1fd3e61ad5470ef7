// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/copy_stage.h"

#include <algorithm>

#include <fmt/format.h>

#include "daemon/pipeline/gpu_work.h"
#include "daemon/pipeline/local_stages.h"

namespace gsync::pipeline {

std::vector<CopyStage::Pair> CopyStage::wire_pair(const OpRequest& r) {
  const Buffer& device = host_buffer(r);
  return {{device.ptr, r.staging.ptr, device.device}};
}

std::vector<CopyStage::Pair> CopyStage::local_pairs(const OpRequest& r, Way way) {
  std::vector<Pair> out;
  for (size_t i = 0; i < r.device_locals.size() && i < r.locals.size(); i++) {
    if (r.device_locals[i].kind != MemoryKind::kDevice) continue;
    // A broadcast moves the root's data only: in, the root's buffer alone
    // (the others' stand-ins are written by the copy from the root or by
    // the wire, which may land before a copy of theirs would); out, all
    // but the root's, which holds it already.
    const bool root = r.locals[i].rank == r.shape.root;
    if (copies_from_root(r) && root != (way == Way::kToHost)) continue;
    out.push_back({r.device_locals[i].ptr, r.locals[i].buf.ptr, r.device_locals[i].device});
  }
  return out;
}

CopyStage::CopyStage(StageLink link, Way way, std::vector<Pair> pairs, uint64_t unit,
                     bool pass_through)
    : Stage(link), way_(way), pairs_(std::move(pairs)), unit_(unit), pass_through_(pass_through) {}

void CopyStage::ready(uint64_t begin, uint64_t end) { copy(begin, end, {}); }

void CopyStage::ready_queued(uint64_t begin, uint64_t end, const std::vector<uint64_t>& gpu_tasks) {
  copy(begin, end, gpu_tasks);
}

void CopyStage::copy(uint64_t begin, uint64_t end, const std::vector<uint64_t>& after) {
  if (aborting_ || begin >= end) return;
  received_upto_ = std::max(received_upto_, end);
  if (pass_through_ || pairs_.empty()) {
    link_.emit(begin, end);
    return;
  }
  const OpRequest& r = link_.request();
  reduce::ReduceArgs a;
  a.dtype = r.shape.dtype;
  a.count = r.shape.count;
  a.n_outputs = 1;
  const uint64_t step = unit_ == 0 ? end - begin : unit_;
  // The next stage on the GPU (the store, after the copy back) takes each
  // piece as soon as its copies are queued, and follows them on the device.
  const bool pass_queued = link_.next_takes_queued();
  std::vector<uint64_t> tasks;
  for (uint64_t b = begin; b < end; b += step) {
    const uint64_t e = std::min(end, b + step);
    pieces_.push_back({b, e, static_cast<int>(pairs_.size()), pass_queued});
    tasks.clear();
    for (const Pair& p : pairs_) {
      const bool to_host = way_ == Way::kToHost;
      void* outputs[1] = {to_host ? p.host_ptr : p.device_ptr};
      a.outputs = outputs;
      const void* src = to_host ? p.device_ptr : p.host_ptr;
      const auto lane = to_host ? GpuWork::Lane::kToHost : GpuWork::Lane::kToDevice;
      const uint64_t task = link_.gpu()->submit(p.device, lane, a, src, b, e, link_.pool_tag(), after);
      task_of_[task] = b;
      tasks.push_back(task);
    }
    if (pass_queued) link_.emit_queued(b, e, tasks);
  }
}

void CopyStage::input_done() {
  input_done_ = true;
  // An upstream that says no ranges (a local stage, the store): all of it.
  const uint64_t count = link_.request().shape.count;
  if (received_upto_ < count) ready(received_upto_, count);
  maybe_finish();
}

void CopyStage::task_done(uint64_t task) {
  auto it = task_of_.find(task);
  if (it == task_of_.end()) return;
  for (auto& p : pieces_)
    if (p.begin == it->second) p.copies_left--;
  task_of_.erase(it);
  emit_landed();
  maybe_finish();
}

void CopyStage::emit_landed() {
  while (!pieces_.empty() && pieces_.front().copies_left <= 0) {
    const Piece p = pieces_.front();
    pieces_.pop_front();
    if (!aborting_ && !p.passed) link_.emit(p.begin, p.end);
  }
}

void CopyStage::maybe_finish() {
  if (!task_of_.empty() || finished_) return;
  if (aborting_) {
    finished_ = true;
    link_.quiet();
  } else if (input_done_) {
    finished_ = true;
    link_.finished();
  }
}

void CopyStage::abort(const Status& why) {
  (void)why;
  aborting_ = true;
  // Copies still on a stream read or write the buffers: quiet once they
  // have landed (task_done), at once when none are left.
  maybe_finish();
}

std::string CopyStage::waiting_for() const {
  return fmt::format("its copies {} ({} in flight)",
                     way_ == Way::kToHost ? "to pinned host memory" : "back to device memory",
                     task_of_.size());
}

}  // namespace gsync::pipeline
