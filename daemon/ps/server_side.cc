// SPDX-License-Identifier: Apache-2.0
//
// A server's side of the parameter server: a worker's request (its PsPush,
// and its push's bytes in its slot) checked and applied by the shard's
// ParamServer, then answered once the sync mode allows: a pull by a write
// of the shard's values into the worker's reply area, a push alone by a
// PsAck once it is applied, a refusal by a PsAck with the reason. A
// refusal changes nothing on the server.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/ps/service_key.h"

namespace gsync::ps {

void Service::on_push(int peer, const PsPush& m) {
  std::string job = cluster::field(m.job, sizeof m.job);
  Key* k = find(job, m.key);
  int p = k ? k->participant_of(peer) : -1;
  auto refuse = [&](int code, const std::string& why) {
    PsAck a;
    a.code = code;
    a.token = m.token;
    cluster::set_field(a.job, sizeof a.job, job);
    a.key = m.key;
    a.clock = m.clock;
    cluster::set_field(a.message, sizeof a.message, why);
    cp_->send(peer, cluster::as_bytes(a));
  };
  proto::Opcode opcode{};
  if (!proto::opcode_from_wire(m.opcode, &opcode) ||
      (opcode != proto::Opcode::kPush && opcode != proto::Opcode::kPull &&
       opcode != proto::Opcode::kPushPull))
    return refuse(GSYNC_ERR_PROTOCOL,
                  fmt::format("job {} parameter key {}: host {} sent a request of opcode {}", job,
                              m.key, host_id(peer), m.opcode));
  // A server serves once it has made the key and knows the worker's
  // regions, not only once its own declaration is complete (its peers'
  // regions may still be on their way): the worker's PsRegions came before
  // its PsPush, on the same ordered link, and the worker declared only
  // after it had this host's.
  if (!k || p < 0 || !k->known[size_t(p)])
    return refuse(GSYNC_ERR_INVALID,
                  fmt::format("job {} parameter key {} is not declared on host {}{}", job, m.key,
                              host_id(self()), k && p < 0 ? " with host " + host_id(peer) : ""));
  Served& s = k->served[size_t(p)];
  if (s.message || s.waiting_pull || s.waiting_ack)
    return refuse(GSYNC_ERR_PROTOCOL,
                  fmt::format("{}: host {} sent a request while its last one is unanswered",
                              k->describe(), host_id(peer)));
  s.message = true;
  s.msg = m;
  s.reply_region = m.reply_region;
  (void)serve(*k, p);  // a refusal is answered to the worker
}

// A push's bytes, into the writer's slot, in pieces that may land in any
// order; a write of another token or clock than the push being gathered
// starts a new push (the worker sends its next one only once this one is
// answered, which needs all of it).
void Service::on_push_data(Key& k, int w, uint64_t offset, uint64_t len, uint64_t imm) {
  Served& s = k.served[size_t(w)];
  const uint64_t bytes = k.shard_bytes(k.self), slot = uint64_t(w) * bytes;
  if (!s.data_started || imm_token(imm) != s.data_token || imm_clock(imm) != s.data_clock) {
    s.data_started = true;
    s.data_token = imm_token(imm);
    s.data_clock = imm_clock(imm);
    s.pieces.reset(bytes);
    s.landed = 0;
  }
  if (offset < slot || !s.pieces.land(offset - slot, len)) {
    spdlog::error("{}: host {} wrote {} bytes at {} of the push region (token {}, clock {}); "
                  "not a piece of its {} bytes at {} that is still to come",
                  k.describe(), host_id(k.hosts[size_t(w)]), len, offset, imm_token(imm),
                  imm_clock(imm), bytes, slot);
    return;
  }
  s.landed = s.pieces.prefix();
  if (k.bsp())
    advance(k);
  else
    (void)serve(k, w);  // a refusal is answered to the worker
}

Status Service::serve(Key& k, int w) {
  Served& s = k.served[size_t(w)];
  if (!s.message) return Status::ok();
  const PsPush m = s.msg;
  proto::Opcode opcode{};
  proto::opcode_from_wire(m.opcode, &opcode);
  const bool push = opcode != proto::Opcode::kPull;
  // asp and ssp apply a push at once: its bytes must all be in. bsp takes
  // the request now and applies the clock as the bytes land (advance).
  if (push && !k.bsp() && !k.data_in(w)) return Status::ok();
  s.message = false;
  std::string who = fmt::format("{}: {} of host {} at clock {}", k.describe(),
                                proto::name(opcode), host_id(k.hosts[size_t(w)]), m.clock);
  Status st = k.broken;
  if (st && m.count != k.count)
    st = Status(GSYNC_ERR_MISMATCH, fmt::format("{}: {} values; it is declared with {}", who,
                                                m.count, k.count));
  if (st && push) st = k.server->push(w, m.clock, m.weight, m.lr, k.push_slot(w), who);
  if (st && push) k.sample_updates(std::chrono::steady_clock::now());
  if (st && push && !k.bsp()) maybe_checkpoint(k);
  if (!st) {
    spdlog::warn("{}", st.message());
    send_ack(k, w, m.token, m.clock, st);
    return st;
  }
  s.token = m.token;
  s.clock = m.clock;
  if (opcode == proto::Opcode::kPush) {
    s.waiting_ack = true;
  } else {
    s.waiting_pull = true;
    s.wait_since = std::chrono::steady_clock::now();
    s.reply_sent = 0;
    s.pull_step = opcode == proto::Opcode::kPull ? m.clock : m.clock + 1;
  }
  if (k.bsp() && push) {
    advance(k);  // answers what the clock's end allows
    return Status::ok();
  }
  answer_ready(k);
  return Status::ok();
}

// bsp: once every worker's push of the clock is taken, the update of the
// elements whose bytes have landed from all of them is applied, and sent on
// at once to every worker whose pull waits for the clock's values; the
// clock's last range completes it, and the answers it allows go.
void Service::advance(Key& k) {
  ParamServer& sv = *k.server;
  if (!sv.gathered()) return;
  const uint64_t count = k.shards[size_t(k.self)].count();
  const uint32_t clock = static_cast<uint32_t>(sv.bsp_clock());
  uint64_t in = k.shard_bytes(k.self);
  for (const Served& s : k.served)
    in = std::min(in, s.data_token == (s.token & 0x7fffffffu) && s.data_clock == clock ? s.landed
                                                                                        : 0);
  const uint64_t from = sv.applied_upto(), upto = in / k.elem;
  if (upto <= from && upto < count) return;
  const uint64_t step = sv.bsp_clock() + 1;
  sv.apply_upto(upto);
  if (k.dtype != proto::DType::kF32) sv.read(k.staging_slot(k.self), from, upto);
  if (upto < count) {
    // With the guard, nothing goes before the clock's verdict.
    for (int w = 0; w < static_cast<int>(k.served.size()) && !k.guard.on; w++) {
      const Served& s = k.served[size_t(w)];
      if (w != k.self && s.waiting_pull && s.pull_step == step) reply(k, w, upto);
    }
    return;
  }
  if (k.guard.on) {
    on_clock_applied(k);  // the verdict first (guard.cc)
    return;
  }
  maybe_checkpoint(k);  // between clocks: the state of the clock just reached
  answer_ready(k);
}

// Every worker whose answer the shard's state now allows gets it.
void Service::answer_ready(Key& k) {
  if (k.ckpt.resume_pending) return;  // the state may yet be a checkpoint's
  if (k.verdict_pending) return;      // the state may yet be rolled back
  const uint64_t count = k.shards[size_t(k.self)].count();
  for (int w = 0; w < static_cast<int>(k.served.size()); w++) {
    Served& s = k.served[size_t(w)];
    if (s.waiting_ack && k.server->applied(w, s.clock)) {
      s.waiting_ack = false;
      send_ack(k, w, s.token, s.clock, Status::ok());
    } else if (s.waiting_pull && (k.bsp() || s.reply_writes == 0) &&
               k.server->may_pull(s.pull_step)) {
      reply(k, w, count);
    }
    if (find(k.job, k.key) != &k) return;  // a local answer ended the key's last op and the key
  }
}

// Sends worker w the shard's values of the elements [reply_sent, upto);
// upto at the shard's end answers its pull.
void Service::reply(Key& k, int w, uint64_t upto) {
  Served& s = k.served[size_t(w)];
  const uint64_t imm = imm_of(s.token, s.clock), count = k.shards[size_t(k.self)].count();
  const uint64_t at = k.shards[size_t(k.self)].begin * k.elem;
  if (upto == count && s.waiting_pull) {
    s.waiting_pull = false;
    s.waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - s.wait_since)
                      .count();
  }
  if (w == k.self) {
    // This host's own op: the one on the wire for the key, unless it ended
    // (aborted) while it waited.
    if (!k.current || k.current->req.token != s.token) return;
    k.server->read(k.current->req.data + at);
    on_reply(k, w, imm, at, k.shard_bytes(k.self));
    return;
  }
  // asp, ssp: a copy of the values as they are now, which the writes send
  // while later pushes change the master values. In bsp they change only
  // once every worker has pushed again, which each does only after its
  // answer came: fp32 values go as they are, others as converted once for
  // all (advance).
  const uint8_t* src = k.staging_slot(w);
  if (!k.bsp())
    k.server->read(k.staging_slot(w));
  else if (k.dtype == proto::DType::kF32)
    src = reinterpret_cast<const uint8_t*>(k.server->values().data());
  else
    src = k.staging_slot(k.self);
  const uint64_t chunk = std::max<uint64_t>(1, kPsChunkBytes / k.elem);
  for (uint64_t e = s.reply_sent; e < upto; e += chunk) {
    const uint64_t n = std::min(chunk, upto - e);
    s.reply_writes++;
    k.replies_in_flight++;
    cp_->net().write(k.hosts[size_t(w)], src + e * k.elem, n * k.elem, s.reply_region,
                     at + e * k.elem, imm, reply_cookie(k.id, w));
  }
  s.reply_sent = upto == count ? 0 : upto;
}

void Service::send_ack(Key& k, int w, uint32_t token, uint64_t clock, const Status& st) {
  PsAck a;
  a.code = st.code();
  a.token = token;
  cluster::set_field(a.job, sizeof a.job, k.job);
  a.key = k.key;
  a.clock = clock;
  cluster::set_field(a.message, sizeof a.message, st.message());
  if (w == k.self) {
    on_ack(k.hosts[size_t(w)], a);
    return;
  }
  cp_->send(k.hosts[size_t(w)], cluster::as_bytes(a));
}

}  // namespace gsync::ps
