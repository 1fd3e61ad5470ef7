// SPDX-License-Identifier: Apache-2.0
#include "daemon/shm/device_requests.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "daemon/core/text.h"
#include "daemon/gpu/imported.h"
#include "daemon/core/worker.h"

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

namespace {

// The session's reference to an allocation: its unmap, when the last
// holder (the session, or an op) lets go, runs on the worker's thread.
std::shared_ptr<const gpu::ImportedMemory> held(std::unique_ptr<gpu::ImportedMemory> m,
                                                Worker* worker) {
  auto unmap = [worker](const gpu::ImportedMemory* p) {
    if (worker == nullptr) {
      delete p;
      return;
    }
    worker->later([p] { delete p; });
  };
  return std::shared_ptr<const gpu::ImportedMemory>(m.release(), unmap);
}

}  // namespace

void handle_device_request(const std::shared_ptr<Session>& s, const proto::DeviceRequest& r,
                           int fd, Worker* worker, DeviceReplyFn reply) {
  const uint64_t id = r.alloc_id;
  if (static_cast<proto::DeviceRequestKind>(r.kind) == proto::DeviceRequestKind::kRelease) {
    if (s->device_memory.erase(id) == 0)
      return reply(device_reply(id, r.seq, Status(GSYNC_ERR_INVALID,
                                                  fmt::format("{}: released device allocation "
                                                              "{}, which it never registered",
                                                              s->describe(), id))));
    return reply(device_reply(id, r.seq, Status::ok()));
  }
  auto named = [s, r](const Status& st) {
    return device_reply(r.alloc_id, r.seq,
                        Status(st.code(), fmt::format("{}: device allocation {} ({} bytes on {}): "
                                                      "{}",
                                                      s->describe(), r.alloc_id, r.bytes,
                                                      printable(r.pci_bus_id, 16), st.message())));
  };
  Status st;
  int copy = -1;
  if (fd < 0)
    st = Status(GSYNC_ERR_PROTOCOL, "the request carried no file descriptor (SCM_RIGHTS)");
  else if (s->device_memory.count(id) != 0)
    st = Status(GSYNC_ERR_INVALID, "the id is registered already");
  else if (s->device_memory.size() >= kMaxDeviceAllocations)
    st = Status(GSYNC_ERR_NOMEM, fmt::format("the session has {} allocations registered, the most "
                                             "it may",
                                             kMaxDeviceAllocations));
  else if ((copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
    st = Status(GSYNC_ERR_NOMEM, fmt::format("keeping its fd: {}", strerror(errno)));
  if (!st) return reply(named(st));
  // Shared by the two halves; the worker's thread writes it before the
  // event thread reads it (the worker's queue orders them).
  struct Import {
    Status st = Status(GSYNC_ERR_INTERNAL, "the import did not run");
    std::unique_ptr<gpu::ImportedMemory> mapped;
  };
  auto in = std::make_shared<Import>();
  auto work = [in, copy, bytes = r.bytes, bus = std::string(r.pci_bus_id)] {
    struct Closer {
      int fd;
      ~Closer() { close(fd); }
    } closer{copy};  // even if the import throws
    in->st = gpu::ImportedMemory::open(copy, bytes, bus, &in->mapped);
  };
  auto done = [s, r, in, worker, reply = std::move(reply), named] {
    if (!in->st) return reply(named(in->st));
    // A session closed meanwhile lets go of it here (its unmap on the
    // worker's thread); its reply goes nowhere.
    auto ref = held(std::move(in->mapped), worker);
    if (!s->closed) s->device_memory.emplace(r.alloc_id, std::move(ref));
    reply(device_reply(r.alloc_id, r.seq, Status::ok()));
  };
  if (worker == nullptr) {
    work();
    return done();
  }
  worker->then(std::move(work), std::move(done));
}

}  // namespace gsync
