// SPDX-License-Identifier: Apache-2.0
#include "libclient/device_memory.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "gsync/gsync.h"
#include "libclient/cuda_driver.h"
#include "libclient/format.h"
#include "libclient/send_fd.h"
#include "protocol/device.h"

namespace gsync::client {

namespace {

// The daemon maps the memory before it answers: a registration takes
// milliseconds; this bounds a daemon that hangs.
constexpr int kReplyTimeoutMs = 30000;

// The GPU of this thread's CUDA context, if it can export memory as a file
// descriptor, and its PCI bus id: the daemon opens the same GPU by it.
int current_device(const cu::Driver& d, cu::Device* dev, char* bus_id, std::string* why) {
  if (cu::Result r = d.ctx_get_device(dev); r != cu::kSuccess) {
    *why = cu::error_text(d, "cuCtxGetDevice", r) +
           ": no current CUDA context on this thread (call cudaSetDevice first)";
    return GSYNC_ERR_INVALID;
  }
  int vmm = 0, posix_fd = 0;
  (void)d.device_get_attribute(&vmm, cu::kAttributeVmmSupported, *dev);
  (void)d.device_get_attribute(&posix_fd, cu::kAttributePosixFdSupported, *dev);
  if (!vmm || !posix_fd) {
    *why = format("GPU %d cannot export memory as a file descriptor (VMM %d, POSIX fd handles %d): "
                  "a driver older than 450, or a GPU without the VMM API",
                  *dev, vmm, posix_fd);
    return GSYNC_ERR_UNSUPPORTED;
  }
  if (cu::Result r = d.device_get_pci_bus_id(bus_id, proto::kPciBusIdMax, *dev);
      r != cu::kSuccess) {
    *why = cu::error_text(d, "cuDeviceGetPCIBusId", r);
    return GSYNC_ERR_INTERNAL;
  }
  return GSYNC_OK;
}

}  // namespace

DeviceMemory::~DeviceMemory() {
  // Never loads the driver: a process that made no device allocation has
  // nothing here, and must not start CUDA at exit (a fork after it would
  // leave the child without CUDA).
  for (const auto& [va, a] : allocs_) unmap(va, a);
}

void DeviceMemory::unmap(uintptr_t va, const Alloc& a) const {
  // There is an allocation: the driver was loaded to make it, and this
  // only returns it.
  std::string why;
  const cu::Driver* d = cu::driver(&why);
  if (d == nullptr) return;
  // The physical memory goes once the daemon's mapping has gone too. Each
  // call fails harmlessly on what an allocation that failed halfway never
  // got (no mapping, no reservation: va 0).
  (void)d->mem_unmap(va, a.mapped);
  (void)d->mem_address_free(va, a.mapped);
  (void)d->mem_release(a.handle);
}

int DeviceMemory::alloc(int sock, size_t bytes, void** out, std::string* why) {
  *out = nullptr;
  if (sock < 0) {
    *why = "the session is closed";
    return GSYNC_ERR_CLOSED;
  }
  if (bytes == 0 || bytes > proto::kMaxDeviceOffset + 1) {
    *why = format("%zu bytes: from 1 byte to 1 TiB", bytes);
    return GSYNC_ERR_INVALID;
  }
  const cu::Driver* d = cu::driver(why);
  if (d == nullptr) {
    *why = "no GPU: " + *why;
    return GSYNC_ERR_UNSUPPORTED;
  }
  cu::Device dev = 0;
  char bus_id[proto::kPciBusIdMax] = {};
  if (int rc = current_device(*d, &dev, bus_id, why); rc != GSYNC_OK) return rc;
  Alloc a;
  cu::DevicePtr va = 0;
  int fd = -1;
  if (int rc = create(*d, dev, bytes, &a, &va, &fd, why); rc != GSYNC_OK) return rc;
  const int rc = exchange(sock, static_cast<uint32_t>(proto::DeviceRequestKind::kRegister), a.id,
                          a.mapped, bus_id, fd, why);
  close(fd);  // the daemon has its own (or nothing, on failure)
  if (rc == GSYNC_ERR_TIMEOUT || rc == GSYNC_ERR_PROTOCOL) {
    // The daemon may map it after all: ask it to let go (its replies, late,
    // are skipped by their seq).
    std::string ignored;
    (void)exchange(sock, static_cast<uint32_t>(proto::DeviceRequestKind::kRelease), a.id, 0, "", -1,
                   &ignored, /*wait=*/false);
  }
  if (rc != GSYNC_OK) {
    unmap(va, a);
    return rc;
  }
  std::lock_guard lock(mu_);
  allocs_.emplace(static_cast<uintptr_t>(va), a);
  *out = reinterpret_cast<void*>(static_cast<uintptr_t>(va));
  return GSYNC_OK;
}

int DeviceMemory::create(const cu::Driver& d, int dev, size_t bytes, Alloc* a,
                         unsigned long long* va, int* fd, std::string* why) {
  cu::MemAllocationProp prop{};
  prop.type = cu::kAllocationTypePinned;
  prop.requested_handle_types = cu::kHandleTypePosixFd;
  prop.location.type = cu::kLocationTypeDevice;
  prop.location.id = dev;
  size_t granularity = 0;
  if (cu::Result r = d.mem_get_allocation_granularity(&granularity, &prop,
                                                      cu::kGranularityRecommended);
      r != cu::kSuccess || granularity == 0) {
    *why = cu::error_text(d, "cuMemGetAllocationGranularity", r);
    return GSYNC_ERR_INTERNAL;
  }
  a->asked = bytes;
  a->mapped = (bytes + granularity - 1) / granularity * granularity;
  {
    std::lock_guard lock(mu_);
    a->id = next_id_++;
  }
  if (a->id > proto::kMaxDeviceAllocId) {
    *why = "this session has made the most device allocations it may";
    return GSYNC_ERR_NOMEM;
  }
  if (cu::Result r = d.mem_create(&a->handle, a->mapped, &prop, 0); r != cu::kSuccess) {
    *why = format("%s (%zu bytes on GPU %d)", cu::error_text(d, "cuMemCreate", r).c_str(),
                  a->mapped, dev);
    return r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? GSYNC_ERR_NOMEM : GSYNC_ERR_INTERNAL;
  }
  // Reserve, map, open to this GPU, export: on a failure unmap() gives
  // back whatever of it was done.
  cu::MemAccessDesc access{prop.location, cu::kAccessReadWrite};
  const char* failed = nullptr;
  cu::Result r = cu::kSuccess;
  if ((r = d.mem_address_reserve(va, a->mapped, granularity, 0, 0)) != cu::kSuccess)
    failed = "cuMemAddressReserve";
  else if ((r = d.mem_map(*va, a->mapped, 0, a->handle, 0)) != cu::kSuccess)
    failed = "cuMemMap";
  else if ((r = d.mem_set_access(*va, a->mapped, &access, 1)) != cu::kSuccess)
    failed = "cuMemSetAccess";
  else if ((r = d.mem_export_to_shareable_handle(fd, a->handle, cu::kHandleTypePosixFd, 0)) !=
           cu::kSuccess)
    failed = "cuMemExportToShareableHandle";
  if (failed != nullptr) {
    unmap(*va, *a);
    *why = cu::error_text(d, failed, r);
    return GSYNC_ERR_INTERNAL;
  }
  return GSYNC_OK;
}

int DeviceMemory::free(int sock, void* ptr, std::string* why) {
  Alloc a;
  {
    std::lock_guard lock(mu_);
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocs_.end()) {
      *why = format("%p is not an allocation of gsync_alloc_device (freed twice, or an interior "
                    "pointer?)",
                    ptr);
      return GSYNC_ERR_INVALID;
    }
    a = it->second;
    allocs_.erase(it);
  }
  int rc = GSYNC_OK;
  // After gsync_close there is no daemon to tell: its mappings went with
  // the session.
  if (sock >= 0)
    rc = exchange(sock, static_cast<uint32_t>(proto::DeviceRequestKind::kRelease), a.id, 0, "", -1,
                  why);
  unmap(reinterpret_cast<uintptr_t>(ptr), a);
  return rc;
}

