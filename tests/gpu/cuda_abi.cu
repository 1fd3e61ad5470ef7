// SPDX-License-Identifier: Apache-2.0
//
// libgsync declares the CUDA driver types it uses itself, so that it builds
// without a CUDA toolkit (libclient/cuda_driver.h). Here, where a toolkit is
// installed, they are checked against cuda.h: a size, an offset or a
// constant that differs stops the build.
#include <cuda.h>

#include <cstddef>

#include "libclient/cuda_driver.h"

namespace cu = gsync::client::cu;

#define SAME_LAYOUT(ours, theirs)                                  \
  static_assert(sizeof(ours) == sizeof(theirs), #ours " size");    \
  static_assert(alignof(ours) == alignof(theirs), #ours " alignment")
#define SAME_OFFSET(ours, a, theirs, b) \
  static_assert(offsetof(ours, a) == offsetof(theirs, b), #ours "." #a " offset")

SAME_LAYOUT(cu::MemLocation, CUmemLocation);
SAME_OFFSET(cu::MemLocation, id, CUmemLocation, id);
SAME_LAYOUT(cu::MemAllocationProp, CUmemAllocationProp);
SAME_OFFSET(cu::MemAllocationProp, requested_handle_types, CUmemAllocationProp,
            requestedHandleTypes);
SAME_OFFSET(cu::MemAllocationProp, location, CUmemAllocationProp, location);
SAME_OFFSET(cu::MemAllocationProp, win32_handle_meta_data, CUmemAllocationProp,
            win32HandleMetaData);
SAME_OFFSET(cu::MemAllocationProp, alloc_flags, CUmemAllocationProp, allocFlags);
SAME_LAYOUT(cu::MemAccessDesc, CUmemAccessDesc);
SAME_OFFSET(cu::MemAccessDesc, flags, CUmemAccessDesc, flags);
static_assert(sizeof(cu::DevicePtr) == sizeof(CUdeviceptr));
static_assert(sizeof(cu::GenericAllocationHandle) == sizeof(CUmemGenericAllocationHandle));
static_assert(sizeof(cu::Result) == sizeof(CUresult) && sizeof(cu::Device) == sizeof(CUdevice));
static_assert(cu::kSuccess == CUDA_SUCCESS);
static_assert(cu::kHandleTypePosixFd == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
static_assert(cu::kAllocationTypePinned == CU_MEM_ALLOCATION_TYPE_PINNED);
static_assert(cu::kLocationTypeDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(cu::kAccessReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
static_assert(cu::kGranularityRecommended == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
static_assert(cu::kPointerAttributeMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(cu::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(cu::kPointerAttributeIsManaged == CU_POINTER_ATTRIBUTE_IS_MANAGED);
static_assert(cu::kAttributeVmmSupported == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
static_assert(cu::kAttributePosixFdSupported ==
              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
static_assert(CUDA_ERROR_OUT_OF_MEMORY == 2);  // device_memory.cc names it by value

// The CUDA version the checks ran against (the test prints it).
int gsync_cuda_abi_version() { return CUDA_VERSION; }
