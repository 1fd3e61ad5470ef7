// SPDX-License-Identifier: Apache-2.0
//
// gsync_alloc_device: GPU memory made in this process's CUDA context with
// the VMM API (cuMemCreate), exported as a POSIX fd and handed to the daemon
// on the session's socket (protocol/device.h), which maps it once; a tensor
// in it is then named in a submission by (allocation id, offset) and
// reduced on the GPU where it lies. Either process may let go first: the
// memory is freed when both have (docs/gpu.md, "Ownership across the two
// processes").
//
// Thread-safety: two mutexes of its own, never held with the session's: one
// across a request and its reply on the socket (one at a time), one for the
// table, held briefly (a submission's lookup never waits for a reply).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace gsync::client {

namespace cu {
struct Driver;
}

class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();  // unmaps what is left (the daemon keeps its own mappings)
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // GSYNC_OK, or a code with *why set. sock: the session's socket, -1 when
  // it is closed (alloc then fails; free unmaps here only).
  int alloc(int sock, size_t bytes, void** out, std::string* why);
  int free(int sock, void* ptr, std::string* why);
  // Where [p, p + bytes) lies: GSYNC_OK with *entry_offset when inside one
  // allocation; GSYNC_ERR_AGAIN when p is in none (host memory, or device
  // memory of someone else's); GSYNC_ERR_INVALID with *why when it starts
  // in one and runs past its end.
  int find(const void* p, uint64_t bytes, uint64_t* entry_offset, std::string* why) const;
  // Whether p is device memory at all (the driver says so; false where this
  // process has not loaded CUDA).
  static bool is_device_pointer(const void* p);

 private:
  struct Alloc {
    uint64_t id = 0;
    size_t asked = 0;    // the caller's size: the bounds of its tensors
    size_t mapped = 0;   // rounded up to the granularity
    unsigned long long handle = 0;  // CUmemGenericAllocationHandle
  };
  // One request, and (wait) its reply.
  int exchange(int sock, uint32_t kind, uint64_t id, uint64_t bytes, const char* bus_id, int fd,
               std::string* why, bool wait = true);
  void unmap(uintptr_t va, const Alloc& a) const;
  // The memory of a new allocation of `bytes` on GPU dev: created, mapped
  // at *va in this process, open to dev, exported as *fd. On a failure
  // nothing of it is left.
  int create(const cu::Driver& d, int dev, size_t bytes, Alloc* a, unsigned long long* va, int* fd,
             std::string* why);

  mutable std::mutex mu_;               // allocs_ and next_id_, held briefly
  std::map<uintptr_t, Alloc> allocs_;  // by the client's address
  uint64_t next_id_ = 1;
  std::mutex exchange_mu_;  // a request and its reply on the socket
  uint64_t seq_ = 0;        // under exchange_mu_
};

}  // namespace gsync::client
