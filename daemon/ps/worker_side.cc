// SPDX-License-Identifier: Apache-2.0
//
// This host's pushes and pulls: one op per key on the wire at a time, its
// shards sent to their hosts (this host's own served in place, first, so
// that a refusal, such as a clock out of order, sends nothing), and the
// answers gathered: the shards' values into the reply area for a pull, an
// acknowledgement for a push alone.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/ps/service_key.h"

namespace gsync::ps {

void Service::begin(const Request& r, Done done) {
  Key* k = find(r.job, r.key);
  if (!k || !k->ready) {
    done(Status(GSYNC_ERR_INVALID,
                fmt::format("job {} parameter key {} is not declared{} (gsync_ps_declare first)",
                            r.job, r.key, k ? " on every host yet" : "")));
    return;
  }
  if (r.count != k->count || r.dtype != k->dtype) {
    done(Status(GSYNC_ERR_MISMATCH,
                fmt::format("{} is declared as {} {}; this {} has {} {}", k->describe(), k->count,
                            proto::name(k->dtype), proto::name(r.opcode), r.count,
                            proto::name(r.dtype))));
    return;
  }
  auto op = std::make_unique<WorkerOp>();
  op->req = r;
  op->done = std::move(done);
  op->key = k;
  op->answered.assign(k->hosts.size(), false);
  op->got.assign(k->hosts.size(), Pieces{});
  for (size_t p = 0; p < k->hosts.size(); p++) op->got[p].reset(k->shard_bytes(int(p)));
  ops_[r.token] = op.get();
  if (k->current) {
    k->queue.push_back(std::move(op));
    return;
  }
  start(*k, std::move(op));
}

void Service::start(Key& k, std::unique_ptr<WorkerOp> owned) {
  WorkerOp& op = *owned;
  k.current = std::move(owned);
  op.started = true;
  if (!k.broken.is_ok()) {
    op.failed = k.broken;
    check_done(op);
    return;
  }
  const Request& r = op.req;
  const bool push = r.opcode != proto::Opcode::kPull;
  PsPush m;
  m.opcode = proto::wire(r.opcode);
  m.token = r.token;
  cluster::set_field(m.job, sizeof m.job, r.job);
  m.key = r.key;
  m.clock = r.clock;
  m.count = r.count;
  m.weight = r.weight;
  m.lr = r.lr;
  if (r.opcode != proto::Opcode::kPush) use_tensor(k, r);
  m.reply_region = r.opcode == proto::Opcode::kPush ? 0 : k.tensor_region;
  const int n = static_cast<int>(k.hosts.size());
  for (int p = 0; p < n; p++)
    if (k.shard_bytes(p) > 0) op.answers++;
    else op.answered[size_t(p)] = true;  // an empty shard: nothing to send or to wait for
  op.unasked = op.answers - (k.shard_bytes(k.self) > 0 ? 1 : 0);
  // This host's own shard first, in place. It may answer at once, and so
  // end the op (a refusal; or the only shard): op is gone then.
  const uint32_t token = r.token;
  if (k.shard_bytes(k.self) > 0) {
    Served& s = k.served[size_t(k.self)];
    if (push) {
      // A copy: a bsp clock may be applied after this op has ended (failed),
      // and the client's buffer may hold anything by then.
      std::memcpy(k.push_slot(k.self), r.data + k.shards[size_t(k.self)].begin * k.elem,
                  k.shard_bytes(k.self));
      s.data_started = true;
      s.data_token = r.token & 0x7fffffffu;
      s.data_clock = static_cast<uint32_t>(r.clock);
      s.pieces.reset(k.shard_bytes(k.self));
      s.pieces.land(0, k.shard_bytes(k.self));
      s.landed = k.shard_bytes(k.self);
    }
    s.message = true;
    s.msg = m;
    Status st = serve(k, k.self);
    if (!st || !ops_.count(token)) return;
  }
  op.unasked = 0;
  for (int p = 0; p < n; p++) {
    if (p == k.self || k.shard_bytes(p) == 0) continue;
    cp_->send(k.hosts[size_t(p)], cluster::as_bytes(m));
    if (!push) continue;
    const uint8_t* src = r.data + k.shards[size_t(p)].begin * k.elem;
    const uint64_t bytes = k.shard_bytes(p), slot = uint64_t(k.self) * bytes;
    for (uint64_t at = 0; at < bytes; at += kPsChunkBytes) {
      op.sends++;
      cp_->net().write(k.hosts[size_t(p)], src + at, std::min(kPsChunkBytes, bytes - at),
                       k.peer_push[size_t(p)], slot + at, imm_of(r.token, r.clock),
                       push_cookie(r.token));
    }
  }
}

void Service::check_done(WorkerOp& op) {
  if (op.ended || op.sends > 0) return;
  if (op.failed.is_ok() && op.answers > 0) return;
  finish(op, op.failed);
}

void Service::finish(WorkerOp& op, const Status& result) {
  Status st = result;  // result may be op.failed, which goes with op below
  op.ended = true;
  Key& k = *op.key;
  // A push of a clock the anomaly guard rolled back: done, and it says so
  // (this host's own server decided as every server did, before it
  // answered the clock).
  if (st.is_ok() && proto::is_push(op.req.opcode))
    if (auto rb = k.rolled_back.find(op.req.clock); rb != k.rolled_back.end())
      st = Status(GSYNC_OK, rb->second);
  std::unique_ptr<WorkerOp> owned = std::move(k.current);
  ops_.erase(op.req.token);
  if (!st.is_ok() && op.answers > op.unasked && k.broken.is_ok())
    // Answers still on their way would land where the next op's go. (A
    // refusal by this host's own shard asked no other host: none come.)
    k.broken = Status(st.code(), fmt::format("{}: an earlier {} (clock {}) ended before its "
                                             "answers came: {}",
                                             k.describe(), proto::name(op.req.opcode),
                                             op.req.clock, st.message()));
  Done done = std::move(op.done);
  owned.reset();
  std::string job = k.job;
  uint64_t key = k.key;
  done(st);
  // The next op of the key, if the key is still there.
  Key* still = find(job, key);
  if (still && !still->current && !still->queue.empty()) {
    auto next = std::move(still->queue.front());
    still->queue.pop_front();
    start(*still, std::move(next));
  }
}

// The servers write a pull's values straight into the op's tensor: it is
// registered once, and again only when a pull brings another tensor (the
// old registration goes in the background, its mapping kept until then).
void Service::use_tensor(Key& k, const Request& r) {
  if (!cp_ || r.data == k.tensor) return;
  release_tensor(k);
  k.tensor = r.data;
  k.tensor_owner = r.owner;
  k.tensor_region = cp_->net().register_region(r.data, k.count * k.elem).id;
  by_region_[k.tensor_region] = &k;
}

void Service::release_tensor(Key& k) {
  if (k.tensor_region == 0) return;
  by_region_.erase(k.tensor_region);
  cp_->net().deregister_region(k.tensor_region, [owner = std::move(k.tensor_owner)] {});
  k.tensor_region = 0;
  k.tensor = nullptr;
}

void Service::on_reply(Key& k, int p, uint64_t imm, uint64_t offset, uint64_t len) {
  auto it = ops_.find(imm_token(imm));
  if (it == ops_.end()) return;  // an op that ended
  WorkerOp& op = *it->second;
  const uint64_t begin = k.shards[size_t(p)].begin * k.elem, bytes = k.shard_bytes(p);
  if (op.key != &k || !op.started || op.ended || op.answered[size_t(p)] ||
      imm_clock(imm) != static_cast<uint32_t>(op.req.clock) ||
      op.req.opcode == proto::Opcode::kPush) {
    spdlog::error("{}: a reply from host {} that no op of this host waits for (token {}, clock "
                  "{}); ignored",
                  k.describe(), host_id(k.hosts[size_t(p)]), imm_token(imm), imm_clock(imm));
    return;
  }
  Pieces& got = op.got[size_t(p)];
  if (offset < begin || !got.land(offset - begin, len)) {
    spdlog::error("{}: host {} wrote {} bytes at {} of the reply; not a piece of its {} bytes "
                  "at {} that is still to come",
                  k.describe(), host_id(k.hosts[size_t(p)]), len, offset, bytes, begin);
    return;
  }
  if (!got.complete()) return;
  op.answered[size_t(p)] = true;
  op.answers--;
  check_done(op);
}

void Service::on_ack(int peer, const PsAck& m) {
  auto it = ops_.find(m.token & 0x7fffffffu);
  if (it == ops_.end()) return;
  WorkerOp& op = *it->second;
  Key& k = *op.key;
  int p = k.participant_of(peer);
  if (p < 0 || cluster::field(m.job, sizeof m.job) != k.job || m.key != k.key ||
      m.clock != op.req.clock || op.answered[size_t(p)] || op.ended)
    return;
  op.answered[size_t(p)] = true;
  op.answers--;
  if (m.code != 0 && op.failed.is_ok()) {
    const int code = proto::is_error_code(m.code) ? m.code : GSYNC_ERR_PROTOCOL;
    op.failed = Status(code, fmt::format("{} (reported by host {})",
                                         cluster::field(m.message, sizeof m.message),
                                         host_id(peer)));
  }
  check_done(op);
}

void Service::abort(uint32_t token, const Status& why) {
  auto it = ops_.find(token);
  if (it == ops_.end()) return;
  WorkerOp& op = *it->second;
  Key& k = *op.key;
  if (!op.started) {
    // Still queued: nothing of it is on the wire.
    auto q = std::find_if(k.queue.begin(), k.queue.end(),
                          [&](const auto& o) { return o.get() == &op; });
    std::unique_ptr<WorkerOp> owned = std::move(*q);
    k.queue.erase(q);
    ops_.erase(it);
    owned->done(why);
    return;
  }
  if (op.failed.is_ok()) op.failed = why;
  check_done(op);
}

std::string Service::waiting_for(uint32_t token) const {
  auto it = ops_.find(token);
  if (it == ops_.end()) return "";
  const WorkerOp& op = *it->second;
  const Key& k = *op.key;
  if (!op.started) return fmt::format("the op before it on {}", k.describe());
  std::string hosts;
  for (size_t p = 0; p < k.hosts.size(); p++)
    if (!op.answered[p]) hosts += (hosts.empty() ? "" : ", ") + host_id(k.hosts[p]);
  return fmt::format("the parameter servers on host{} {} ({} at clock {}{})",
                     hosts.find(',') == std::string::npos ? "" : "s", hosts,
                     proto::name(op.req.opcode), op.req.clock,
                     op.sends > 0 ? fmt::format(", {} pushes still sending", op.sends) : "");
}

void Service::on_write_done(int peer, uint64_t cookie, const Status& st) {
  if (is_reply(cookie)) {
    auto it = by_id_.find(cookie_key(cookie));
    if (it == by_id_.end()) return;
    Key& k = *it->second;
    k.replies_in_flight--;
    int w = cookie_worker(cookie);
    if (w >= 0 && size_t(w) < k.served.size()) k.served[size_t(w)].reply_writes--;
    if (!st)
      spdlog::warn("{}: the reply to host {} failed: {}", k.describe(), host_id(peer),
                   st.message());
    if (k.releasing > 0 || find(k.job, k.key) != &k) {
      maybe_free(k);
      return;
    }
    answer_ready(k);
    return;
  }
  auto it = ops_.find(cookie_token(cookie));
  if (it == ops_.end()) return;
  WorkerOp& op = *it->second;
  op.sends--;
  if (!st && op.failed.is_ok())
    op.failed = Status(GSYNC_ERR_HOST_LOST,
                       fmt::format("{}: pushing to host {} failed: {}", op.key->describe(),
                                   host_id(peer), st.message()));
  check_done(op);
}

}  // namespace gsync::ps
