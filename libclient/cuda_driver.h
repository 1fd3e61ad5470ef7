// SPDX-License-Identifier: Apache-2.0
//
// The few calls of the CUDA driver API that device memory needs
// (gsync_alloc_device), found at run time in libcuda.so.1. libgsync links no
// CUDA library and needs no CUDA toolkit to build: it is loaded into
// processes that may have no GPU, and a framework brings its own runtime
// while the driver is the system's. The types below are the driver API's,
// as cuda.h declares them (a stable ABI since CUDA 10.2); tests/gpu/cuda_abi.cu
// checks them against cuda.h wherever a toolkit is installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gsync::client::cu {

using Result = int;  // CUresult
using Device = int;  // CUdevice
using DevicePtr = unsigned long long;                 // CUdeviceptr
using GenericAllocationHandle = unsigned long long;  // CUmemGenericAllocationHandle

constexpr Result kSuccess = 0;
constexpr int kHandleTypePosixFd = 0x1;        // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
constexpr int kAllocationTypePinned = 0x1;     // CU_MEM_ALLOCATION_TYPE_PINNED
constexpr int kLocationTypeDevice = 0x1;       // CU_MEM_LOCATION_TYPE_DEVICE
constexpr int kAccessReadWrite = 0x3;          // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
constexpr int kGranularityRecommended = 0x1;   // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
constexpr int kPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kPointerAttributeIsManaged = 8;   // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kMemoryTypeDevice = 0x2;     // CU_MEMORYTYPE_DEVICE
constexpr int kAttributeVmmSupported = 102;     // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
constexpr int kAttributePosixFdSupported = 103;  // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED

struct MemLocation {  // CUmemLocation
  int type;
  int id;
};

struct MemAllocationProp {  // CUmemAllocationProp
  int type;
  int requested_handle_types;
  MemLocation location;
  void* win32_handle_meta_data;
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
};

struct MemAccessDesc {  // CUmemAccessDesc
  MemLocation location;
  int flags;
};

struct Driver {
  Result (*init)(unsigned int flags);
  Result (*ctx_get_device)(Device* device);
  Result (*device_get_attribute)(int* value, int attribute, Device device);
  Result (*device_get_pci_bus_id)(char* bus_id, int len, Device device);
  Result (*mem_get_allocation_granularity)(size_t* granularity, const MemAllocationProp* prop,
                                           int option);
  Result (*mem_create)(GenericAllocationHandle* handle, size_t size, const MemAllocationProp* prop,
                       unsigned long long flags);
  Result (*mem_export_to_shareable_handle)(void* shareable, GenericAllocationHandle handle,
                                           int handle_type, unsigned long long flags);
  Result (*mem_address_reserve)(DevicePtr* ptr, size_t size, size_t alignment, DevicePtr addr,
                                unsigned long long flags);
  Result (*mem_address_free)(DevicePtr ptr, size_t size);
  Result (*mem_map)(DevicePtr ptr, size_t size, size_t offset, GenericAllocationHandle handle,
                    unsigned long long flags);
  Result (*mem_unmap)(DevicePtr ptr, size_t size);
  Result (*mem_set_access)(DevicePtr ptr, size_t size, const MemAccessDesc* desc, size_t count);
  Result (*mem_release)(GenericAllocationHandle handle);
  Result (*pointer_get_attribute)(void* data, int attribute, DevicePtr ptr);
  Result (*get_error_name)(Result error, const char** name);
};

// The driver, loaded and initialised once (cuInit); null with *why set
// ("libcuda.so.1: cannot open shared object file ...: no NVIDIA driver")
// where there is none.
const Driver* driver(std::string* why);

// Whether this process has loaded the driver (someone uses CUDA here); it
// loads nothing. Only then can a pointer be device memory.
const Driver* driver_if_loaded();

// "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY"
std::string error_text(const Driver& d, const char* call, Result r);

}  // namespace gsync::client::cu
