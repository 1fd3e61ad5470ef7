// SPDX-License-Identifier: Apache-2.0
//
// A server's side of the parameter server: a worker's request (its PsPush,
// and its push's bytes in its slot) checked and applied by the shard's
// ParamServer, then answered once the sync mode allows: a pull by a write
// of the shard's values into the worker's reply area, a push alone by a
// PsAck once it is applied, a refusal by a PsAck with the reason. A
// refusal changes nothing on the server.
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
  (void)serve(*k, p);  // a refusal is answered to the worker
}

Status Service::serve(Key& k, int w) {
  Served& s = k.served[size_t(w)];
  if (!s.message) return Status::ok();
  const PsPush m = s.msg;
  proto::Opcode opcode{};
  proto::opcode_from_wire(m.opcode, &opcode);
  const bool push = opcode != proto::Opcode::kPull;
  // A push's bytes come on their own; the request waits for them.
  if (push && (!s.data || s.data_clock != static_cast<uint32_t>(m.clock))) return Status::ok();
  s.message = false;
  s.data = false;
  std::string who = fmt::format("{}: {} of host {} at clock {}", k.describe(),
                                proto::name(opcode), host_id(k.hosts[size_t(w)]), m.clock);
  Status st = k.broken;
  if (st && m.count != k.count)
    st = Status(GSYNC_ERR_MISMATCH, fmt::format("{}: {} values; it is declared with {}", who,
                                                m.count, k.count));
  if (st && push) st = k.server->push(w, m.clock, m.weight, m.lr, k.push_slot(w), who);
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
    s.pull_step = opcode == proto::Opcode::kPull ? m.clock : m.clock + 1;
  }
  answer_ready(k);
  return Status::ok();
}

// Every worker whose answer the shard's state now allows gets it.
void Service::answer_ready(Key& k) {
  for (int w = 0; w < static_cast<int>(k.served.size()); w++) {
    Served& s = k.served[size_t(w)];
    if (s.waiting_ack && k.server->applied(w, s.clock)) {
      s.waiting_ack = false;
      send_ack(k, w, s.token, s.clock, Status::ok());
    } else if (s.waiting_pull && !s.replying && k.server->may_pull(s.pull_step)) {
      s.waiting_pull = false;
      reply(k, w);
    }
    if (find(k.job, k.key) != &k) return;  // a local answer ended the key's last op and the key
  }
}

void Service::reply(Key& k, int w) {
  Served& s = k.served[size_t(w)];
  const uint64_t imm = imm_of(s.token, s.clock);
  if (w == k.self) {
    k.server->read(k.reply_area.data() + k.shards[size_t(k.self)].begin * k.elem);
    on_reply(k, w, imm);
    return;
  }
  // A copy of the values as they are now: the write sends it while later
  // pushes change the master values.
  k.server->read(k.staging_slot(w));
  s.replying = true;
  k.replies_in_flight++;
  cp_->net().write(k.hosts[size_t(w)], k.staging_slot(w), k.shard_bytes(k.self),
                   k.peer_reply[size_t(w)], k.shards[size_t(k.self)].begin * k.elem, imm,
                   reply_cookie(k.id, w));
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
