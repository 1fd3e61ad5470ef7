// SPDX-License-Identifier: Apache-2.0
#include "daemon/shm/device_requests.h"

#include <cstddef>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "daemon/core/text.h"
#include "daemon/gpu/imported.h"
#include "daemon/gpu/releaser.h"

namespace gsync {

Status parse_device_request(const void* msg, size_t n, proto::DeviceRequest* out) {
  if (n != sizeof *out)
    return Status(GSYNC_ERR_PROTOCOL, fmt::format("a device memory request of {} bytes (it has {})",
                                                  n, sizeof *out));
  std::memcpy(out, msg, sizeof *out);
  if (out->magic != proto::kDeviceMagic)
    return Status(GSYNC_ERR_PROTOCOL,
                  fmt::format("a message of {} bytes on the session's socket that is no device "
                              "memory request (magic {:#x})",
                              n, out->magic));
  const auto kind = static_cast<proto::DeviceRequestKind>(out->kind);
  if (kind != proto::DeviceRequestKind::kRegister && kind != proto::DeviceRequestKind::kRelease)
    return Status(GSYNC_ERR_PROTOCOL, fmt::format("a device memory request of unknown kind {}",
                                                  out->kind));
  if (out->alloc_id == 0 || out->alloc_id > proto::kMaxDeviceAllocId)
    return Status(GSYNC_ERR_PROTOCOL, fmt::format("device allocation id {} is outside 1 .. {}",
                                                  out->alloc_id, proto::kMaxDeviceAllocId));
  if (kind == proto::DeviceRequestKind::kRelease) {
    if (out->bytes != 0 || out->pci_bus_id[0] != '\0')
      return Status(GSYNC_ERR_PROTOCOL, "a release of device memory carries no size or device");
    return Status::ok();
  }
  if (out->bytes == 0 || out->bytes > proto::kMaxDeviceOffset + 1)
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("device allocation {} of {} bytes: from 1 byte to 1 TiB",
                              out->alloc_id, out->bytes));
  if (std::memchr(out->pci_bus_id, '\0', sizeof out->pci_bus_id) == nullptr ||
      out->pci_bus_id[0] == '\0')
    return Status(GSYNC_ERR_PROTOCOL,
                  fmt::format("device allocation {}: the PCI bus id is empty or not terminated",
                              out->alloc_id));
  return Status::ok();
}

void request_ids(const void* msg, size_t n, uint64_t* alloc_id, uint64_t* seq) {
  *alloc_id = *seq = 0;
  const auto* bytes = static_cast<const uint8_t*>(msg);
  if (n >= offsetof(proto::DeviceRequest, alloc_id) + sizeof *alloc_id)
    std::memcpy(alloc_id, bytes + offsetof(proto::DeviceRequest, alloc_id), sizeof *alloc_id);
  if (n >= offsetof(proto::DeviceRequest, seq) + sizeof *seq)
    std::memcpy(seq, bytes + offsetof(proto::DeviceRequest, seq), sizeof *seq);
}

proto::DeviceReply device_reply(uint64_t alloc_id, uint64_t seq, const Status& st) {
  proto::DeviceReply r{};
  r.magic = proto::kDeviceMagic;
  r.status = st.code();
  r.alloc_id = alloc_id;
  r.seq = seq;
  std::string text = printable(st.message(), sizeof r.message - 1);
  std::memcpy(r.message, text.data(), text.size());
  return r;
}

proto::DeviceReply handle_device_request(Session& s, const proto::DeviceRequest& r, int fd,
                                         gpu::Releaser* releaser) {
  const uint64_t id = r.alloc_id;
  if (static_cast<proto::DeviceRequestKind>(r.kind) == proto::DeviceRequestKind::kRelease) {
    if (s.device_memory.erase(id) == 0)
      return device_reply(id, r.seq, Status(GSYNC_ERR_INVALID,
                                     fmt::format("{}: released device allocation {}, which it "
                                                 "never registered",
                                                 s.describe(), id)));
    return device_reply(id, r.seq, Status::ok());
  }
  Status st;
  if (fd < 0)
    st = Status(GSYNC_ERR_PROTOCOL, "the request carried no file descriptor (SCM_RIGHTS)");
  else if (s.device_memory.count(id) != 0)
    st = Status(GSYNC_ERR_INVALID, "the id is registered already");
  else if (s.device_memory.size() >= kMaxDeviceAllocations)
    st = Status(GSYNC_ERR_NOMEM, fmt::format("the session has {} allocations registered, the most "
                                             "it may",
                                             kMaxDeviceAllocations));
  std::unique_ptr<gpu::ImportedMemory> mapped;
  if (st) st = gpu::ImportedMemory::open(fd, r.bytes, r.pci_bus_id, &mapped);
  if (!st)
    return device_reply(id, r.seq, Status(st.code(), fmt::format("{}: device allocation {} ({} bytes on "
                                                          "{}): {}",
                                                          s.describe(), id, r.bytes,
                                                          printable(r.pci_bus_id, 16),
                                                          st.message())));
  // The last reference (the session's, or an op's) may go on the event
  // thread; the unmap happens on the releaser's.
  auto unmap = [releaser](const gpu::ImportedMemory* m) {
    if (releaser == nullptr) {
      delete m;
      return;
    }
    releaser->later([m] { delete m; });
  };
  s.device_memory.emplace(id, std::shared_ptr<const gpu::ImportedMemory>(mapped.release(), unmap));
  return device_reply(id, r.seq, Status::ok());
}

}  // namespace gsync
