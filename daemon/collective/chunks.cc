// SPDX-License-Identifier: Apache-2.0
//
// The chunk schedule of an op (docs/algorithms.md): each chunk runs its
// phases; a phase ends when its sends are done and its expected transfers
// have landed, then what arrived for reduction is folded in the fixed
// order and the next phase starts. Chunks start as the local fold finishes
// them, within the window; a chunk that finishes is reported at once so
// that its store can run while later chunks are still on the wire.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/collective/engine.h"
#include "daemon/collective/engine_op.h"
#include "daemon/reduce/reduce.h"

namespace gsync::collective {

using xop::arrival_code;
using xop::imm_of;

// More of the local fold is in: start the op, or the chunks from `from` on
// that the fold has now finished.
void Engine::start_local_chunks(XOp& x, size_t from) {
  if (!x.running) {
    maybe_run(x);
    return;
  }
  auto keep = x.hold();
  for (size_t c = from; c < x.p().nchunks && !x.finished && chunk_local_ready(x, c); c++)
    progress(x, c);
}

// Chunk c of data holds this host's contribution (the local fold wrote it).
bool Engine::chunk_local_ready(const XOp& x, size_t c) const {
  return std::min<uint64_t>(x.p().shape.count, (c + 1) * x.p().chunk_elems) <= x.local_elems;
}

size_t Engine::window_end(const XOp& x) const {
  return std::min(x.p().nchunks, x.done_prefix + x.p().window);
}

// Runs the op's schedule once the local fold has begun to come in (all of
// it for a small op) and, unless the op goes eagerly, every peer's
// rendezvous came.
void Engine::maybe_run(XOp& x) {
  const Plan& p = x.p();
  if (x.running || x.finished) return;
  if (!x.local_ready && (p.eager || p.nchunks == 0 || x.local_elems == 0)) return;
  if (!p.eager && x.ready_count + 1 < static_cast<int>(p.hosts.size())) return;
  x.running = true;
  if (x.cb.running) x.cb.running();
  if (!p.eager) {
    x.weight_total = x.weight_local;
    for (const auto& r : x.ready)
      if (r.seen) x.weight_total += r.msg.weight_sum;
  }
  if (p.nchunks == 0) {
    complete(x, Status::ok());
    return;
  }
  auto keep = x.hold();  // progress may finish and erase it
  for (size_t c = 0; c < p.nchunks && !x.finished; c++) progress(x, c);
}

// The phase's writes of chunk c: [src, src + len) to every peer it sends
// to, where that peer's plan lands it (Plan::land_offset with the peer's
// slot stride from its rendezvous). A raw final value goes into the
// peer's data; everything else into its scratch.
void Engine::issue_sends(XOp& x, size_t c, const Phase& ph, const uint8_t* src, uint64_t len) {
  const Plan& p = x.p();
  x.chunks[c].pending_sends = static_cast<int>(ph.sends.size());
  const Clock::time_point now = x.wire ? Clock::now() : Clock::time_point{};
  for (const auto& t : ph.sends) {
    const OpReady& r = x.ready[size_t(t.peer)].msg;
    bool into_data = t.kind == Xfer::kCopy && !ph.packed;
    uint32_t region = into_data ? r.data_region : r.scratch_region;
    uint64_t roff = into_data ? c * p.chunk_bytes : p.land_offset(t.kind, t.slot, c, r.slot_bytes);
    const int host = p.hosts[size_t(t.peer)];
    // Its completion (on_write_done) finds the log's entry by the cookie.
    uint32_t ref = x.wire ? x.wire->add(true, host, uint32_t(c), xfer_name(t.kind), now) : 0;
    net_.write(host, src, len, region, roff, imm_of(r.token, c, t.kind, t.slot),
               xop::cookie_of(x.token, ref, c));
    count_sent(p.hosts[size_t(t.peer)], len,
               ph.packed ? (t.kind == Xfer::kMaxima ? 0 : p.chunk_len(c)) : len);
  }
}

void Engine::fold(XOp& x, size_t c, const Phase& ph) {
  const Plan& p = x.p();
  uint64_t off = c * p.chunk_bytes;
  uint64_t elems = std::min(p.chunk_elems, p.shape.count - c * p.chunk_elems);
  // The inputs on the stack for the usual few; a wide direct fold (many
  // hosts) takes them from the heap.
  constexpr size_t kOnStack = 16;
  const void* stack[kOnStack];
  std::vector<const void*> heap;
  size_t want = 0;
  for (int j : ph.fold) want += j == p.self ? 1 : ph.recvs.size();
  const void** in = stack;
  if (want > kOnStack) {
    heap.resize(want);
    in = heap.data();
  }
  size_t n = 0;
  for (int j : ph.fold) {
    if (j == p.self) {
      in[n++] = x.data + off;
      continue;
    }
    for (const auto& r : ph.recvs)
      if (r.peer == j && r.kind == Xfer::kReduce)
        in[n++] = x.scratch + p.land_offset(Xfer::kReduce, r.slot, c, p.slot_bytes);
  }
  void* out[] = {x.data + off};
  reduce::ReduceArgs a;
  a.inputs = in;
  a.n_inputs = n;
  a.outputs = out;
  a.n_outputs = 1;
  a.count = elems;
  a.dtype = p.shape.dtype;
  // Hosts add their contributions; averages are taken once, at the store.
  a.op = p.shape.redop == proto::RedOp::kMin   ? reduce::Op::kMin
         : p.shape.redop == proto::RedOp::kMax ? reduce::Op::kMax
                                               : reduce::Op::kSum;
  reduce::reduce(a);
}

// The current phase of chunk c has sent everything and everything it
// expects has landed: fold, move on. False while it still waits.
// False while the op goes on; true when it failed (and has ended).
bool Engine::start_phase(XOp& x, size_t c, const Phase& ph) {
  Chunk& ch = x.chunks[c];
  ch.sent = true;
  if (x.p().eager) {
    send_eager(x, ph);
    return false;
  }
  if (!ph.packed) {
    issue_sends(x, c, ph, x.data + c * x.p().chunk_bytes, x.p().chunk_len(c));
    return false;
  }
  PackView v = pack_view(x, c);
  Arrival copy_in{-1, x.scratch + x.p().land_offset(Xfer::kCopy, 0, c, x.p().slot_bytes),
                  ch.copy_len};
  Outgoing o = begin_phase(ph, v, copy_in);
  ch.send_len = v.send_len;
  if (o.len > x.p().land_stride && !ph.sends.empty()) {
    fail(x, Status(GSYNC_ERR_INTERNAL, fmt::format("{}: chunk {}: an encoding of {} bytes is "
                                                   "larger than the {}-byte landing area",
                                                   x.describe(), c, o.len, x.p().land_stride)),
         true);
    return true;
  }
  issue_sends(x, c, ph, o.bytes, o.len);
  return false;
}

bool Engine::phase_done(XOp& x, size_t c) {
  Chunk& ch = x.chunks[c];
  const Phase& ph = x.sched->chunks[c][ch.phase];
  if (!ch.sent && start_phase(x, c, ph)) return false;
  if (ch.pending_sends > 0) return false;
  for (const auto& r : ph.recvs)
    if (std::find(ch.arrived.begin(), ch.arrived.end(), arrival_code(r.peer, r.kind, r.slot)) ==
        ch.arrived.end())
      return false;
  std::vector<Arrived> in;
  bool reduces = false;
  for (const auto& r : ph.recvs) {
    auto it = std::find(ch.arrived.begin(), ch.arrived.end(), arrival_code(r.peer, r.kind, r.slot));
    in.push_back(*it);
    ch.arrived.erase(it);
    reduces |= r.kind == Xfer::kReduce;
  }
  if (!x.p().eager && x.p().packed && end_packed(x, c, ph, in)) return false;
  if (reduces && !ph.packed) fold(x, c, ph);
  if (x.p().eager)
    for (const auto& r : ph.recvs)
      if (r.kind == Xfer::kReduce) x.weight_acc += x.slot_weight[r.slot];
  ch.phase++;
  ch.sent = false;
  return true;
}

void Engine::progress(XOp& x, size_t c) {
  Chunk& ch = x.chunks[c];
  // Writes may land for a chunk before this host's fold reached it (they go
  // to scratch); its phases wait for the fold, and for the window.
  // A finished chunk is counted once.
  if (ch.done || !chunk_local_ready(x, c)) return;
  if (ch.phase == 0 && !ch.sent && c >= window_end(x)) return;
  while (ch.phase < x.sched->chunks[c].size())
    if (!phase_done(x, c)) return;
  chunk_finished(x, c);
}

void Engine::chunk_finished(XOp& x, size_t c) {
  const Plan& p = x.p();
  if (p.eager) x.weight_total = x.weight_acc;
  x.chunks[c].done = true;
  if (x.cb.chunk_done)
    x.cb.chunk_done(c * p.chunk_elems, std::min<uint64_t>(p.shape.count, (c + 1) * p.chunk_elems),
                    x.weight_total);
  if (x.finished) return;  // the callback ended the op
  size_t admitted = window_end(x);
  while (x.done_prefix < p.nchunks && x.chunks[x.done_prefix].done) x.done_prefix++;
  if (++x.chunks_done == p.nchunks) {
    complete(x, Status::ok());
    return;
  }
  // The window moved: start the chunks it now takes in.
  for (size_t n = admitted; n < window_end(x) && !x.finished; n++) progress(x, n);
}

void Engine::on_write(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm) {
  XOp* found = find(static_cast<uint32_t>(imm >> 32));
  if (!found) return;  // an op that already ended here
  XOp& x = *found;
  const Plan& p = x.p();
  size_t c = xop::imm_chunk(imm);
  int j = x.participant_of(peer);
  uint8_t slot = xop::imm_slot(imm);
  Xfer kind = Xfer::kReduce;
  bool known = xop::imm_kind(imm, &kind);
  // A raw final value lands in the data; every other transfer in scratch,
  // where this plan's layout puts it. A packed transfer's length is the
  // encoding's (checked by its decoder), a raw one's the chunk's (checked
  // when its phase ends: in a packed plan both kinds land in scratch).
  bool into_data = region == p.data_region && region != 0;
  // Into the data only a raw final value; in a plan that packs nothing,
  // every final value is raw and nothing else comes.
  bool where_ok = into_data ? kind == Xfer::kCopy
                            : p.packed || (p.eager ? true : kind == Xfer::kReduce);
  uint64_t expect_off =
      into_data ? c * p.chunk_bytes : p.land_offset(kind, slot, c, p.slot_bytes);
  uint64_t room = !p.packed || into_data ? (c < p.nchunks ? p.chunk_len(c) : 0)
                  : kind == Xfer::kMaxima ? p.maxima_stride
                                          : p.land_stride;
  bool fits = p.packed && !into_data ? len <= room : len == room;
  if (j < 0 || !known || c >= p.nchunks || !fits || offset != expect_off || !where_ok) {
    spdlog::error("{}: unexpected write from host {}: chunk {}, {} bytes at {} (expected {} "
                  "bytes at {})",
                  x.describe(), host_id(peer), c, len, offset, room, expect_off);
    return;
  }
  x.chunks[c].arrived.push_back({arrival_code(j, kind, slot), len, into_data});
  if (x.wire) x.wire->add(false, peer, uint32_t(c), xfer_name(kind), Clock::now());
  if (x.running) {
    auto keep = x.hold();
    progress(x, c);
  }
}

void Engine::on_write_done(int peer, uint64_t cookie, const Status& st) {
  XOp* found = find(static_cast<uint32_t>(cookie >> 32));
  if (!found) return;
  XOp& x = *found;
  auto keep = x.hold();
  if (!st) {
    fail(x, Status(GSYNC_ERR_HOST_LOST, fmt::format("{}: sending to host {} failed: {}",
                                                    x.describe(), host_id(peer), st.message())),
         true);
    return;
  }
  if (x.wire) x.wire->done(xop::cookie_wire_ref(cookie), Clock::now());
  size_t c = xop::cookie_chunk(cookie);
  if (c >= x.p().nchunks) return;
  if (--x.chunks[c].pending_sends == 0) progress(x, c);
}

}  // namespace gsync::collective
