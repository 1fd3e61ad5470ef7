// SPDX-License-Identifier: Apache-2.0
//
// imported.h over the CUDA driver's VMM calls. The daemon does not link
// libcuda (it must start on a machine without a driver): the calls are
// looked up through the runtime, which loads the driver when there is one.
#include <cuda.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "daemon/gpu/cuda_status.h"
#include "daemon/gpu/device.h"
#include "daemon/gpu/imported.h"

namespace gsync::gpu {

namespace {

struct Driver {
  decltype(&cuMemImportFromShareableHandle) import = nullptr;
  decltype(&cuMemGetAllocationPropertiesFromHandle) properties = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) unreserve = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  decltype(&cuPointerGetAttribute) pointer_attribute = nullptr;
  std::string why_none;  // set when a call could not be found
};

template <typename F>
void find(const char* name, F* fn, std::string* why) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // 12000: the calls' signatures as of CUDA 12, which they still have.
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    if (why->empty()) why->assign(std::string("the CUDA driver has no ") + name);
    return;
  }
  *fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    find("cuMemImportFromShareableHandle", &x.import, &x.why_none);
    find("cuMemGetAllocationPropertiesFromHandle", &x.properties, &x.why_none);
    find("cuMemGetAllocationGranularity", &x.granularity, &x.why_none);
    find("cuMemAddressReserve", &x.reserve, &x.why_none);
    find("cuMemAddressFree", &x.unreserve, &x.why_none);
    find("cuMemMap", &x.map, &x.why_none);
    find("cuMemUnmap", &x.unmap, &x.why_none);
    find("cuMemSetAccess", &x.set_access, &x.why_none);
    find("cuMemRelease", &x.release, &x.why_none);
    find("cuGetErrorName", &x.error_name, &x.why_none);
    find("cuPointerGetAttribute", &x.pointer_attribute, &x.why_none);
    return x;
  }();
  return d;
}

Status cu_status(CUresult r, const char* what, int device) {
  if (r == CUDA_SUCCESS) return Status::ok();
  const char* name = "unknown CUresult";
  if (driver().error_name != nullptr) (void)driver().error_name(r, &name);
  const int code = r == CUDA_ERROR_OUT_OF_MEMORY ? GSYNC_ERR_NOMEM : GSYNC_ERR_INVALID;
  return Status(code, std::string(what) + " on GPU " + std::to_string(device) + ": " + name);
}

}  // namespace

