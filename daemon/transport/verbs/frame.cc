// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/verbs/frame.h"

#include "daemon/transport/peering/frame.h"

namespace gsync::transport::verbs {

namespace {
using peering::Reader;

// A Writer for one of the provider's tags.
peering::Writer writer(Tag t) { return peering::Writer(static_cast<uint8_t>(t)); }
}  // namespace

std::string encode(const QpInfo& m) {
  return writer(Tag::kQpInfo)
      .put(m.qpn).put(m.psn).put(m.lid).bytes(m.gid, 16).put(m.mtu).put(m.link_layer)
      .put(m.recv_slots).take();
}

std::string encode(const Ready& m) { return writer(Tag::kReady).put(m.from_qpn).put(m.to_qpn).take(); }

std::string encode(const RegionInfo& m) {
  return writer(Tag::kRegion)
      .put(m.id).put(m.addr).put(m.bytes).put(m.rkey).bytes(m.error.data(), m.error.size())
      .take();
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

}  // namespace gsync::transport::verbs
