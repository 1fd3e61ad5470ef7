// SPDX-License-Identifier: Apache-2.0
//
// device.h over the CUDA runtime: which GPUs there are, device memory,
// streams and their completion events. The kernels are in
// reduce_kernels.cu.
#include <cuda_runtime.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>

#include "daemon/gpu/cuda_status.h"
#include "daemon/gpu/device.h"

namespace gsync::gpu {

bool built_with_cuda() { return true; }

const Devices& devices() {
  // A function-local static: the runtime is asked once, by the first
  // caller, and the answer (a machine without a driver included) kept.
  static const Devices found = [] {
    Devices d;
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      d.why_none = "no GPU: " + cuda_status(err, "cudaGetDeviceCount", -1).message();
      if (err == cudaErrorInsufficientDriver) {
        // The runtime says the same of a machine without a driver and of
        // one whose driver is too old; the kernel module's file tells them
        // apart (a test may skip for the first, never for the second).
        std::ifstream version("/proc/driver/nvidia/version");
        std::string line;
        if (version && std::getline(version, line))
          d.why_none += ": the NVIDIA driver loaded is older than this CUDA runtime (" + line +
                        "; CUDA " + std::to_string(CUDART_VERSION / 1000) +
                        " needs a newer one)";
        else
          d.why_none += ": no NVIDIA driver is loaded (no /proc/driver/nvidia/version)";
      }
      // The runtime keeps the error sticky for this thread otherwise.
      (void)cudaGetLastError();
    } else if (n == 0) {
      d.why_none = "no GPU: the CUDA driver sees no device";
    } else {
      d.count = n;
    }
    return d;
  }();
  return found;
}

namespace {

Status need_device(int device) {
  const Devices& d = devices();
  if (d.count == 0) return Status(GSYNC_ERR_UNSUPPORTED, d.why_none);
  if (device < 0 || device >= d.count) {
    return Status(GSYNC_ERR_INVALID, "GPU " + std::to_string(device) + " does not exist (" +
                                         std::to_string(d.count) + " visible)");
  }
  return cuda_status(cudaSetDevice(device), "cudaSetDevice", device);
}

}  // namespace

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(std::exchange(other.device_, -1)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (ptr_ == nullptr) return;
  // cudaFree synchronizes the device; a failure here (a device lost) has
  // nobody to tell and the memory is gone with the context anyway.
  (void)cudaSetDevice(device_);
  (void)cudaFree(ptr_);
  ptr_ = nullptr;
}

Status DeviceBuffer::allocate(int device, size_t bytes, DeviceBuffer* out) {
  if (Status s = need_device(device); !s) return s;
  DeviceBuffer b;
  b.device_ = device;
  b.bytes_ = bytes;
  // cudaMalloc of 0 bytes gives a null pointer; a real (1-byte) allocation
  // keeps "an allocation has an address" true for the callers.
  if (Status s = cuda_status(cudaMalloc(&b.ptr_, bytes == 0 ? 1 : bytes), "cudaMalloc", device);
      !s) {
    b.ptr_ = nullptr;
    return Status(s.code(), s.message() + " (" + std::to_string(bytes) + " bytes)");
  }
  *out = std::move(b);
  return Status::ok();
}

Status PinnedBuffer::allocate(int device, size_t bytes, std::unique_ptr<PinnedBuffer>* out) {
  if (Status s = need_device(device); !s) return s;
  std::unique_ptr<PinnedBuffer> b(new PinnedBuffer());
  if (Status s = cuda_status(cudaHostAlloc(&b->ptr_, bytes == 0 ? 1 : bytes, cudaHostAllocPortable),
                             "cudaHostAlloc", -1);
      !s) {
    b->ptr_ = nullptr;
    return Status(s.code(), s.message() + " (" + std::to_string(bytes) + " bytes of pinned memory)");
  }
  b->bytes_ = bytes;
  *out = std::move(b);
  return Status::ok();
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
}

bool can_access_peer(int device, int peer) {
  if (device == peer) return device >= 0 && device < devices().count;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return can != 0;
}

