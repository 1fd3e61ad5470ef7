// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/gpu_work.h"

#include <string>

#include "daemon/gpu/device.h"
#include "protocol/ops.h"

namespace gsync::pipeline {

GpuWork::GpuWork() = default;

GpuWork::~GpuWork() {
  streams_.clear();  // each waits for its work: no note is pushed after this
}

Status GpuWork::stream_for(int device, Lane lane, gpu::Stream** out) {
  auto it = streams_.find({device, lane});
  if (it == streams_.end()) {
    std::unique_ptr<gpu::Stream> s;
    if (Status st = gpu::Stream::create(device, &s); !st) return st;
    it = streams_.emplace(std::make_pair(device, lane), std::move(s)).first;
  }
  *out = it->second.get();
  return Status::ok();
}

Status GpuWork::queue(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
                      uint64_t begin, uint64_t end, uint64_t task, bool* queued) {
  *queued = false;
  if (notes_.fd() < 0)
    return Status(GSYNC_ERR_INTERNAL, "the GPU work's eventfd could not be made");
  gpu::Stream* s = nullptr;
  if (Status st = stream_for(device, lane, &s); !st) return st;
  const size_t elem = proto::dtype_size(a.dtype);
  const uint64_t skip = begin * elem;
  // The range's pointers: the kernel takes them by value at launch, so
  // these arrays may go when queue returns.
  std::vector<const void*> in(a.n_inputs);
  std::vector<void*> out(a.n_outputs);
  for (size_t i = 0; i < a.n_inputs; i++) in[i] = static_cast<const uint8_t*>(a.inputs[i]) + skip;
  for (size_t o = 0; o < a.n_outputs; o++) out[o] = static_cast<uint8_t*>(a.outputs[o]) + skip;
  if (copy_src != nullptr) {
    for (size_t o = 0; o < a.n_outputs; o++) {
      if (a.outputs[o] == copy_src) continue;
      if (Status st = s->copy(out[o], static_cast<const uint8_t*>(copy_src) + skip, (end - begin) * elem);
          !st)
        return st;
      *queued = true;
    }
  } else {
    reduce::ReduceArgs r = a;
    r.inputs = in.data();
    r.outputs = out.data();
    r.count = end - begin;
    if (Status st = s->reduce(r); !st) return st;
    *queued = true;
  }
  if (Status st = s->record(); !st) return st;
  return s->notify(&notes_, task);
}

uint64_t GpuWork::submit(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
                         uint64_t begin, uint64_t end, uint64_t tag) {
  const uint64_t task = next_task_++;
  Task& t = tasks_[task];
  t.tag = tag;
  t.device = device;
  t.lane = lane;
  bool queued = false;
  t.error = queue(device, lane, a, copy_src, begin, end, task, &queued);
  if (!t.error) {
    // No note will come from the driver. Work of it that did reach the
    // stream may still read or write the buffers: the task ends only after
    // it (a rare error path, so a wait on the event thread is acceptable).
    if (queued) {
      auto it = streams_.find({device, lane});
      if (it != streams_.end()) (void)it->second->synchronize();
    }
    unqueued_.push_back(task);
  }
  return task;
}

const std::vector<GpuWork::Finished>& GpuWork::take(bool check_faults) {
  std::vector<Finished>* out = &finished_;
  out->clear();
  for (uint64_t task : unqueued_) {
    auto it = tasks_.find(task);
    if (it == tasks_.end()) continue;
    out->push_back({it->second.tag, it->first, it->second.error});
    tasks_.erase(it);
  }
  unqueued_.clear();
  for (uint64_t task : notes_.take()) {
    auto it = tasks_.find(task);
    if (it == tasks_.end()) continue;  // failed already by a fault check
    out->push_back({it->second.tag, it->first, it->second.error});
    tasks_.erase(it);
  }
  if (!check_faults) return finished_;
  for (auto& [where, stream] : streams_) {
    Status error;
    if (!stream->done(&error) || error) continue;
    // The stream's work failed: its notes will not come. Every task still
    // on it ends with the driver's words.
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (it->second.device != where.first || it->second.lane != where.second) {
        ++it;
        continue;
      }
      out->push_back({it->second.tag, it->first, error});
      it = tasks_.erase(it);
    }
  }
  return finished_;
}

}  // namespace gsync::pipeline
