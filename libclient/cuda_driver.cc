// SPDX-License-Identifier: Apache-2.0
#include "libclient/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace gsync::client::cu {

namespace {

constexpr const char* kLibrary = "libcuda.so.1";

struct Loaded {
  Driver driver{};
  bool ok = false;
  std::string why;
};

template <typename F>
bool find(void* lib, const char* name, F* fn, std::string* why) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    *why = std::string(kLibrary) + " has no " + name + " (a driver older than CUDA 10.2?)";
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

bool find_all(void* lib, Driver* d, std::string* why) {
  return find(lib, "cuInit", &d->init, why) && find(lib, "cuCtxGetDevice", &d->ctx_get_device, why) &&
         find(lib, "cuDeviceGetAttribute", &d->device_get_attribute, why) &&
         find(lib, "cuDeviceGetPCIBusId", &d->device_get_pci_bus_id, why) &&
         find(lib, "cuMemGetAllocationGranularity", &d->mem_get_allocation_granularity, why) &&
         find(lib, "cuMemCreate", &d->mem_create, why) &&
         find(lib, "cuMemExportToShareableHandle", &d->mem_export_to_shareable_handle, why) &&
         find(lib, "cuMemAddressReserve", &d->mem_address_reserve, why) &&
         find(lib, "cuMemAddressFree", &d->mem_address_free, why) &&
         find(lib, "cuMemMap", &d->mem_map, why) && find(lib, "cuMemUnmap", &d->mem_unmap, why) &&
         find(lib, "cuMemSetAccess", &d->mem_set_access, why) &&
         find(lib, "cuMemRelease", &d->mem_release, why) &&
         find(lib, "cuPointerGetAttribute", &d->pointer_get_attribute, why) &&
         find(lib, "cuGetErrorName", &d->get_error_name, why);
}

Loaded load(int mode) {
  Loaded l;
  // Never closed: the driver stays for the process's life, as CUDA's own
  // runtime keeps it.
  void* lib = dlopen(kLibrary, mode);
  if (lib == nullptr) {
    const char* err = dlerror();
    l.why = std::string(err ? err : kLibrary) + ": no NVIDIA driver on this machine";
    return l;
  }
  if (!find_all(lib, &l.driver, &l.why)) return l;
  if (Result r = l.driver.init(0); r != kSuccess) {
    l.why = error_text(l.driver, "cuInit", r) + ": the driver sees no usable GPU";
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

std::string error_text(const Driver& d, const char* call, Result r) {
  const char* name = nullptr;
  if (d.get_error_name == nullptr || d.get_error_name(r, &name) != kSuccess || name == nullptr)
    return std::string(call) + ": CUresult " + std::to_string(r);
  return std::string(call) + ": " + name;
}

const Driver* driver(std::string* why) {
  static const Loaded loaded = load(RTLD_NOW | RTLD_LOCAL);
  if (!loaded.ok) {
    *why = loaded.why;
    return nullptr;
  }
  return &loaded.driver;
}

const Driver* driver_if_loaded() {
  // Asked again until it is there (the framework may load CUDA after this
  // library), at most once a second: a CPU-only process submitting from
  // host memory asks on every submission. Once it is, driver() loads (and
  // keeps) it.
  static std::atomic<const Driver*> found{nullptr};
  static std::atomic<int64_t> next_look_ns{0};
  if (const Driver* d = found.load(std::memory_order_acquire)) return d;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (now < next_look_ns.load(std::memory_order_relaxed)) return nullptr;
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (const Driver* d = found.load(std::memory_order_acquire)) return d;
  next_look_ns.store(now + 1'000'000'000, std::memory_order_relaxed);
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  dlclose(lib);  // NOLOAD took a reference; driver() takes its own
  std::string why;
  const Driver* d = driver(&why);
  found.store(d, std::memory_order_release);
  return d;
}

}  // namespace gsync::client::cu
