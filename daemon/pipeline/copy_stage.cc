// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/copy_stage.h"

#include <algorithm>

#include <fmt/format.h>

#include "daemon/pipeline/gpu_work.h"
#include "daemon/pipeline/local_stages.h"

namespace gsync::pipeline {

CopyStage::CopyStage(StageLink link, Way way, uint64_t unit, bool pass_through)
    : Stage(link), way_(way), unit_(unit), pass_through_(pass_through) {
  const OpRequest& r = link_.request();
  const Buffer& device = host_buffer(r);
  device_ = device.device;
  if (way_ == Way::kToHost) {
    src_ = device.ptr;
    dst_ = r.staging.ptr;
  } else {
    src_ = r.staging.ptr;
    dst_ = device.ptr;
  }
}

void CopyStage::ready(uint64_t begin, uint64_t end) {
  if (aborting_ || begin >= end) return;
  if (pass_through_) {
    link_.emit(begin, end);
    return;
  }
  const OpRequest& r = link_.request();
  reduce::ReduceArgs a;
  a.dtype = r.shape.dtype;
  a.count = r.shape.count;
  void* outputs[1] = {dst_};
  a.outputs = outputs;
  a.n_outputs = 1;
  const uint64_t step = unit_ == 0 ? end - begin : unit_;
  for (uint64_t b = begin; b < end; b += step) {
    const uint64_t e = std::min(end, b + step);
    const uint64_t task = link_.gpu()->submit(device_, a, src_, b, e, link_.pool_tag());
    pieces_.push_back({task, b, e, false});
  }
}

void CopyStage::input_done() {
  input_done_ = true;
  maybe_finish();
}

void CopyStage::task_done(uint64_t task) {
  for (auto& p : pieces_)
    if (p.task == task) p.done = true;
  emit_landed();
  maybe_finish();
}

void CopyStage::emit_landed() {
  while (!pieces_.empty() && pieces_.front().done) {
    const Piece p = pieces_.front();
    pieces_.pop_front();
    if (!aborting_) link_.emit(p.begin, p.end);
  }
}

void CopyStage::maybe_finish() {
  if (!pieces_.empty() || finished_) return;
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
  // Pieces still on the stream read or write the buffers: quiet once they
  // have landed (task_done), at once when none are left.
  maybe_finish();
}

std::string CopyStage::waiting_for() const {
  return fmt::format("its copy {} ({} piece{} on GPU {})",
                     way_ == Way::kToHost ? "to pinned host memory" : "back to device memory",
                     pieces_.size(), pieces_.size() == 1 ? "" : "s", device_);
}

}  // namespace gsync::pipeline
