// SPDX-License-Identifier: Apache-2.0
//
// A device memory request (protocol/device.h) as a client may send it on its
// socket after the hello: any bytes, checked by parse_device_request
// (daemon/shm/device_requests.h) before anything is done with it. Input:
// the message. Properties: a request that passes has a known kind, an
// allocation id in 1 .. kMaxDeviceAllocId, and either (a registration) a
// size of 1 byte to 1 TiB and a NUL-terminated, non-empty PCI bus id, or
// (a release) no size and no bus id; every entry offset made from it
// splits back into the same id and offset; the reply to a refusal is a
// NUL-terminated printable message with the refusal's code.
#include <cstring>

#include "daemon/core/text.h"
#include "daemon/shm/device_requests.h"
#include "tests/fuzz/fuzz_target.h"

GSYNC_FUZZ_TARGET(device_request) {
  using namespace gsync;
  fuzz::Input in(data, size);
  std::string_view msg = in.rest();
  proto::DeviceRequest r{};
  Status st = parse_device_request(msg.data(), msg.size(), &r);
  if (!st) {
    FUZZ_CHECK(st.code() < 0 && !st.message().empty());
    uint64_t id = 0, seq = 0;
    request_ids(msg.data(), msg.size(), &id, &seq);
    // A message of a request's size was copied out whatever failed after
    // (found by the fuzzer: a longer one is refused before it is copied,
    // and its ids are still echoed from its first bytes).
    if (msg.size() == sizeof r) FUZZ_CHECK(id == r.alloc_id && seq == r.seq);
    proto::DeviceReply reply = device_reply(id, seq, st);
    FUZZ_CHECK(reply.magic == proto::kDeviceMagic && reply.status == st.code());
    const void* nul = std::memchr(reply.message, '\0', sizeof reply.message);
    FUZZ_CHECK(nul != nullptr);
    FUZZ_CHECK(valid_utf8(reply.message));
    for (const char* c = reply.message; *c != '\0'; c++) FUZZ_CHECK(static_cast<unsigned char>(*c) >= 0x20);
    return 0;
  }
  FUZZ_CHECK(msg.size() == sizeof r && r.magic == proto::kDeviceMagic);
  FUZZ_CHECK(r.alloc_id >= 1 && r.alloc_id <= proto::kMaxDeviceAllocId);
  const auto kind = static_cast<proto::DeviceRequestKind>(r.kind);
  if (kind == proto::DeviceRequestKind::kRelease) {
    FUZZ_CHECK(r.bytes == 0 && r.pci_bus_id[0] == '\0');
    return 0;
  }
  FUZZ_CHECK(kind == proto::DeviceRequestKind::kRegister);
  FUZZ_CHECK(r.bytes >= 1 && r.bytes <= proto::kMaxDeviceOffset + 1);
  FUZZ_CHECK(std::memchr(r.pci_bus_id, '\0', sizeof r.pci_bus_id) != nullptr && r.pci_bus_id[0]);
  const proto::DeviceOffset last{r.alloc_id, r.bytes - 1};
  const proto::DeviceOffset back = proto::from_entry_offset(proto::to_entry_offset(last));
  FUZZ_CHECK(back.alloc_id == last.alloc_id && back.offset == last.offset);
  FUZZ_CHECK(proto::is_device_offset(proto::to_entry_offset(last)));
  FUZZ_CHECK(proto::in_allocation(proto::to_entry_offset(last), 1, r.bytes));
  FUZZ_CHECK(!proto::in_allocation(proto::to_entry_offset(last), 2, r.bytes));
  return 0;
}
