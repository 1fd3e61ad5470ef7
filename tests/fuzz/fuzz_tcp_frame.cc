// SPDX-License-Identifier: Apache-2.0
//
// The TCP provider's wire format (daemon/transport/tcp/frame.h): a 48-byte
// frame header, the HELLO payload decoder, and the region table every
// WRITE header is checked against before a payload byte is received into
// memory (tcp/buffer.h). Input: a FrameHeader, then its payload; the first
// payload bytes also drive region registrations and removals.
// Properties: a HELLO that decodes re-encodes to exactly its bytes (the
// format has one spelling), one that does not says why; a WRITE header the
// table accepts lies inside a registered region, whatever its offset and
// length; an id never handed out is not "retired" (late writes of retired
// regions are discarded, others are a protocol error).
#include <cstring>
#include <vector>

#include "daemon/transport/tcp/buffer.h"
#include "daemon/transport/tcp/frame.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace gsync::transport::tcp;

void check_hello(std::string_view payload) {
  Hello h;
  std::string why;
  if (!decode_hello(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), &h, &why)) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  FUZZ_CHECK(h.identity.cluster_name.size() <= kMaxHelloString);
  FUZZ_CHECK(h.host_id.size() <= kMaxHelloString);
  FUZZ_CHECK(encode_hello(h) == payload);
}

void check_write(const FrameHeader& hdr, gsync::fuzz::Input& in) {
  static std::vector<uint8_t> memory(1 << 16);
  RegionTable table;
  struct Span {
    uint32_t id;
    uint8_t* base;
    uint64_t bytes;
  };
  std::vector<Span> live;
  uint32_t issued = 0;
  // A few registrations of sizes and places the input picks, some removed.
  for (int i = 0, n = in.byte() % 8; i < n; i++) {
    uint64_t off = in.take<uint16_t>() % memory.size();
    uint64_t bytes = in.take<uint16_t>() % (memory.size() - off + 1);
    auto r = table.add(memory.data() + off, bytes);
    live.push_back({r.id, memory.data() + off, bytes});
    issued = r.id;
    if (in.byte() & 1) {
      FUZZ_CHECK(table.remove(live.back().id));
      FUZZ_CHECK(table.retired(live.back().id));
      live.pop_back();
    }
  }
  // An id past every one handed out is unknown, not retired.
  if (hdr.region > issued) FUZZ_CHECK(!table.retired(hdr.region));
  std::string why;
  uint8_t* dst = table.locate(hdr.region, hdr.offset, hdr.length, &why);
  const Span* span = nullptr;
  for (const auto& s : live)
    if (s.id == hdr.region) span = &s;
  if (dst == nullptr) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  FUZZ_CHECK(span != nullptr);
  FUZZ_CHECK(dst >= span->base && dst <= span->base + span->bytes);
  FUZZ_CHECK(hdr.length <= static_cast<uint64_t>(span->base + span->bytes - dst));
  FUZZ_CHECK(!table.retired(hdr.region));
}

}  // namespace

GSYNC_FUZZ_TARGET(tcp_frame) {
  gsync::fuzz::Input in(data, size);
  auto hdr = in.take<FrameHeader>();
  std::string_view payload = in.rest();
  FUZZ_CHECK(!frame_type_name(hdr.type).empty());
  check_hello(payload);
  check_write(hdr, in);
  return 0;
}
