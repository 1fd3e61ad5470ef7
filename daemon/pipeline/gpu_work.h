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
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "daemon/core/note_queue.h"
#include "daemon/core/status.h"
#include "daemon/reduce/reduce.h"

namespace gsync::gpu {
class Event;
class Stream;
}

namespace gsync::pipeline {

class GpuWork {
 public:
  // A GPU's streams, one per kind of work: the copies to and from pinned
  // host memory overlap each other and the kernels. Work that follows other
  // GPU work (the copy out after the fold, the store after the copy back)
  // names it (`after`) and is ordered after it on the device - each task's
  // end is an event its followers' streams wait for - so the pipeline
  // queues it at once instead of after a round trip through the event
  // thread; work that follows the host (the wire) is queued once its
  // upstream has ended.
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
  // after: tasks whose work this task's must follow; those still in
  // flight are waited for on the device, those ended need nothing, and one
  // that failed to queue fails this one too (nothing is queued).
  // note false: no note of its own (no host function stalls the stream
  // after it): it ends with the next noted task of its stream, which the
  // stream runs after it - for a burst of work of which only the end
  // matters (a fold queued chunk by chunk notes its last chunk only).
  uint64_t submit(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
                  uint64_t begin, uint64_t end, uint64_t tag,
                  const std::vector<uint64_t>& after = {}, bool note = true);

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
    std::unique_ptr<gpu::Event> end;  // recorded after its work: followers wait for it
  };
  // *queued: whether any of the work reached the stream (then, on a later
  // failure, the task must not end before that work has).
  Status queue(int device, Lane lane, const reduce::ReduceArgs& a, const void* copy_src,
               uint64_t begin, uint64_t end, uint64_t task, const std::vector<uint64_t>& after,
               bool note, bool* queued);
  // Every task of the stream up to and including `task` ended (its note
  // came: the stream ran them in order).
  void end_through(uint64_t task, std::vector<Finished>* out);
  Status stream_for(int device, Lane lane, gpu::Stream** out);
  // The stream waits for the tasks of `after` still in flight.
  Status wait_for(gpu::Stream& s, const std::vector<uint64_t>& after);
  // An event of device's, from the spares or made; a task's goes back to
  // the spares when the task ends.
  Status event_for(int device, std::unique_ptr<gpu::Event>* out);
  void retire(Task& t);

  NoteQueue notes_;  // the tasks whose work ended, from the driver's threads
  uint64_t next_task_ = 1;
  std::map<std::pair<int, Lane>, std::unique_ptr<gpu::Stream>> streams_;
  std::map<uint64_t, Task> tasks_;                       // in flight
  std::vector<uint64_t> unqueued_;  // tasks that failed to queue: no note will come
  std::vector<uint64_t> landed_;    // ended by a wait for their stream (a failure's path)
  // The tasks queued on each stream, in order, not ended yet.
  std::map<std::pair<int, Lane>, std::deque<uint64_t>> queued_;
  std::vector<Finished> finished_;  // take()'s
  std::map<int, std::vector<std::unique_ptr<gpu::Event>>> spare_events_;  // by device
};

}  // namespace gsync::pipeline
