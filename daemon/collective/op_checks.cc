// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/op_checks.h"

#include <fmt/format.h>

#include "protocol/compression.h"
#include "protocol/ops.h"

namespace gsync::collective {

namespace {

Status protocol_error(const OpParty& who, const std::string& what) {
  return Status(GSYNC_ERR_PROTOCOL, fmt::format("{}: host {} {}", who.op, who.from, what));
}
}  // namespace

Status check_same_shape(const Plan& p, const OpReady& m, const OpParty& who) {
  uint8_t compress = 0;
  uint32_t compress_arg = 0;
  proto::to_entry(p.shape.compress, &compress, &compress_arg);
  bool same = m.opcode == proto::wire(p.shape.opcode) && m.count == p.shape.count &&
              m.dtype == proto::wire(p.shape.dtype) && m.redop == proto::wire(p.shape.redop) &&
              m.algo == static_cast<uint8_t>(p.algo) && m.chunk_bytes == p.chunk_bytes;
  if (same && m.compress == compress && m.compress_arg == compress_arg) return Status::ok();
  if (same) {
    // Only the codec differs: a peer that runs another codec (or one this
    // build does not know) is refused before any data moves.
    proto::Compression theirs;
    std::string why = proto::from_entry(m.compress, m.compress_arg, &theirs);
    return Status(GSYNC_ERR_MISMATCH,
                  fmt::format("{}: hosts disagree on compression: host {} has {}, host {} has {}",
                              who.op, who.from,
                              why.empty() ? proto::describe(theirs) : "an unknown one (" + why + ")",
                              who.self, proto::describe(p.shape.compress)));
  }
  Algo theirs{};
  const char* their_algo = algo_from_wire(m.algo, &theirs) ? algo_name(theirs) : "unknown-algo";
  return Status(GSYNC_ERR_MISMATCH,
                fmt::format("{}: hosts disagree: host {} has {} of {} {} (op {}, {} in {}-byte "
                            "chunks), host {} has {} of {} {} (op {}, {} in {}-byte chunks)",
                            who.op, who.from, proto::opcode_name(m.opcode), m.count,
                            proto::dtype_name(m.dtype), proto::redop_name(m.redop), their_algo,
                            m.chunk_bytes, who.self, proto::name(p.shape.opcode), p.shape.count,
                            proto::name(p.shape.dtype), proto::name(p.shape.redop),
                            algo_name(p.algo), p.chunk_bytes));
}

Status check_rendezvous(const Plan& p, size_t msg_bytes, const OpParty& who) {
  if (!p.eager && msg_bytes == sizeof(OpReady)) return Status::ok();
  return protocol_error(who, fmt::format("sent a {}-byte rendezvous; this op goes {}", msg_bytes,
                                         p.eager ? "eagerly (no rendezvous)" : "by rendezvous"));
}

Status check_op_data(const Plan& p, const Schedule& sched, int j, const OpReady& m,
                     size_t data_bytes, const OpParty& who, EagerLanding* out) {
  if (j < 0 || static_cast<size_t>(j) >= p.hosts.size())
    return protocol_error(who, "sent data for an op it takes no part in");
  if (Status st = check_same_shape(p, m, who); !st) return st;
  if (!p.eager) return protocol_error(who, "sent eager data; this op goes by rendezvous");
  if (data_bytes != p.shape.bytes())
    return protocol_error(who, fmt::format("sent {} bytes of data, expected {}", data_bytes,
                                           p.shape.bytes()));
  if (m.xfer > static_cast<uint8_t>(Xfer::kCopy))
    return protocol_error(who, fmt::format("sent a transfer of unknown kind {}", m.xfer));
  auto kind = static_cast<Xfer>(m.xfer);
  // Which phase of this host's schedule expects it. An eager plan has one
  // chunk; the check stands on its own all the same.
  if (sched.chunks.empty())
    return protocol_error(who, "sent data for an op whose schedule has no transfers here");
  const auto& phases = sched.chunks[0];
  for (size_t ph = 0; ph < phases.size(); ph++) {
    for (const auto& r : phases[ph].recvs) {
      if (r.peer != j || r.kind != kind || (kind == Xfer::kReduce && r.slot != m.slot)) continue;
      if (kind == Xfer::kReduce && r.slot >= p.slots) break;  // a schedule bug: never land it
      *out = EagerLanding{ph, kind, kind == Xfer::kCopy ? uint8_t{0} : r.slot};
      return Status::ok();
    }
  }
  return protocol_error(who, fmt::format("sent a {} (slot {}) that this host's {} schedule does "
                                         "not expect",
                                         xfer_name(kind), m.slot, algo_name(p.algo)));
}

Status abort_status(const OpAbort& m, const std::string& from) {
  const int code = proto::is_error_code(m.code) ? m.code : GSYNC_ERR_PROTOCOL;
  return Status(code, fmt::format("{} (reported by host {})",
                                  cluster::field(m.message, sizeof m.message), from));
}

}  // namespace gsync::collective