Status use_device(int device) {
  if (Status s = need_device(device); !s) return s;
  // cudaFree(nullptr) makes the primary context current and does nothing
  // else: the runtime's documented way to initialise it.
  return cuda_status(cudaFree(nullptr), "cudaFree(nullptr)", device);
}

namespace {

// The device that owns p, or -1 for host memory.
int device_of(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device : -1;
}

}  // namespace

Status copy_sync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  if (devices().count == 0) return Status(GSYNC_ERR_UNSUPPORTED, devices().why_none);
  int device = device_of(dst);
  if (device < 0) device = device_of(src);
  if (device >= 0) {
    if (Status s = cuda_status(cudaSetDevice(device), "cudaSetDevice", device); !s) return s;
  }
  if (Status s = cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy", device);
      !s) {
    return s;
  }
  // From pageable host memory cudaMemcpy may return once the bytes are
  // staged, before they reach the device; a kernel on the daemon's
  // non-blocking stream is not ordered after it. Wait for the device.
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device);
}

Status Stream::create(int device, std::unique_ptr<Stream>* out) {
  if (Status s = need_device(device); !s) return s;
  std::unique_ptr<Stream> st(new Stream());
  st->device_ = device;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  // Non-blocking: the legacy default stream of the daemon's own context
  // (what copy_sync's cudaMemcpy and cudaFree use) synchronizes with every
  // blocking stream of that context; a client's streams are another
  // process's and never order the daemon's. What was made before a failure
  // is released by st's destructor.
  const Status made_stream = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                         "cudaStreamCreateWithFlags", device);
  st->stream_ = stream;
  if (!made_stream) return made_stream;
  const Status made_event = cuda_status(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                        "cudaEventCreateWithFlags", device);
  st->event_ = event;
  if (!made_event) return made_event;
  const Status asked =
      cuda_status(cudaDeviceGetAttribute(&st->sm_count_, cudaDevAttrMultiProcessorCount, device),
                  "cudaDeviceGetAttribute(MultiProcessorCount)", device);
  if (!asked) return asked;
  *out = std::move(st);
  return Status::ok();
}

Stream::~Stream() {
  if (stream_ == nullptr && event_ == nullptr) return;
  (void)cudaSetDevice(device_);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (event_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status Stream::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream_)),
      "cudaMemcpyAsync", device_);
}

Status Event::create(int device, std::unique_ptr<Event>* out) {
  if (Status s = need_device(device); !s) return s;
  std::unique_ptr<Event> e(new Event());
  e->device_ = device;
  cudaEvent_t ev = nullptr;
  if (Status s = cuda_status(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags", device);
      !s)
    return s;
  e->event_ = ev;
  *out = std::move(e);
  return Status::ok();
}

Event::~Event() {
  if (event_ == nullptr) return;
  (void)cudaSetDevice(device_);
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

Status Stream::record(Event& e) {
  return cuda_status(cudaEventRecord(static_cast<cudaEvent_t>(e.event_),
                                     static_cast<cudaStream_t>(stream_)),
                     "cudaEventRecord", device_);
}

Status Stream::wait(const Event& e) {
  return cuda_status(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_),
                                         static_cast<cudaEvent_t>(e.event_), 0),
                     "cudaStreamWaitEvent", device_);
}

Status Stream::record() {
  return cuda_status(
      cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(stream_)),
      "cudaEventRecord", device_);
}

bool Stream::done(Status* error) {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) return false;
  if (err != cudaSuccess) {
    Status why = cuda_status(err, "the stream's work", device_);
    *error = why;
  }
  return true;
}

namespace {

struct Note {
  NoteQueue* notes;
  uint64_t value;
};

void CUDART_CB write_note(void* p) {
  auto* note = static_cast<Note*>(p);
  // The queue outlives the stream: its owner destroys the streams, which
  // wait for their work, first.
  note->notes->push(note->value);
  delete note;
}

}  // namespace

Status Stream::notify(NoteQueue* notes, uint64_t value) {
  auto* note = new Note{notes, value};
  Status s = cuda_status(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream_), write_note, note),
                         "cudaLaunchHostFunc", device_);
  if (!s) delete note;
  return s;
}

Status Stream::synchronize() {
  return cuda_status(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                     "cudaStreamSynchronize", device_);
}

}  // namespace gsync::gpu
