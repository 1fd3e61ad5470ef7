// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/engine.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/collective/engine_op.h"
#include "daemon/collective/op_checks.h"
#include "protocol/compression.h"
#include "protocol/wire.h"

namespace gsync::collective {

using xop::kEarlyLife;

Engine::Engine(cluster::ControlPlane& cp) : cp_(cp), net_(cp.net()) {}

Engine::~Engine() = default;

cluster::ServiceClaim Engine::claim() {
  return {"the collective engine",
          std::vector<uint8_t>(std::begin(kEngineMessages), std::end(kEngineMessages)),
          uint64_t{1} << 63, 0};
}

// ---------------------------------------------------------------- resources

Status Engine::prepare(Plan& plan, uint8_t* data, std::shared_ptr<const void> data_owner) {
  uint64_t bytes = plan.shape.bytes();
  if (plan.eager) {
    plan.slot_bytes = bytes;
    plan.eager_scratch.resize(plan.slot_bytes * static_cast<size_t>(plan.slots));
    plan.prepared = true;
    return Status::ok();
  }
  if (bytes == 0) {
    plan.prepared = true;
    return Status::ok();
  }
  if (plan.packed && !plan.scratch.base) {
    if (Status st = prepare_packed(plan); !st) return st;
  } else if (plan.slots > 0 && !plan.scratch.base) {
    plan.slot_bytes = proto::align_up(bytes, 4096);
    plan.scratch = scratch_.take(plan.slot_bytes * static_cast<uint64_t>(plan.slots));
    if (!plan.scratch.base)
      return Status(GSYNC_ERR_NOMEM, fmt::format("no memory for {} bytes of scratch ({})",
                                                 plan.slot_bytes * plan.slots, plan.describe()));
    plan.scratch_region = net_.register_region(plan.scratch.base, plan.scratch.bytes).id;
  }
  if (plan.data_base != data) {
    // The tensor moved (another buffer for the same key): peers learn the
    // new region from the rendezvous; the old one goes in the background.
    if (plan.data_region) net_.deregister_region(plan.data_region, [owner = plan.data_owner] {});
    plan.data_region = net_.register_region(data, bytes).id;
    plan.data_base = data;
    plan.data_owner = std::move(data_owner);
  }
  plan.prepared = true;
  return Status::ok();
}

// A compressed plan's scratch (Plan::land_offset): the copy slot and the
// scratch slots, each with a landing area as large as the largest encoding
// of a chunk and the chunk's maxima area; and, apart and not registered,
// the send buffers and this host's maxima.
Status Engine::prepare_packed(Plan& plan) {
  size_t per_chunk = static_cast<size_t>(plan.chunk_elems);
  size_t blocks = (per_chunk + plan.codec.block - 1) / plan.codec.block;
  plan.land_stride = proto::align_up(
      std::max<uint64_t>(plan.chunk_bytes, reduce::max_encoded_bytes(plan.codec, per_chunk)), 64);
  plan.maxima_stride =
      plan.codec.codec == proto::Codec::kInt8 ? proto::align_up(blocks * sizeof(float), 64) : 0;
  plan.slot_bytes = plan.nchunks * plan.chunk_stride();
  uint64_t want = plan.slot_bytes * (static_cast<uint64_t>(plan.slots) + 1);
  plan.scratch = scratch_.take(want);
  plan.local = plan.scratch.base ? scratch_.take(plan.slot_bytes) : Scratch{};
  if (!plan.scratch.base || !plan.local.base) {
    scratch_.give(plan.scratch);
    plan.scratch = {};
    return Status(GSYNC_ERR_NOMEM, fmt::format("no memory for {} bytes of scratch ({})",
                                               want + plan.slot_bytes, plan.describe()));
  }
  plan.scratch_region = net_.register_region(plan.scratch.base, plan.scratch.bytes).id;
  return Status::ok();
}

void Engine::retire(Plan& plan, std::function<void()> released) {
  // Released when both regions are: no receive into them is in progress
  // and (verbs) every peer has acknowledged their retirement.
  auto left = std::make_shared<int>(1);
  auto done = [left, released = std::move(released)] {
    if (--*left == 0 && released) released();
  };
  if (plan.scratch_region) {
    ++*left;
    net_.deregister_region(plan.scratch_region, [this, s = plan.scratch, done] {
      scratch_.give(s);
      done();
    });
  } else {
    scratch_.give(plan.scratch);
  }
  if (plan.data_region) {
    ++*left;
    net_.deregister_region(plan.data_region, [owner = plan.data_owner, done] { done(); });
  }
  scratch_.give(plan.local);
  plan.local = {};
  plan.residuals = {};
  plan.residual_buffers = 0;
  plan.scratch = {};
  plan.scratch_region = plan.data_region = 0;
  plan.data_base = nullptr;
  plan.data_owner.reset();
  plan.eager_scratch = {};
  plan.prepared = false;
  done();
}

// ---------------------------------------------------------------- ops

Engine::XOp* Engine::find(std::string_view job, const proto::OpId& id) const {
  auto it = ops_.find(OpKeyView{job, id});
  return it == ops_.end() ? nullptr : it->second.get();
}

Engine::XOp* Engine::find(uint32_t token) const {
  auto it = by_token_.find(token);
  return it == by_token_.end() ? nullptr : it->second;
}

void Engine::begin(const EngineOp& op, EngineCallbacks cb) {
  auto x = std::make_shared<XOp>();
  x->job = op.job;
  x->id = op.id;
  x->token = op.token;
  x->plan = op.plan;
  x->sched = &op.plan->schedule(op.id.key, op.id.step);
  if (op.plan->packed) {
    op.plan->ensure_residuals(x->sched->residuals);
    // Without error feedback every step starts from empty error buffers:
    // what a codec drops is gone (the run that shows what feedback is for).
    if (!op.plan->shape.compress.error_feedback)
      std::fill(op.plan->residuals.begin(), op.plan->residuals.end(), 0.0f);
  }
  x->data = op.data;
  x->scratch = op.plan->eager ? op.plan->eager_scratch.data() : op.plan->scratch.base;
  x->weight_local = op.weight_local;
  x->cb = std::move(cb);
  x->started = Clock::now();
  x->wire = op.wire;
  x->hosts = op.hosts;
  if (x->hosts) x->hosts->set_self(x->started);
  const Plan& p = *op.plan;
  x->ready.resize(p.hosts.size());
  x->chunks.resize(p.nchunks);
  if (p.eager) {
    x->slot_weight.assign(static_cast<size_t>(p.slots), 0.0);
    x->weight_acc = x->weight_local;
  }
  // One op per (job, key, step) and per token: a second one is refused,
  // never put in the first one's place.
  if (find(x->job, x->id) || find(x->token) || x->token == 0) {
    Status st(GSYNC_ERR_INTERNAL,
              fmt::format("{}: began twice on this host (token {}); refused", x->describe(),
                          x->token));
    spdlog::error("{}", st.message());
    auto done = std::move(x->cb.done);
    done(st, 0);
    return;
  }
  by_token_[x->token] = x.get();
  ops_.emplace(OpKey{x->job, x->id}, x);
  if (!p.eager) send_ready(*x);
  replay_early(*x);
}

// What came before this host began the op.
void Engine::replay_early(XOp& x) {
  std::vector<cluster::EarlyMessages::Held> early = cp_.take_early(early_key(x.job, x.id));
  if (early.empty()) return;
  auto keep = x.hold();
  // An abort wins over any rendezvous, whichever came first.
  std::stable_partition(early.begin(), early.end(), [](const auto& h) {
    return static_cast<uint8_t>(h.bytes[0]) == kOpAbort;
  });
  for (auto& h : early) {
    if (x.finished) return;
    on_message(h.peer, h.bytes, h.at);
  }
}

cluster::EarlyMessages::Key Engine::early_key(std::string_view job,
                                               const proto::OpId& id) const {
  return {this, job, id.key, id.step};
}

// The op's shape and name, as OpReady and OpData carry them.
OpReady Engine::op_message(const XOp& x, uint8_t type, double weight) const {
  const Plan& p = *x.plan;
  OpReady m;
  m.type = type;
  m.algo = static_cast<uint8_t>(p.algo);
  m.opcode = proto::wire(p.shape.opcode);
  m.dtype = proto::wire(p.shape.dtype);
  m.redop = proto::wire(p.shape.redop);
  cluster::set_field(m.job, sizeof m.job, x.job);
  m.key = x.id.key;
  m.step = x.id.step;
  m.count = p.shape.count;
  m.chunk_bytes = p.chunk_bytes;
  m.weight_sum = weight;
  proto::to_entry(p.shape.compress, &m.compress, &m.compress_arg);
  return m;
}

// The rendezvous of an op that does not go eagerly: where peers may write.
void Engine::send_ready(XOp& x) {
  OpReady m = op_message(x, kOpReady, x.weight_local);
  m.token = x.token;
  m.data_region = x.plan->data_region;
  m.scratch_region = x.plan->scratch_region;
  m.slot_bytes = x.plan->slot_bytes;
  for (int h : x.plan->hosts) cp_.send(h, cluster::as_bytes(m));
}

void Engine::local_ready_upto(uint32_t token, uint64_t elems) {
  XOp* x = find(token);
  if (!x || x->local_ready) return;
  const Plan& p = *x->plan;
  elems = std::min<uint64_t>(elems, p.shape.count);
  if (elems < p.shape.count && elems <= x->local_elems) return;
  size_t before = p.chunk_elems ? x->local_elems / p.chunk_elems : 0;
  x->local_elems = elems;
  x->local_ready = elems == p.shape.count;
  start_local_chunks(*x, before);
}

void Engine::abort(uint32_t token, const Status& why) {
  if (XOp* x = find(token)) fail(*x, why, true);
}

void Engine::abort_unbegun(const std::string& job, const proto::OpId& id, const Status& why) {
  // Every host: the one whose rank left is no longer a member of the job
  // but still runs the ops it began. A host that never sees the op drops
  // the note when it expires (kEarlyLife).
  for (int h = 0; h < static_cast<int>(cp_.cluster().hosts.size()); h++)
    send_abort(job, id, why, h);
}

std::string Engine::waiting_for(uint32_t token) const {
  XOp* x = find(token);
  if (!x) return "";
  if (x->plan->eager) return eager_waiting_for(*x);
  std::string hosts;
  for (size_t j = 0; j < x->plan->hosts.size(); j++)
    if (static_cast<int>(j) != x->plan->self && !x->ready[j].seen)
      hosts += (hosts.empty() ? "" : ", ") + host_id(x->plan->hosts[j]);
  if (!hosts.empty()) return "hosts whose ranks have not all arrived: " + hosts;
  return fmt::format("{} of {} chunks done ({})", x->chunks_done, x->plan->nchunks,
                     algo_name(x->plan->algo));
}

std::chrono::milliseconds Engine::timeout_grace(uint32_t token) const {
  XOp* x = find(token);
  return x && x->plan->eager ? eager_timeout_grace(*x) : std::chrono::milliseconds(0);
}

std::vector<proto::OpId> Engine::open_ops(std::string_view job) const {
  std::vector<proto::OpId> open;
  for (auto it = ops_.lower_bound(OpKeyView{job, proto::OpId{}});
       it != ops_.end() && it->first.first == job; ++it)
    if (!it->second->finished) open.push_back(it->first.second);
  return open;
}

void Engine::complete(XOp& x, const Status& st) {
  if (x.finished) return;
  x.finished = true;
  x.wire = nullptr;  // the stage's: it may go once the op is reported
  x.hosts = nullptr;
  by_token_.erase(x.token);
  auto self = x.hold();
  // Only this op's entry: never one that took its key since.
  if (auto it = ops_.find(OpKeyView{x.job, x.id}); it != ops_.end() && it->second.get() == &x)
    ops_.erase(it);
  if (x.cb.done) {
    auto done = std::move(x.cb.done);
    done(st, x.weight_total);
  }
}

void Engine::fail(XOp& x, const Status& st, bool tell_peers) {
  if (x.finished) return;
  spdlog::warn("{}", st.message());
  if (tell_peers)
    for (int h : x.plan->hosts) send_abort(x.job, x.id, st, h);
  complete(x, st);
}

void Engine::send_abort(const std::string& job, const proto::OpId& id, const Status& st,
                        int host) {
  if (host == cp_.self() || !cp_.peer_up(host)) return;
  OpAbort m;
  m.code = st.code();
  cluster::set_field(m.job, sizeof m.job, job);
  m.key = id.key;
  m.step = id.step;
  cluster::set_field(m.message, sizeof m.message, st.message());
  cp_.send(host, cluster::as_bytes(m));
}

// ---------------------------------------------------------------- control

void Engine::on_message(int peer, std::string_view msg) {
  on_message(peer, msg, Clock::now());
}

void Engine::on_message(int peer, std::string_view msg, Clock::time_point at) {
  if (msg.empty()) return;
  uint8_t type = static_cast<uint8_t>(msg[0]);
  if (type == kOpAbort) {
    OpAbort m;
    if (cluster::decode(msg, &m)) return on_abort(peer, m, msg, at);
  } else {
    OpReady m;
    if (cluster::decode(msg, &m)) return on_ready(peer, m, msg, at);
  }
  spdlog::error("host {}: malformed control message (type {}, {} bytes); ignored", host_id(peer),
                static_cast<int>(type), msg.size());
}

void Engine::on_ready(int peer, const OpReady& m, std::string_view msg,
                      Clock::time_point at) {
  std::string_view job(m.job, strnlen(m.job, sizeof m.job));
  proto::OpId id{m.key, m.step};
  XOp* x = find(job, id);
  if (!x) {
    cp_.hold_early(early_key(job, id), peer, msg, at, Clock::now() + kEarlyLife);
    return;
  }
  if (m.type == kOpData) {
    on_eager_data(*x, peer, m, msg.substr(sizeof m), at);
    return;
  }
  int j = x->participant_of(peer);
  if (j < 0 || x->ready[size_t(j)].seen) return;
  std::string op = x->describe();
  OpParty who{op, host_id(peer), cp_.self_id()};
  Status st = check_same_shape(*x->plan, m, who);
  if (st) st = check_rendezvous(*x->plan, msg.size(), who);
  if (!st) {
    fail(*x, st, true);
    return;
  }
  x->ready[size_t(j)] = XOp::PeerReady{true, m};
  x->ready_count++;
  if (x->hosts) x->hosts->add(peer, at);
  maybe_run(*x);
}

void Engine::on_abort(int peer, const OpAbort& m, std::string_view msg, Clock::time_point at) {
  std::string job = cluster::field(m.job, sizeof m.job);
  proto::OpId id{m.key, m.step};
  if (XOp* x = find(job, id))
    fail(*x, abort_status(m, host_id(peer)), false);
  else
    cp_.hold_early(early_key(job, id), peer, msg, at, Clock::now() + kEarlyLife);
}

// After a rank of `peer` left: can this op still get that host's part?
// Ops the host has joined go on (its daemon still holds the rank's data and
// aborts explicitly if it cannot finish): those whose OpReady came, and
// those on its open list. In an eager op only the hosts that wait for a
// transfer from that host decide, and they abort the op for everyone: in a
// tree or a doubling not every host hears from every other (and a host that
// finished the op has already sent its transfers, on the same connection as
// the JobLeave).
bool Engine::joined(const XOp& x, int peer, const std::vector<proto::OpId>& open) const {
  int j = x.participant_of(peer);
  if (j < 0 || x.ready[size_t(j)].seen) return true;
  if (x.plan->eager && !eager_waits_on(x, j)) return true;
  return std::binary_search(open.begin(), open.end(), x.id);
}

void Engine::on_peer_left_job(std::string_view job, int peer, const std::vector<proto::OpId>& open,
                              const Status& why) {
  std::vector<std::shared_ptr<XOp>> affected;
  for (auto it = ops_.lower_bound(OpKeyView{job, proto::OpId{}});
       it != ops_.end() && it->first.first == job; ++it)
    if (!joined(*it->second, peer, open)) affected.push_back(it->second);
  for (auto& x : affected)
    fail(*x, Status(why.code(), fmt::format("{}: {}", x->describe(), why.message())),
         x->plan->eager);
}

void Engine::on_peer_lost(int peer, const Status& why) {
  std::vector<std::shared_ptr<XOp>> affected;
  for (auto& [key, x] : ops_)
    if (x->participant_of(peer) >= 0) affected.push_back(x);
  for (auto& x : affected)
    fail(*x, Status(why.code(), fmt::format("{}: {}", x->describe(), why.message())), true);
}

}  // namespace gsync::collective
