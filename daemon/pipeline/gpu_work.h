// SPDX-License-Identifier: Apache-2.0
//
// The stages' work on device buffers (docs/gpu.md, "Fold and store on the
// GPU"): the reduce kernels and copies queued on the daemon's own streams
// of each GPU (daemon/gpu/device.h), the way LocalWork hands host work to
// the pool. The event thread never waits on a GPU: each task ends
// with a note (its id) that the driver writes to a pipe the event loop
// watches. A fault in a kernel stops the notes of its stream, so the
// pipeline also asks each stream with tasks in flight, now and then,
// whether it failed, and fails those tasks with the driver's words.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "daemon/core/note_queue.h"
#include "daemon/core/status.h"
#include "daemon/reduce/reduce.h"

namespace gsync::gpu {
class Stream;
}

namespace gsync::pipeline {

class GpuWork {
 public:
  // A GPU's streams, one per kind of work: the copies to and from pinned
  // host memory overlap each other and the kernels. Work is ordered across
  // streams by the pipeline itself: a stage queues only ranges whose
  // upstream work has ended (its note came back).
  enum class Lane : uint8_t { kCompute = 0, kToHost = 1, kToDevice = 2 };

  GpuWork();
  ~GpuWork();  // waits for the GPUs' work (the streams' destructors)
  GpuWork(const GpuWork&) = delete;
  GpuWork& operator=(const GpuWork&) = delete;

  // Readable when tasks may have ended (take()).
  int done_fd() const { return notes_.fd(); }
  // Queues elements [begin, end) of a on device's stream (copy_src set:
  // plain copies into a's outputs instead) and returns the task. A task
  // that cannot be queued (no GPU, a launch the driver refuses) still gets
  // an id and ends with its error through the next take(true) (the
  // pipeline's fault check, within 100 ms), like any other.
  uint64_t submit(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
                  uint64_t begin, uint64_t end, uint64_t tag);

  struct Finished {
    uint64_t tag = 0;
    uint64_t task = 0;
    Status status;
  };
  // The tasks that ended since the last call (valid until the next);
  // check_faults also asks each stream with tasks in flight whether its
  // work failed.
  const std::vector<Finished>& take(bool check_faults);
  size_t in_flight() const { return tasks_.size(); }

 private:
  struct Task {
    uint64_t tag = 0;
    int device = -1;
    Lane lane = Lane::kCompute;
    Status error;  // it could not be queued
  };
  // *queued: whether any of the work reached the stream (then, on a later
  // failure, the task must not end before that work has).
  Status queue(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
               uint64_t begin, uint64_t end, uint64_t task, bool* queued);
  Status stream_for(int device, Lane lane, gpu::Stream** out);

  NoteQueue notes_;  // the tasks whose work ended, from the driver's threads
  uint64_t next_task_ = 1;
  std::map<std::pair<int, Lane>, std::unique_ptr<gpu::Stream>> streams_;
  std::map<uint64_t, Task> tasks_;                       // in flight
  std::vector<uint64_t> unqueued_;  // tasks that failed to queue: no note will come
  std::vector<Finished> finished_;  // take()'s
};

}  // namespace gsync::pipeline