int DeviceMemory::find(const void* p, uint64_t bytes, uint64_t* entry_offset,
                       std::string* why) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(mu_);
  auto it = allocs_.upper_bound(at);
  if (it == allocs_.begin()) return GSYNC_ERR_AGAIN;
  --it;
  const uintptr_t base = it->first;
  const Alloc& a = it->second;
  if (at - base >= a.mapped) return GSYNC_ERR_AGAIN;
  if (at - base > a.asked || bytes > a.asked - (at - base)) {
    *why = format("device buffer %p of %llu bytes runs past the end of its gsync_alloc_device "
                  "allocation (%zu bytes at %p)",
                  p, static_cast<unsigned long long>(bytes), a.asked,
                  reinterpret_cast<void*>(base));
    return GSYNC_ERR_INVALID;
  }
  *entry_offset = proto::to_entry_offset({a.id, at - base});
  return GSYNC_OK;
}

bool DeviceMemory::is_device_pointer(const void* p) {
  const cu::Driver* d = cu::driver_if_loaded();
  if (d == nullptr) return false;
  const auto at = static_cast<cu::DevicePtr>(reinterpret_cast<uintptr_t>(p));
  unsigned type = 0;
  int managed = 0;
  if (d->pointer_get_attribute(&type, cu::kPointerAttributeMemoryType, at) != cu::kSuccess ||
      type != cu::kMemoryTypeDevice)
    return false;
  // Managed memory says "device" too, but the host may read it: staging
  // through the arena copies it like any host memory.
  return d->pointer_get_attribute(&managed, cu::kPointerAttributeIsManaged, at) != cu::kSuccess ||
         !managed;
}

