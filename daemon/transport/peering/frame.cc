// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/peering/frame.h"

#include "daemon/transport/transport.h"

namespace gsync::transport::peering {

bool is_peering_tag(uint8_t tag) {
  switch (static_cast<Ctl>(tag)) {
    case Ctl::kCaps:
    case Ctl::kUser:
    case Ctl::kUserPart:
    case Ctl::kRetire:
    case Ctl::kRetireAck:
      return true;
  }
  return false;
}

const char* kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::kNone: return "none";
    case LinkKind::kVerbs: return "verbs";
    case LinkKind::kDpdk: return "dpdk";
  }
  return "unknown";
}

std::string encode(const Caps& m) {
  return Writer(static_cast<uint8_t>(Ctl::kCaps))
      .put(static_cast<uint8_t>(m.kind))
      .bytes(m.detail.data(), m.detail.size())
      .take();
}

std::string encode_id(Ctl kind, uint32_t id) {
  return Writer(static_cast<uint8_t>(kind)).put(id).take();
}

bool decode(std::string_view in, Caps* m) {
  Reader r(in);
  uint8_t v = 0;
  if (!r.get(&v) || v > static_cast<uint8_t>(LinkKind::kDpdk)) return false;
  m->kind = static_cast<LinkKind>(v);
  m->detail = std::string(r.rest());
  return true;
}

bool decode_id(std::string_view in, uint32_t* id) {
  Reader r(in);
  return r.get(id) && r.done();
}

UserReassembly::Result UserReassembly::add(std::string_view part, bool last,
                                           std::string_view* whole) {
  if (!dropping_ && part.size() > kMaxControl - buf_.size()) {
    dropping_ = true;
    std::string().swap(buf_);  // its memory too
  }
  if (dropping_) {
    if (!last) return Result::kMore;
    dropping_ = false;
    return Result::kDropped;
  }
  if (last && buf_.empty()) {
    *whole = part;
    return Result::kWhole;
  }
  buf_.append(part);
  if (!last) return Result::kMore;
  whole_.swap(buf_);
  buf_.clear();
  *whole = whole_;
  return Result::kWhole;
}

void UserReassembly::reset() {
  buf_.clear();
  dropping_ = false;
}

}  // namespace gsync::transport::peering
