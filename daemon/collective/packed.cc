// SPDX-License-Identifier: Apache-2.0
//
// The engine's side of compressed plans (docs/compression.md, "The
// engine"): the buffers a chunk's packed phases work on (pack_view), the
// end of a phase once its transfers have landed (end_packed: a raw phase's
// lengths checked, a packed phase's arrivals decoded and folded by
// collective/pack.h), and the bytes each peer was sent against the bytes
// they stand for. The start of a phase, which encodes, is in chunks.cc
// beside the raw one.
#include <cstdio>

#include <fmt/format.h>

#include "daemon/collective/engine.h"
#include "daemon/collective/engine_op.h"

namespace gsync::collective {

PackView Engine::pack_view(XOp& x, size_t c) {
  Plan& p = *x.plan;
  PackView v;
  v.params = p.codec;
  v.data = reinterpret_cast<float*>(x.data + c * p.chunk_bytes);
  v.count = static_cast<size_t>(p.chunk_count(c));
  v.residuals = p.residuals.empty() ? nullptr : p.residuals.data() + c * p.chunk_elems;
  v.residual_stride = static_cast<size_t>(p.shape.count);
  v.send = p.local.base + c * p.chunk_stride();
  v.send_len = x.chunks[c].send_len;
  v.maxima = reinterpret_cast<float*>(p.local.base + c * p.chunk_stride() + p.land_stride);
  return v;
}

namespace {
// pack.h names a participant by its index ("participant 2: ..."); the
// error names its host.
std::string with_host(const std::string& err, const std::vector<int>& hosts,
                      const std::function<const std::string&(int)>& host_id) {
  int j = -1, used = 0;
  if (std::sscanf(err.c_str(), "participant %d: %n", &j, &used) == 1 && used > 0 && j >= 0 &&
      static_cast<size_t>(j) < hosts.size())
    return fmt::format("host {}: {}", host_id(hosts[size_t(j)]), err.substr(size_t(used)));
  return err;
}
}  // namespace

bool Engine::end_packed(XOp& x, size_t c, const Phase& ph, const std::vector<Arrived>& in) {
  const Plan& p = x.p();
  Chunk& ch = x.chunks[c];
  auto bad = [&](const std::string& what) {
    fail(x, Status(GSYNC_ERR_PROTOCOL, fmt::format("{}: chunk {}: {}", x.describe(), c, what)),
         true);
    return true;
  };
  std::vector<Arrival> arrivals;
  for (size_t i = 0; i < ph.recvs.size(); i++) {
    const Transfer& r = ph.recvs[i];
    const std::string& from = host_id(p.hosts[size_t(r.peer)]);
    bool want_data = r.kind == Xfer::kCopy && !ph.packed;
    if (in[i].in_data != want_data)
      return bad(fmt::format("host {} wrote its {} into the {}", from, xfer_name(r.kind),
                             in[i].in_data ? "tensor, expected scratch" : "scratch, expected the tensor"));
    if (!ph.packed) {
      if (in[i].len != p.chunk_len(c))
        return bad(fmt::format("host {} sent {} bytes of its {}, expected {}", from, in[i].len,
                               xfer_name(r.kind), p.chunk_len(c)));
      continue;
    }
    const uint8_t* at = x.scratch + p.land_offset(r.kind, r.slot, c, p.slot_bytes);
    if (r.kind == Xfer::kCopy) ch.copy_len = in[i].len;
    arrivals.push_back({r.peer, at, in[i].len});
  }
  if (!ph.packed) return false;
  PackView v = pack_view(x, c);
  std::string err = end_phase(ph, p.self, v, arrivals);
  if (err.empty()) return false;
  return bad(with_host(err, p.hosts, [this](int h) -> const std::string& { return host_id(h); }));
}

void Engine::count_sent(int host, uint64_t wire, uint64_t logical) {
  if (host < 0) return;
  if (static_cast<size_t>(host) >= sent_.size()) sent_.resize(size_t(host) + 1);
  sent_[size_t(host)].wire += wire;
  sent_[size_t(host)].logical += logical;
}

cluster::CrossHostService::Payload Engine::payload_sent(int peer) const {
  return peer >= 0 && static_cast<size_t>(peer) < sent_.size() ? sent_[size_t(peer)] : Payload{};
}

}  // namespace gsync::collective
