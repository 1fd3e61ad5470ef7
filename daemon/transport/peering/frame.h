// SPDX-License-Identifier: Apache-2.0
//
// The peering context's messages on the bootstrap (TCP) link, in order
// with everything else on it: the capability exchange, the user's control
// messages, region retirement. A provider's own messages (verbs: QP_INFO,
// READY, REGION) travel on the same link under tags of their own.
// docs/transport.md, "The peering context".
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gsync::transport::peering {

// First byte of every message on the bootstrap link.
enum class Ctl : uint8_t {
  kCaps = 'C',       // first on every link: which fast link this side can run
  kUser = 'U',       // a user control message (or its last part)
  kUserPart = 'F',   // a part of one, more follow (the tag costs a byte)
  kRetire = 'X',     // the region is gone: stop writing, acknowledge
  kRetireAck = 'A',  // no write into the region is in flight any more
};
// Whether a tag is the peering context's (else it is the provider's).
bool is_peering_tag(uint8_t tag);

// The fast link kinds. A link carries its writes on one only when both
// ends offer the same kind and are in the same rack; else on TCP.
enum class LinkKind : uint8_t { kNone = 0, kVerbs = 1, kDpdk = 2 };
const char* kind_name(LinkKind k);

// Sent by both sides as the first message of every (re)connected link.
struct Caps {
  LinkKind kind = LinkKind::kNone;  // kNone: this side offers no fast link
  std::string detail;  // the device ("rxe0 port 1 gid 1"), or why there is none
};

std::string encode(const Caps& m);
std::string encode_id(Ctl kind, uint32_t id);  // kRetire, kRetireAck
bool decode(std::string_view in, Caps* m);
bool decode_id(std::string_view in, uint32_t* id);

// A user message longer than the bootstrap link's frames arrives in parts
// (kUserPart ..., then kUser). A whole message is at most kMaxControl bytes
// (send_control refuses more); a peer whose parts add up to more is broken
// or hostile, and that message is dropped whole instead of buffered
// without bound.
class UserReassembly {
 public:
  enum class Result { kMore, kWhole, kDropped };
  // One part; on kWhole, *whole is the message (valid until the next add).
  Result add(std::string_view part, bool last, std::string_view* whole);
  void reset();
  size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
  std::string whole_;  // the last message put together
  bool dropping_ = false;
};

// Fixed-layout messages: a tag byte, then fields in host order (both ends
// are the same build on the same architecture: the HELLO's build id says
// so). For providers' messages too.
class Writer {
 public:
  explicit Writer(uint8_t tag) { s_.push_back(static_cast<char>(tag)); }
  template <typename T>
  Writer& put(const T& v) {
    s_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& bytes(const void* p, size_t n) {
    s_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in.empty() ? in : in.substr(1)) {}
  template <typename T>
  bool get(T* v) {
    if (in_.size() < sizeof *v) return false;
    std::memcpy(v, in_.data(), sizeof *v);
    in_.remove_prefix(sizeof *v);
    return true;
  }
  bool bytes(void* p, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  std::string_view rest() const { return in_; }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

}  // namespace gsync::transport::peering
