// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/verbs/frame.h"

#include <cstring>

namespace gsync::transport::verbs {
namespace {

// Both ends are the same build on the same architecture (the HELLO's
// build_id says so), so fields go in host order.
class Writer {
 public:
  explicit Writer(Ctl kind) { s_.push_back(static_cast<char>(kind)); }
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
  explicit Reader(std::string_view in) : in_(in.substr(1)) {}
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

}  // namespace

std::string encode(const Caps& m) {
  return Writer(Ctl::kCaps).put(uint8_t(m.verbs)).bytes(m.detail.data(), m.detail.size()).take();
}

std::string encode(const QpInfo& m) {
  return Writer(Ctl::kQpInfo)
      .put(m.qpn).put(m.psn).put(m.lid).bytes(m.gid, 16).put(m.mtu).put(m.link_layer)
      .put(m.recv_slots).take();
}

std::string encode(const Ready& m) { return Writer(Ctl::kReady).put(m.from_qpn).put(m.to_qpn).take(); }

std::string encode(const RegionInfo& m) {
  return Writer(Ctl::kRegion)
      .put(m.id).put(m.addr).put(m.bytes).put(m.rkey).bytes(m.error.data(), m.error.size())
      .take();
}

std::string encode_id(Ctl kind, uint32_t id) { return Writer(kind).put(id).take(); }

bool decode(std::string_view in, Caps* m) {
  Reader r(in);
  uint8_t v = 0;
  if (!r.get(&v) || v > 1) return false;
  m->verbs = v == 1;
  m->detail = std::string(r.rest());
  return true;
}

bool decode(std::string_view in, QpInfo* m) {
  Reader r(in);
  return r.get(&m->qpn) && r.get(&m->psn) && r.get(&m->lid) && r.bytes(m->gid, 16) &&
         r.get(&m->mtu) && r.get(&m->link_layer) && r.get(&m->recv_slots) && r.done();
}

bool decode(std::string_view in, Ready* m) {
  Reader r(in);
  return r.get(&m->from_qpn) && r.get(&m->to_qpn) && r.done();
}

bool decode(std::string_view in, RegionInfo* m) {
  Reader r(in);
  if (!(r.get(&m->id) && r.get(&m->addr) && r.get(&m->bytes) && r.get(&m->rkey))) return false;
  m->error = std::string(r.rest());
  return true;
}

bool decode_id(std::string_view in, uint32_t* id) {
  Reader r(in);
  return r.get(id) && r.done();
}

}  // namespace gsync::transport::verbs
