// SPDX-License-Identifier: Apache-2.0
//
// Device memory a client allocated and exported to the daemon (docs/gpu.md,
// "Ownership across the two processes"). The client made it with the CUDA
// VMM API (cuMemCreate) and sent a POSIX fd handle of it on its unix socket;
// the daemon imports the handle and maps the memory into its own address
// space on the same device, once per allocation. The physical memory is
// freed only when the client has released it and this mapping is gone, so
// a client that dies while the daemon reduces into its memory leaves no op
// writing into freed memory: the op ends on the daemon's stream, the last
// reference drops, and then the mapping goes. No CUDA in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/core/status.h"

namespace gsync::gpu {

class ImportedMemory {
 public:
  // Imports fd (not taken: the caller closes it) as bytes of device memory
  // on the GPU with this PCI bus id, mapped for reading and writing. A
  // machine without a GPU, a bus id that is no device of this process, a
  // size that is not the allocation's, an fd that is no CUDA allocation:
  // an error naming it, and nothing mapped.
  static Status open(int fd, uint64_t bytes, const std::string& pci_bus_id,
                     std::unique_ptr<ImportedMemory>* out);
  ~ImportedMemory();
  ImportedMemory(const ImportedMemory&) = delete;
  ImportedMemory& operator=(const ImportedMemory&) = delete;

  void* get() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(va_)); }
  uint64_t bytes() const { return bytes_; }
  int device() const { return device_; }
  // The GPUs whose kernels may read and write it (bit d: GPU d): its own,
  // and those with peer access to it.
  uint64_t access() const { return access_; }

 private:
  ImportedMemory() = default;
  uint64_t handle_ = 0;  // CUmemGenericAllocationHandle
  uint64_t va_ = 0;      // CUdeviceptr of the reservation
  uint64_t bytes_ = 0;
  bool mapped_ = false;
  int device_ = -1;
  uint64_t access_ = 0;
};

}  // namespace gsync::gpu