Status ImportedMemory::open(int fd, uint64_t bytes, const std::string& pci_bus_id,
                            std::unique_ptr<ImportedMemory>* out) {
  if (devices().count == 0) return Status(GSYNC_ERR_UNSUPPORTED, devices().why_none);
  const Driver& d = driver();
  if (!d.why_none.empty()) return Status(GSYNC_ERR_UNSUPPORTED, "no GPU memory import: " + d.why_none);
  int device = -1;
  if (cudaDeviceGetByPCIBusId(&device, pci_bus_id.c_str()) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(GSYNC_ERR_INVALID, "device memory on GPU " + pci_bus_id +
                                         ", which is not a GPU this daemon sees (CUDA_VISIBLE_DEVICES?)");
  }
  // A GPU that lets one process in (EXCLUSIVE_PROCESS, common on shared
  // clusters) or none (PROHIBITED) cannot be shared by a client and the
  // daemon: the daemon's context would fail with "busy or unavailable", or
  // take the GPU from the training process. Asked before any context is
  // made (the attribute needs none), and refused naming the mode.
  int mode = cudaComputeModeDefault;
  if (Status s = cuda_status(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, device),
                             "cudaDeviceGetAttribute(ComputeMode)", device);
      !s)
    return s;
  if (mode == cudaComputeModeExclusiveProcess || mode == cudaComputeModeProhibited)
    return Status(GSYNC_ERR_UNSUPPORTED,
                  "GPU " + pci_bus_id + " is in compute mode " +
                      (mode == cudaComputeModeProhibited ? "PROHIBITED" : "EXCLUSIVE_PROCESS") +
                      ": only one process may use it, and gsyncd must share it with the "
                      "training process (nvidia-smi -c DEFAULT; docs/gpu.md)");
  if (Status s = cuda_status(cudaSetDevice(device), "cudaSetDevice", device); !s) return s;
  std::unique_ptr<ImportedMemory> m(new ImportedMemory());
  m->device_ = device;
  CUmemGenericAllocationHandle handle = 0;
  if (Status s = cu_status(d.import(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                           "cuMemImportFromShareableHandle", device);
      !s) {
    return s;
  }
  m->handle_ = handle;  // released by m's destructor from here on
  CUmemAllocationProp prop{};
  if (Status s = cu_status(d.properties(&prop, handle), "cuMemGetAllocationPropertiesFromHandle", device); !s)
    return s;
  // The bus id chose the GPU; the handle's own location id may be in the
  // client's numbering (CUDA_VISIBLE_DEVICES), so only its type is checked.
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return Status(GSYNC_ERR_INVALID, "the allocation said to be on GPU " + pci_bus_id +
                                         " is not device memory");
  // The granularity of this daemon's GPU: the properties' location id is
  // the exporter's numbering, which may name another GPU here.
  CUmemAllocationProp here = prop;
  here.location.id = device;
  size_t granularity = 0;
  if (Status s = cu_status(d.granularity(&granularity, &here, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                           "cuMemGetAllocationGranularity", device);
      !s)
    return s;
  if (granularity == 0 || bytes % granularity != 0)
    return Status(GSYNC_ERR_INVALID, std::to_string(bytes) +
                                         " bytes is not a multiple of the allocation's granularity (" +
                                         std::to_string(granularity) + ")");
  CUdeviceptr va = 0;
  // Mapped at the size the client gave: larger than the allocation fails
  // in the driver; the daemon's bounds are what it mapped.
  if (Status s = cu_status(d.reserve(&va, bytes, granularity, 0, 0), "cuMemAddressReserve", device);
      !s)
    return s;
  m->va_ = va;
  m->bytes_ = bytes;
  if (Status s = cu_status(d.map(va, bytes, 0, handle, 0), "cuMemMap", device); !s) {
    return Status(s.code(), s.message() + " (" + std::to_string(bytes) +
                                " bytes: not the size the allocation has?)");
  }
  m->mapped_ = true;
  // Read and write from its own GPU and from every GPU with peer access to
  // it: a kernel on any of them may then fold buffers of several GPUs
  // (docs/gpu.md, "Several GPUs on a host").
  std::vector<CUmemAccessDesc> access;
  for (int other = 0; other < devices().count && other < 64; other++) {
    if (!can_access_peer(other, device)) continue;
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = other;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(a);
    m->access_ |= uint64_t{1} << other;
  }
  if (Status s = cu_status(d.set_access(va, bytes, access.data(), access.size()), "cuMemSetAccess",
                           device);
      !s)
    return s;
  // The memory is where the request said: the GPU the bus id names, in
  // this process's numbering. A client that named another GPU (its own
  // numbering taken for a bus id, a stale one) would otherwise have every
  // op fold it from the wrong device, or fault.
  int where = -1;
  if (Status s = cu_status(d.pointer_attribute(&where, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va),
                           "cuPointerGetAttribute(DEVICE_ORDINAL)", device);
      !s)
    return s;
  if (where != device) {
    char bus[32] = "?";
    (void)cudaDeviceGetPCIBusId(bus, sizeof bus, where);
    return Status(GSYNC_ERR_INVALID, "the allocation said to be on GPU " + pci_bus_id +
                                         " is on GPU " + bus + " (the daemon's GPU " +
                                         std::to_string(where) + ")");
  }
  *out = std::move(m);
  return Status::ok();
}

ImportedMemory::~ImportedMemory() {
  const Driver& d = driver();
  // Nothing to tell on failure: the context (and the mapping) go with the
  // process anyway.
  if (mapped_) (void)d.unmap(static_cast<CUdeviceptr>(va_), bytes_);
  if (va_ != 0) (void)d.unreserve(static_cast<CUdeviceptr>(va_), bytes_);
  if (handle_ != 0) (void)d.release(static_cast<CUmemGenericAllocationHandle>(handle_));
}

}  // namespace gsync::gpu
