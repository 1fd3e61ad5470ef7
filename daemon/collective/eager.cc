// SPDX-License-Identifier: Apache-2.0
//
// Small ops go eagerly: no rendezvous, no one-sided writes. Every transfer
// of the op's schedule (daemon/collective/schedule.h) is one OpData control
// message that carries the sender's data as it is when the phase starts;
// the receiver puts it where the write would have landed (a scratch slot,
// or its data for a final value) and the schedule engine (chunks.cc) goes
// on exactly as for writes. One message per transfer instead of a
// rendezvous round and then the writes: the latency of direct, tree and
// doubling for tensors up to transport::kMaxControl.
//
// Weights (weighted average) travel with the data: each message carries the
// weight of what its data holds (the sender's own, then what it folded in),
// so the host that ends with the whole sum also holds the whole weight.
#include <cstddef>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/collective/engine.h"
#include "daemon/collective/engine_op.h"
#include "daemon/collective/op_checks.h"

namespace gsync::collective {

using xop::arrival_code;

namespace {
// A host that waits on a peer which itself waits gives that one this long
// per step of separation to time out first, so that the error names the
// host that never came rather than a host in between.
constexpr auto kTimeoutGrace = std::chrono::milliseconds(250);

}  // namespace

void Engine::send_eager(XOp& x, const Phase& p) {
  if (p.sends.empty()) return;
  // One message for the phase (a tree's root sends the same sum to every
  // child); only the transfer's kind and slot differ from send to send.
  OpReady m = op_message(x, kOpData, x.weight_acc);
  std::string msg(cluster::as_bytes(m));
  msg.append(reinterpret_cast<const char*>(x.data), x.p().shape.bytes());
  const Clock::time_point now = x.wire ? Clock::now() : Clock::time_point{};
  for (const auto& t : p.sends) {
    msg[offsetof(OpReady, xfer)] = static_cast<char>(t.kind);
    msg[offsetof(OpReady, slot)] = static_cast<char>(t.slot);
    cp_.send(x.p().hosts[size_t(t.peer)], msg);
    // A message has no completion: the log has when it was handed over.
    if (x.wire) x.wire->add(true, x.p().hosts[size_t(t.peer)], 0, xfer_name(t.kind), now);
  }
}

void Engine::on_eager_data(XOp& x, int peer, const OpReady& m, std::string_view data,
                           Clock::time_point came) {
  const Plan& p = x.p();
  std::string op = x.describe();
  OpParty who{op, host_id(peer), cp_.self_id()};
  int j = x.participant_of(peer);
  EagerLanding at;
  if (Status st = check_op_data(p, *x.sched, j, m, data.size(), who, &at); !st) {
    fail(x, st, true);
    return;
  }
  auto bad = [&](const std::string& what) {
    fail(x, Status(GSYNC_ERR_PROTOCOL, fmt::format("{}: host {} {}", op, who.from, what)), true);
  };
  Chunk& ch = x.chunks[0];
  uint32_t code = arrival_code(j, at.kind, at.slot);
  if (at.phase < ch.phase ||
      std::find(ch.arrived.begin(), ch.arrived.end(), code) != ch.arrived.end())
    return bad(fmt::format("sent its {} twice", xfer_name(at.kind)));
  if (at.kind == Xfer::kCopy) {
    // A final value overwrites the data: only once this host has sent what
    // the schedule sends before it (the sum needed it).
    if (!x.running || at.phase != ch.phase || !ch.sent)
      return bad("sent the final sum before this host sent its part");
    std::memcpy(x.data, data.data(), p.shape.bytes());
    x.weight_acc = m.weight_sum;
  } else {
    // check_op_data: at.slot < p.slots, and eager scratch holds p.slots
    // slots of p.slot_bytes = the tensor's bytes (Engine::prepare).
    std::memcpy(x.scratch + size_t(at.slot) * p.slot_bytes, data.data(), p.shape.bytes());
    x.slot_weight[at.slot] = m.weight_sum;
  }
  x.ready[size_t(j)] = XOp::PeerReady{true, m};
  ch.arrived.push_back({code, data.size()});
  if (x.wire) x.wire->add(false, peer, 0, xfer_name(at.kind), Clock::now());
  // The straggler report's host lag: a transfer that a phase of step 0
  // takes left its host as soon as that host's part was ready (it waited
  // on no one), so when it came is the host's rendezvous. A later one
  // (a tree's inner node, a doubling's second round) carries others' lag.
  if (x.hosts && x.sched->chunks[0][at.phase].step == 0) x.hosts->add(peer, came);
  if (x.running) {
    auto keep = x.hold();
    progress(x, 0);
  }
}

bool Engine::eager_waits_on(const XOp& x, int participant) const {
  if (x.sched->chunks.empty()) return false;
  for (const auto& p : x.sched->chunks[0])
    for (const auto& r : p.recvs)
      if (r.peer == participant) return true;
  return false;
}

std::string Engine::eager_waiting_for(const XOp& x) const {
  if (!x.local_ready) return "the local ranks";
  if (x.sched->chunks.empty() || x.chunks[0].phase >= x.sched->chunks[0].size()) return "nothing";
  const Chunk& ch = x.chunks[0];
  std::string hosts;
  bool final_sum = false;
  for (const auto& r : x.sched->chunks[0][ch.phase].recvs) {
    if (std::find(ch.arrived.begin(), ch.arrived.end(), arrival_code(r.peer, r.kind, r.slot)) !=
        ch.arrived.end())
      continue;
    final_sum |= r.kind == Xfer::kCopy;
    hosts += (hosts.empty() ? "" : ", ") + host_id(x.p().hosts[size_t(r.peer)]);
  }
  return fmt::format("the {} from host{} {} ({}, step {} of {})",
                     final_sum ? "final sum" : "partial sums",
                     hosts.find(',') == std::string::npos ? "" : "s", hosts, algo_name(x.p().algo),
                     ch.phase + 1, x.sched->chunks[0].size());
}

// The hosts that wait directly for the host that never came know its name;
// the others wait on hosts that wait. A host gives one grace per step of its
// schedule before the one it waits in (Phase::step), so the first to time
// out are those whose wait is on the missing host itself, and their abort
// names it to everyone (OpAbort).
std::chrono::milliseconds Engine::eager_timeout_grace(const XOp& x) const {
  if (x.sched->chunks.empty() || x.chunks[0].phase >= x.sched->chunks[0].size())
    return std::chrono::milliseconds(0);
  return kTimeoutGrace * x.sched->chunks[0][x.chunks[0].phase].step;
}

}  // namespace gsync::collective
