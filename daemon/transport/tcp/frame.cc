// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/frame.h"

#include <cstring>

#include <fmt/format.h>

namespace gsync::transport::tcp {

namespace {

// Hello layout: u32 host_index, u32 stream, u32 streams, u32 protocol_version,
// u64 link_id, u64 instance_id, u8[32] nonce, then cluster_name, build_id,
// host_id, each as u16 length + bytes.
constexpr size_t kHelloFixed = 4 * 4 + 2 * 8 + kNonceBytes;

template <typename T>
void put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string* out, std::string_view s) {
  put<uint16_t>(out, static_cast<uint16_t>(s.size()));
  out->append(s);
}

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <typename T>
  bool get(T* v) {
    if (n_ < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    n_ -= sizeof(T);
    return true;
  }
  bool get_string(std::string* s) {
    uint16_t len;
    if (!get(&len) || len > kMaxHelloString || n_ < len) return false;
    s->assign(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    n_ -= len;
    return true;
  }
  size_t left() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace

std::string encode_hello(const Hello& h) {
  std::string out;
  out.reserve(kHelloFixed + 6 + h.identity.cluster_name.size() + h.identity.build_id.size() +
              h.host_id.size());
  put<uint32_t>(&out, h.host_index);
  put<uint32_t>(&out, h.stream);
  put<uint32_t>(&out, h.streams);
  put<uint32_t>(&out, h.identity.protocol_version);
  put<uint64_t>(&out, h.link_id);
  put<uint64_t>(&out, h.instance_id);
  put(&out, h.nonce);
  // Longer strings are cut rather than refused here: the far side compares
  // them and names the mismatch, which is the more useful error.
  auto cut = [](const std::string& s) { return std::string_view(s).substr(0, kMaxHelloString); };
  put_string(&out, cut(h.identity.cluster_name));
  put_string(&out, cut(h.identity.build_id));
  put_string(&out, cut(h.host_id));
  return out;
}

bool decode_hello(const uint8_t* data, size_t len, Hello* out, std::string* why) {
  Reader r(data, len);
  Hello h;
  if (!r.get(&h.host_index) || !r.get(&h.stream) || !r.get(&h.streams) ||
      !r.get(&h.identity.protocol_version) || !r.get(&h.link_id) || !r.get(&h.instance_id) ||
      !r.get(&h.nonce)) {
    *why = fmt::format("hello payload of {} bytes is shorter than its fixed part ({} bytes)", len,
                       kHelloFixed);
    return false;
  }
  if (!r.get_string(&h.identity.cluster_name) || !r.get_string(&h.identity.build_id) ||
      !r.get_string(&h.host_id)) {
    *why = fmt::format("hello payload of {} bytes has a string that runs past its end", len);
    return false;
  }
  if (r.left() != 0) {
    *why = fmt::format("hello payload has {} bytes after its last field", r.left());
    return false;
  }
  *out = std::move(h);
  return true;
}

std::string_view frame_type_name(uint8_t type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::kHello:
      return "HELLO";
    case FrameType::kHelloAck:
      return "HELLO_ACK";
    case FrameType::kRefuse:
      return "REFUSE";
    case FrameType::kControl:
      return "CONTROL";
    case FrameType::kWrite:
      return "WRITE";
    case FrameType::kHeartbeat:
      return "HEARTBEAT";
    case FrameType::kAuth:
      return "AUTH";
  }
  return "unknown";
}

}  // namespace gsync::transport::tcp
