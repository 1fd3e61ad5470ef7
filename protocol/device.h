// SPDX-License-Identifier: Apache-2.0
//
// Device memory shared by a client with its daemon (docs/gpu.md,
// docs/protocol.md "Device memory"). The client allocates GPU memory in its
// own CUDA context with the VMM API, exports it as a POSIX file descriptor
// and sends it on the session's unix socket, one SOCK_SEQPACKET message per
// allocation with the fd by SCM_RIGHTS; the daemon maps it once and answers.
// A submission then names bytes of it by (allocation id, offset) packed into
// SubmitEntry::offset. Header-only, shared by libgsync and gsyncd; the
// daemon trusts nothing in a request.
#pragma once

#include <cstdint>

#include "protocol/wire.h"

namespace gsync::proto {

constexpr uint32_t kDeviceMagic = 0x56454447;  // "GDEV"
constexpr size_t kPciBusIdMax = 16;            // "0000:65:00.0", including the NUL

enum class DeviceRequestKind : uint32_t {
  kRegister = 1,  // carries one fd: the allocation's POSIX fd handle
  kRelease = 2,   // no fd: the daemon unmaps once no op uses the allocation
};

// Client -> daemon, after the hello, on the same socket.
struct DeviceRequest {
  uint32_t magic;  // kDeviceMagic
  uint32_t kind;   // DeviceRequestKind
  uint64_t alloc_id;  // the client's name for the allocation: 1 .. kMaxDeviceAllocId
  uint64_t bytes;     // the allocation's size (a multiple of its granularity)
  char pci_bus_id[kPciBusIdMax];  // the device it is on, as cuDeviceGetPCIBusId writes it
  uint64_t seq;  // the client's request number, echoed in the reply
};
static_assert(sizeof(DeviceRequest) == 48);

// Daemon -> client: one per request, in order. seq lets a client that gave
// up waiting for a reply (a timeout, a signal) skip it when it comes late.
struct DeviceReply {
  uint32_t magic;  // kDeviceMagic
  int32_t status;  // 0 or a negative GSYNC_ERR_* code
  uint64_t alloc_id;
  uint64_t seq;
  char message[kMessageMax - 8];  // why, when status != 0
};
static_assert(sizeof(DeviceReply) == 256);

// SubmitEntry::offset of a tensor in device memory: bit 63 set, the
// allocation id in bits 40..62, the offset in it in bits 0..39 (1 TiB). An
// offset without bit 63 is into the shared arena, as before.
constexpr uint64_t kDeviceOffsetBit = uint64_t{1} << 63;
constexpr int kDeviceOffsetBits = 40;
constexpr uint64_t kMaxDeviceAllocId = (uint64_t{1} << (63 - kDeviceOffsetBits)) - 1;
constexpr uint64_t kMaxDeviceOffset = (uint64_t{1} << kDeviceOffsetBits) - 1;

struct DeviceOffset {
  uint64_t alloc_id = 0;
  uint64_t offset = 0;
};

constexpr bool is_device_offset(uint64_t entry_offset) { return entry_offset & kDeviceOffsetBit; }

// The caller has checked alloc_id and offset against the maxima above.
constexpr uint64_t to_entry_offset(DeviceOffset d) {
  return kDeviceOffsetBit | (d.alloc_id << kDeviceOffsetBits) | d.offset;
}

constexpr DeviceOffset from_entry_offset(uint64_t entry_offset) {
  return {(entry_offset & ~kDeviceOffsetBit) >> kDeviceOffsetBits, entry_offset & kMaxDeviceOffset};
}

// Whether a tensor of bytes at entry_offset lies inside an allocation of
// alloc_bytes (no wrap-around: every term is below 2^41).
constexpr bool in_allocation(uint64_t entry_offset, uint64_t bytes, uint64_t alloc_bytes) {
  const uint64_t offset = from_entry_offset(entry_offset).offset;
  return offset <= alloc_bytes && bytes <= alloc_bytes - offset;
}

}  // namespace gsync::proto
