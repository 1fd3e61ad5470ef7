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

Status GpuWork::event_for(int device, std::unique_ptr<gpu::Event>* out) {
  auto& spare = spare_events_[device];
  if (spare.empty()) return gpu::Event::create(device, out);
  *out = std::move(spare.back());
  spare.pop_back();
  return Status::ok();
}

void GpuWork::retire(Task& t) {
  // Recorded again only by a later task: a wait queued on it before now
  // already took the state it had (cudaStreamWaitEvent).
  if (t.end) spare_events_[t.device].push_back(std::move(t.end));
}

Status GpuWork::wait_for(gpu::Stream& s, const std::vector<uint64_t>& after) {
  for (uint64_t up : after) {
    auto it = tasks_.find(up);
    if (it == tasks_.end()) continue;  // it ended: its work is done
    if (!it->second.error)
      return Status(it->second.error.code(),
                    "the GPU work it follows failed: " + it->second.error.message());
    if (it->second.end) {
      if (Status st = s.wait(*it->second.end); !st) return st;
    }
  }
  return Status::ok();
}

Status GpuWork::queue(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
                      uint64_t begin, uint64_t end, uint64_t task,
                      const std::vector<uint64_t>& after, bool note, bool* queued) {
  *queued = false;
  if (notes_.fd() < 0)
    return Status(GSYNC_ERR_INTERNAL, "the GPU work's eventfd could not be made");
  gpu::Stream* s = nullptr;
  if (Status st = stream_for(device, lane, &s); !st) return st;
  if (Status st = wait_for(*s, after); !st) return st;
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
  std::unique_ptr<gpu::Event> ev;
  if (Status st = event_for(device, &ev); !st) return st;
  if (Status st = s->record(*ev); !st) return st;
  tasks_[task].end = std::move(ev);
  if (note)
    if (Status st = s->notify(&notes_, task); !st) return st;
  queued_[{device, lane}].push_back(task);
  return Status::ok();
}

uint64_t GpuWork::submit(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
                         uint64_t begin, uint64_t end, uint64_t tag,
                         const std::vector<uint64_t>& after, bool note) {
  const uint64_t task = next_task_++;
  Task& t = tasks_[task];
  t.tag = tag;
  t.device = device;
  t.lane = lane;
  bool queued = false;
  t.error = queue(device, lane, a, copy_src, begin, end, task, after, note, &queued);
  if (!t.error) {
    // No note will come from the driver. Work of it that did reach the
    // stream may still read or write the buffers, and tasks before it
    // without a note of their own may wait for one that will not come:
    // they all end only after a wait for the stream (a rare error path, so
    // a wait on the event thread is acceptable).
    auto& before = queued_[{device, lane}];
    if (queued || !before.empty()) {
      auto it = streams_.find({device, lane});
      if (it != streams_.end()) (void)it->second->synchronize();
    }
    for (uint64_t b : before) landed_.push_back(b);
    before.clear();
    unqueued_.push_back(task);
  }
  return task;
}

void GpuWork::end_through(uint64_t task, std::vector<Finished>* out) {
  auto t = tasks_.find(task);
  if (t == tasks_.end()) return;  // failed already by a fault check
  auto& order = queued_[{t->second.device, t->second.lane}];
  while (!order.empty()) {
    const uint64_t id = order.front();
    order.pop_front();
    auto it = tasks_.find(id);
    if (it != tasks_.end()) {
      out->push_back({it->second.tag, it->first, it->second.error});
      retire(it->second);
      tasks_.erase(it);
    }
    if (id == task) break;
  }
}

const std::vector<GpuWork::Finished>& GpuWork::take(bool check_faults) {
  std::vector<Finished>* out = &finished_;
  out->clear();
  for (uint64_t task : unqueued_) {
    auto it = tasks_.find(task);
    if (it == tasks_.end()) continue;
    out->push_back({it->second.tag, it->first, it->second.error});
    retire(it->second);
    tasks_.erase(it);
  }
  unqueued_.clear();
  for (uint64_t task : landed_) {
    auto it = tasks_.find(task);
    if (it == tasks_.end()) continue;
    out->push_back({it->second.tag, it->first, it->second.error});
    retire(it->second);
    tasks_.erase(it);
  }
  landed_.clear();
  for (uint64_t task : notes_.take()) end_through(task, out);
  if (!check_faults) return finished_;
  for (auto& [where, stream] : streams_) {
    Status error;
    if (!stream->done(&error) || error) continue;
    // The stream's work failed: its notes will not come. Every task still
    // on it ends with the driver's words.
    queued_[where].clear();
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (it->second.device != where.first || it->second.lane != where.second) {
        ++it;
        continue;
      }
      out->push_back({it->second.tag, it->first, error});
      retire(it->second);
      it = tasks_.erase(it);
    }
  }
  return finished_;
}

}  // namespace gsync::pipeline
