// SPDX-License-Identifier: Apache-2.0
//
// GPU memory and the reduce kernels that run on it (docs/gpu.md). This
// header has no CUDA in it: the daemon's other layers and the tests include
// it whether or not gsync was built with CUDA. Built with CUDA
// (device_cuda.cu, reduce_kernels.cu) the calls below use the CUDA runtime;
// built without (device_none.cc) every call that needs a GPU fails with a
// Status that says so.
//
// The kernels compute what daemon/reduce/reduce.h computes, bit for bit, for
// fp32, fp16 and bf16 (accumulate in fp32, fold in index order, round once
// to nearest-even on store, no fused multiply-add, NaN propagates through
// min and max, ties keep the value folded first): a device buffer and a host
// buffer of the same job give the same result.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "daemon/core/note_queue.h"
#include "daemon/core/status.h"
#include "daemon/gpu/launch.h"
#include "daemon/reduce/reduce.h"

namespace gsync::gpu {

// Whether this build has the CUDA parts (meson feature 'cuda').
bool built_with_cuda();

// The GPUs this process can use: count > 0, or 0 and why not ("built
// without CUDA", "no CUDA driver", "no device").
struct Devices {
  int count = 0;
  std::string why_none;
};
// Asked of the CUDA runtime once; later calls return the same answer.
const Devices& devices();

// Device memory of one allocation on one device, freed with the object.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  static Status allocate(int device, size_t bytes, DeviceBuffer* out);
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

// Host memory pinned for the copy engines (cudaHostAlloc, portable: any
// device's stream may copy to and from it asynchronously), freed with the
// object: the staging of device memory that crosses hosts. Made with
// `device` current: on a thread with none the runtime would make (and
// keep) a context on GPU 0, which may be another job's, or exclusive.
class PinnedBuffer {
 public:
  static Status allocate(int device, size_t bytes, std::unique_ptr<PinnedBuffer>* out);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  PinnedBuffer() = default;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Whether kernels on `device` can read and write memory on `peer` (peer
// access; always true for the device itself, false without a GPU).
bool can_access_peer(int device, int peer);

// Makes device the calling thread's current one, its primary context made
// (what a CUDA program's first cudaSetDevice and allocation do): tests and
// tools that then call the driver API (gsync_alloc_device) from the thread.
Status use_device(int device);

// A copy between any two of host and device memory (unified addressing
// tells which is which), finished on the device when it returns (it waits
// for the whole device). Tests and benchmarks.
Status copy_sync(void* dst, const void* src, size_t bytes);

class Stream;

// A point in one stream's work that other streams may wait for on the GPU
// (cudaEvent, timing off): the daemon orders work across its streams with
// these rather than with a round trip through the event thread. Made on
// its device; recorded on a stream of that device; waited for by a stream
// of any device. create() and the destructor make its device the calling
// thread's current one and leave it so.
class Event {
 public:
  static Status create(int device, std::unique_ptr<Event>* out);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  int device() const { return device_; }

 private:
  friend class Stream;
  Event() = default;
  void* event_ = nullptr;  // cudaEvent_t
  int device_ = -1;
};

// One stream of the daemon's own on one device. create(), reduce() and the
// destructor make its device the calling thread's current one and leave it
// so (a kernel launch goes to the current device); copy(), record(),
// done() and notify() need not (a stream names its device). Work is queued
// on it and its end is polled, never waited for on the event thread:
// record() marks what is queued so far, done() says whether it finished.
class Stream {
 public:
  static Status create(int device, std::unique_ptr<Stream>* out);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues the reduction args describes; its pointers are device
  // pointers (outputs may be inputs, as on the host). An unsupported
  // dtype or op, more than kMaxTensors inputs or outputs, or a launch
  // the runtime refuses is an error naming it, with nothing queued.
  Status reduce(const reduce::ReduceArgs& args);
  // Queues a copy (device or host memory, either way).
  Status copy(void* dst, const void* src, size_t bytes);
  // Marks the work queued so far.
  Status record();
  // Marks the work queued so far with e (an event of this stream's device).
  Status record(Event& e);
  // Work queued on this stream from now on starts only after the work e
  // marked when it was recorded (on the GPU: the event thread does not wait).
  Status wait(const Event& e);
  // True when the work up to the last record() ended (and before the
  // first record()); an error of that work goes to *error and also counts
  // as ended. A fault in a kernel (an illegal address) is sticky: the
  // device's context is unusable from then on, every later call fails, and
  // only a new process gets the device back.
  bool done(Status* error);
  // Queues a push of value to notes, after the work queued so far: the
  // event loop learns which work ended without asking. The push runs on a
  // thread of the driver's and makes no CUDA call; several streams may
  // share one queue, and none of their notes is lost (core/note_queue.h).
  Status notify(NoteQueue* notes, uint64_t value);
  // Waits for everything queued: tests and benchmarks only.
  Status synchronize();

  int device() const { return device_; }

 private:
  Stream() = default;
  int device_ = -1;
  void* stream_ = nullptr;  // cudaStream_t
  void* event_ = nullptr;   // cudaEvent_t
  int sm_count_ = 0;
};

}  // namespace gsync::gpu