int DeviceMemory::exchange(int sock, uint32_t kind, uint64_t id, uint64_t bytes,
                           const char* bus_id, int fd, std::string* why, bool wait) {
  // One request and its reply at a time on the socket.
  std::lock_guard lock(exchange_mu_);
  proto::DeviceRequest req{};
  req.magic = proto::kDeviceMagic;
  req.kind = kind;
  req.alloc_id = id;
  req.bytes = bytes;
  req.seq = ++seq_;
  std::strncpy(req.pci_bus_id, bus_id, sizeof req.pci_bus_id - 1);
  if (send_with_fds(sock, &req, sizeof req, &fd, fd >= 0 ? 1 : 0) !=
      static_cast<ssize_t>(sizeof req)) {
    *why = format("sending device allocation %llu to the daemon: %s",
                  static_cast<unsigned long long>(id), strerror(errno));
    return GSYNC_ERR_CLOSED;
  }
  if (!wait) return GSYNC_OK;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
  proto::DeviceReply reply{};
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{sock, POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;  // a signal (a DataLoader's SIGCHLD)
    if (ready == 0) {
      *why = format("the daemon did not answer for device allocation %llu in %d ms",
                    static_cast<unsigned long long>(id), kReplyTimeoutMs);
      return GSYNC_ERR_TIMEOUT;
    }
    ssize_t n = ready > 0 ? recv(sock, &reply, sizeof reply, 0) : -1;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      *why = "the daemon closed the session";
      return GSYNC_ERR_CLOSED;
    }
    if (n != static_cast<ssize_t>(sizeof reply) || reply.magic != proto::kDeviceMagic) {
      *why = format("a malformed reply for device allocation %llu (%zd bytes)",
                    static_cast<unsigned long long>(id), n);
      return GSYNC_ERR_PROTOCOL;
    }
    if (reply.seq < req.seq) continue;  // the late reply to a request given up on
    if (reply.seq != req.seq || reply.alloc_id != id) {
      *why = format("a reply to request %llu (allocation %llu) for request %llu (allocation %llu)",
                    static_cast<unsigned long long>(reply.seq),
                    static_cast<unsigned long long>(reply.alloc_id),
                    static_cast<unsigned long long>(req.seq), static_cast<unsigned long long>(id));
      return GSYNC_ERR_PROTOCOL;
    }
    break;
  }
  if (reply.status != GSYNC_OK) {
    reply.message[sizeof reply.message - 1] = '\0';
    *why = reply.message;
    // Only codes this library knows go to the caller.
    return reply.status < 0 && reply.status >= GSYNC_ERR_WORLD_CHANGED ? reply.status
                                                                      : GSYNC_ERR_PROTOCOL;
  }
  return GSYNC_OK;
}

}  // namespace gsync::client
