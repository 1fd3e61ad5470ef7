// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/cross_host.h"
#include "daemon/collective/cross_host_op.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/reduce/reduce.h"
#include "gsync_build_config.h"
#include "protocol/wire.h"

namespace gsync {

using xop::arrival_code;
using xop::imm_of;
using xop::kEarlyLife;

namespace {
constexpr size_t kMaxChunks = 1 << 24;
}  // namespace

CrossHost::CrossHost(const DaemonConfig& cfg, ClusterFile cluster, EventLoop& loop)
    : cfg_(cfg), cluster_(std::move(cluster)), loop_(loop), members_(cluster_.self) {
  size_t n = cluster_.hosts.size();
  sent_meter_.resize(n);
  recv_meter_.resize(n);
  last_sent_.assign(n, 0);
  last_recv_.assign(n, 0);
}

CrossHost::~CrossHost() {
  for (auto& s : free_scratch_) munmap(s.base, s.bytes);
}

Status CrossHost::start() {
  transport::ContextOptions o;
  o.identity.cluster_name = cluster_.name;
  o.identity.protocol_version = cluster::kProtocolVersion;
  o.identity.build_id = GSYNC_VERSION_STRING;
  for (const auto& h : cluster_.hosts) o.hosts.push_back({h.id, h.address, h.port, h.rack});
  o.self = cluster_.self;
  o.streams = static_cast<int>(cfg_.tcp_streams);
  o.cross_rack_streams = static_cast<int>(cfg_.tcp_streams_cross_rack);
  o.socket_buffer_bytes = static_cast<int>(cfg_.tcp_buffer_kib << 10);
  o.peer_timeout_ms = cfg_.peer_timeout_ms;
  o.heartbeat_ms = std::max<uint32_t>(cfg_.peer_timeout_ms / 10, 20);
  Status err;
  o.verbs.required = cfg_.transport == "verbs";
  net_ = transport::make_context(o, cfg_.transport != "tcp", &err);
  if (!net_) return err;
  transport::Handlers h;
  h.on_control = [this](int peer, std::string_view msg) { on_control(peer, msg); };
  h.on_write = [this](int peer, uint32_t region, uint64_t off, uint64_t len, uint64_t imm) {
    on_write(peer, region, off, len, imm);
  };
  h.on_write_done = [this](int peer, uint64_t cookie, const Status& st) {
    on_write_done(peer, cookie, st);
  };
  h.on_peer_up = [this](int peer) { on_peer_up(peer); };
  h.on_peer_down = [this](int peer, const Status& why) { on_peer_down(peer, why); };
  if (Status st = net_->start(std::move(h)); !st) return st;
  loop_.add(net_->event_fd(), EPOLLIN, [this](uint32_t) { net_->poll(); });
  if (cfg_.poll_us > 0) {
    // While the loop polls, a peer's message is seen on the completion
    // ring itself: no eventfd write in the sender's path, no epoll_wait
    // and eventfd read in ours.
    loop_.add_looker(
        [this] {
          if (!net_->pending()) return false;
          net_->poll();
          return true;
        },
        [this](bool on) {
          net_->set_polled(on);
          std::atomic_thread_fence(std::memory_order_seq_cst);
        });
  }
  loop_.every(std::chrono::milliseconds(1000), [this] {
    sample_rates();
    expire_early();
  });
  spdlog::info("cluster {}: this daemon is {} ({}:{}, rack {}), {} hosts, links over {}, {} tcp streams per peer in the rack, {} across racks",
               cluster_.name, self_id(), cluster_.hosts[size_t(cluster_.self)].address,
               cluster_.hosts[size_t(cluster_.self)].port, cluster_.hosts[size_t(cluster_.self)].rack,
               cluster_.hosts.size(), net_->self() >= 0 && cluster_.hosts.size() > 1
                                          ? net_->stats(cluster_.self == 0 ? 1 : 0).transport
                                          : std::string("tcp"),
               cfg_.tcp_streams,
               cfg_.tcp_streams_cross_rack ? cfg_.tcp_streams_cross_rack : cfg_.tcp_streams);
  return Status::ok();
}

void CrossHost::send_all(std::string_view msg) {
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++)
    if (h != cluster_.self && net_->peer_up(h)) net_->send_control(h, msg);
}

// ---------------------------------------------------------------- jobs

void CrossHost::local_job_complete(const Job& job) {
  std::vector<int> ranks;
  for (const auto& s : job.slots)
    if (s.session) ranks.push_back(s.session->rank);
  members_.set_local(job.id, job.world_size, ranks);
  send_all(cluster::encode_announce(job.id, job.world_size, ranks));
  if (job_ready(job) && on_job_ready) on_job_ready(job.id);
}

void CrossHost::local_rank_left(const Job& job, int rank, pid_t pid, const std::string& reason) {
  members_.clear_local(job.id);
  cluster::JobLeave m;
  m.rank = rank;
  m.pid = pid;
  cluster::set_field(m.job, sizeof m.job, job.id);
  cluster::set_field(m.reason, sizeof m.reason, reason);
  std::vector<cluster::OpKey> open;
  for (const auto& [key, x] : ops_)
    if (key.first == job.id && !x->finished) open.push_back({key.second.key, key.second.step});
  send_all(cluster::encode_leave(m, open));
}

bool CrossHost::job_ready(const Job& job) const { return members_.ready(job.id, job.world_size); }

std::string CrossHost::job_missing(const Job& job) const {
  std::vector<int> live, hosts;
  for (const auto& s : job.slots)
    if (s.session) live.push_back(s.session->rank);
  std::string missing = members_.missing(job.id, job.world_size, live, &hosts);
  std::string names = self_id();
  for (int h : hosts) names += ", " + cluster_.hosts[size_t(h)].id;
  return fmt::format("ranks not on any host yet: {}; hosts with ranks so far: {}",
                     missing.empty() ? "none" : missing, names);
}

// ---------------------------------------------------------------- ops

CrossHost::XOp* CrossHost::find(std::string_view job, const OpId& id) const {
  auto it = ops_.find(OpKeyView{job, id});
  return it == ops_.end() ? nullptr : it->second.get();
}

std::shared_ptr<CrossHost::XOp> CrossHost::hold(XOp& x) const { return x.shared_from_this(); }

CrossHost::Scratch CrossHost::take_scratch(uint64_t bytes) {
  // Prepare once, run many: the same mappings serve op after op.
  for (size_t i = 0; i < free_scratch_.size(); i++) {
    if (free_scratch_[i].bytes >= bytes) {
      Scratch s = free_scratch_[i];
      free_scratch_.erase(free_scratch_.begin() + static_cast<long>(i));
      return s;
    }
  }
  Scratch s;
  s.bytes = proto::align_up(std::max<uint64_t>(bytes, 1), 2 << 20);
  void* p = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return {};
  madvise(p, s.bytes, MADV_HUGEPAGE);
  s.base = static_cast<uint8_t*>(p);
  return s;
}

void CrossHost::give_scratch(Scratch s) {
  if (!s.base) return;
  constexpr size_t kKeep = 8;
  if (free_scratch_.size() < kKeep) {
    free_scratch_.push_back(s);
  } else {
    munmap(s.base, s.bytes);
  }
}

void CrossHost::begin(const Job& job, Op& op, double weight_sum, Done done) {
  auto x = std::make_shared<XOp>();
  x->job = job.id;
  x->id = op.id;
  x->token = next_token_++;
  if (x->token == 0) x->token = next_token_++;
  x->hosts = members_.participants(job.id);
  x->self = x->participant_of(cluster_.self);
  x->opcode = op.opcode;
  x->dtype = op.dtype;
  x->redop = op.redop;
  x->root = op.root;
  x->count = op.opcode == proto::kOpBarrier ? 0 : op.count;
  x->elem = std::max<size_t>(proto::dtype_size(op.dtype), 1);
  x->bytes = x->count * x->elem;
  x->weight_local = weight_sum;
  x->done = std::move(done);
  x->started = Clock::now();
  x->ready.resize(x->hosts.size());

  std::vector<collective::Participant> parts;
  for (int h : x->hosts) parts.push_back({h, cluster_.hosts[size_t(h)].rack});
  Algo algo = Algo::kRing;
  if (cfg_.algorithm == "auto" || !collective::parse_algo(cfg_.algorithm, &algo))
    algo = collective::choose_algo(parts, x->bytes);
  uint64_t cb = cfg_.chunk_bytes ? cfg_.chunk_bytes
                                 : collective::choose_chunk_bytes(algo, parts.size(), x->bytes);
  x->chunk_elems = std::max<uint64_t>(cb / x->elem, 1);
  x->chunk_bytes = x->chunk_elems * x->elem;
  x->nchunks = x->count ? static_cast<size_t>((x->count + x->chunk_elems - 1) / x->chunk_elems) : 0;
  if (x->nchunks > kMaxChunks) {
    x->chunk_elems = (x->count + kMaxChunks - 1) / kMaxChunks;
    x->chunk_bytes = x->chunk_elems * x->elem;
    x->nchunks = static_cast<size_t>((x->count + x->chunk_elems - 1) / x->chunk_elems);
  }
  if (op.opcode == proto::kOpBroadcast) {
    // The root's host sends its tensor to every other host: one phase.
    int root_host = members_.host_of(job.id, op.root);
    int rp = x->participant_of(root_host);
    x->sched.algo = Algo::kDirect;
    x->sched.self = x->self;
    x->sched.chunks.resize(x->nchunks);
    for (auto& c : x->sched.chunks) {
      Phase p;
      if (x->self == rp) {
        for (int j = 0; j < static_cast<int>(x->hosts.size()); j++)
          if (j != rp) p.sends.push_back({j, Xfer::kCopy, 0});
      } else {
        p.recvs.push_back({rp, Xfer::kCopy, 0});
      }
      c = {p};
    }
  } else {
    int root = collective::tree_root(static_cast<int>(parts.size()), op.id.key, op.id.step);
    x->sched = collective::build_schedule(algo, parts, x->self, x->nchunks, root);
  }
  last_algo_ = collective::algo_name(x->sched.algo);
  x->data = static_cast<uint8_t*>(op.host_data);
  x->chunks.resize(x->nchunks);
  // hier: a chunk's intra-rack stages run at the speed of the rack's links,
  // its inter-rack stage at the uplink's. Unchecked, the fast stages run
  // ahead over the whole tensor and take the cores from the uplink's
  // traffic at the start of every op; one chunk per phase plus one keeps
  // every stage busy (docs/algorithms.md, "Window").
  x->window = x->sched.algo == Algo::kHier && !x->sched.chunks.empty()
                  ? x->sched.chunks[0].size() + 1
                  : x->nchunks;
  x->eager = (x->sched.algo == Algo::kDirect || x->sched.algo == Algo::kTree ||
              x->sched.algo == Algo::kDoubling) &&
             op.opcode == proto::kOpAllreduce && x->nchunks == 1 &&
             x->bytes + sizeof(cluster::OpReady) <= transport::kMaxControl;
  if (x->eager) {
    x->slot_bytes = x->bytes;
    x->eager_scratch.resize(x->slot_bytes * static_cast<size_t>(x->sched.slots));
    x->scratch.base = x->eager_scratch.data();
    x->slot_weight.assign(static_cast<size_t>(x->sched.slots), 0.0);
    x->weight_acc = x->weight_local;
  } else if (x->bytes) {
    x->data_region = net_->register_region(x->data, x->bytes).id;
    if (x->sched.slots > 0) {
      x->slot_bytes = proto::align_up(x->bytes, 4096);
      x->scratch = take_scratch(x->slot_bytes * static_cast<uint64_t>(x->sched.slots));
      if (!x->scratch.base) {
        Status st(GSYNC_ERR_NOMEM, fmt::format("{}: no memory for {} bytes of scratch",
                                               x->describe(), x->slot_bytes * x->sched.slots));
        auto d = std::move(x->done);
        net_->deregister_region(x->data_region, [] {});
        d(st, 0);
        return;
      }
      x->scratch_region = net_->register_region(x->scratch.base, x->scratch.bytes).id;
    }
  }
  by_token_[x->token] = x.get();
  ops_.insert_or_assign(OpKey{x->job, x->id}, x);
  if (!x->eager) send_ready(*x);

  // What came before this host was ready.
  auto early = early_.find(OpKeyView{x->job, x->id});
  if (early != early_.end()) {
    Early e = std::move(early->second);
    early_.erase(early);
    if (e.abort) {
      fail(*x, *e.abort, false);
      return;
    }
    for (auto& [host, msg] : e.ready) on_control(host, msg);
  }
}

// The op's shape and name, as OpReady and OpData carry them.
cluster::OpReady CrossHost::op_message(const XOp& x, uint8_t type, double weight) const {
  cluster::OpReady m;
  m.type = type;
  m.algo = static_cast<uint8_t>(x.sched.algo);
  m.opcode = x.opcode;
  m.dtype = x.dtype;
  m.redop = x.redop;
  cluster::set_field(m.job, sizeof m.job, x.job);
  m.key = x.id.key;
  m.step = x.id.step;
  m.count = x.count;
  m.chunk_bytes = x.chunk_bytes;
  m.weight_sum = weight;
  return m;
}

// The rendezvous of an op that does not go eagerly: where peers may write.
void CrossHost::send_ready(XOp& x) {
  cluster::OpReady m = op_message(x, cluster::kOpReady, x.weight_local);
  m.token = x.token;
  m.data_region = x.data_region;
  m.scratch_region = x.scratch_region;
  m.slot_bytes = x.slot_bytes;
  for (int h : x.hosts)
    if (h != cluster_.self) net_->send_control(h, cluster::as_bytes(m));
}

void CrossHost::local_ready(const std::string& job, const OpId& id) {
  XOp* x = find(job, id);
  if (!x) return;
  size_t before = x->local_elems / x->chunk_elems;
  x->local_ready = true;
  x->local_elems = x->count;
  start_local_chunks(*x, before);
}

void CrossHost::on_chunk_done(const std::string& job, const OpId& id, ChunkDone f) {
  if (XOp* x = find(job, id)) x->chunk_done = std::move(f);
}

size_t CrossHost::pipeline_elems(const std::string& job, const OpId& id) const {
  XOp* x = find(job, id);
  return x && !x->eager && x->nchunks > 1 ? x->chunk_elems : 0;
}

void CrossHost::local_ready_upto(const std::string& job, const OpId& id, uint64_t elems) {
  XOp* x = find(job, id);
  if (!x || x->eager || x->local_ready || elems <= x->local_elems) return;
  size_t before = x->local_elems / x->chunk_elems;
  x->local_elems = std::min<uint64_t>(elems, x->count);
  start_local_chunks(*x, before);
}

// More of the local fold is in: start the op, or the chunks from `from` on
// that the fold has now finished.
void CrossHost::start_local_chunks(XOp& x, size_t from) {
  if (!x.running) {
    maybe_run(x);
    return;
  }
  auto keep = hold(x);
  for (size_t c = from; c < x.nchunks && !x.finished && chunk_local_ready(x, c); c++) progress(x, c);
}

// Chunk c of data holds this host's contribution (the local fold wrote it).
bool CrossHost::chunk_local_ready(const XOp& x, size_t c) const {
  return std::min<uint64_t>(x.count, (c + 1) * x.chunk_elems) <= x.local_elems;
}

// Runs the op's schedule once the local fold has begun to come in (all of
// it for a small op) and, unless the op goes eagerly, every peer's
// rendezvous came. Each chunk starts when the fold has finished it.
void CrossHost::maybe_run(XOp& x) {
  if (x.running || x.finished) return;
  if (!x.local_ready && (x.eager || x.nchunks == 0 || x.local_elems == 0)) return;
  if (!x.eager && x.ready_count + 1 < static_cast<int>(x.hosts.size())) return;
  x.running = true;
  if (!x.eager) {
    x.weight_total = x.weight_local;
    for (const auto& r : x.ready)
      if (r.seen) x.weight_total += r.msg.weight_sum;
  }
  if (x.nchunks == 0) {
    complete(x, Status::ok());
    return;
  }
  auto keep = hold(x);  // progress may finish and erase it
  for (size_t c = 0; c < x.nchunks && !x.finished; c++) progress(x, c);
}

void CrossHost::issue_sends(XOp& x, size_t c) {
  const Phase& p = x.sched.chunks[c][x.chunks[c].phase];
  uint64_t off = c * x.chunk_bytes;
  uint64_t len = std::min(x.chunk_bytes, x.bytes - off);
  x.chunks[c].pending_sends = static_cast<int>(p.sends.size());
  for (const auto& t : p.sends) {
    const cluster::OpReady& r = x.ready[size_t(t.peer)].msg;
    uint32_t region = t.kind == Xfer::kReduce ? r.scratch_region : r.data_region;
    uint64_t roff = t.kind == Xfer::kReduce ? t.slot * r.slot_bytes + off : off;
    net_->write(x.hosts[size_t(t.peer)], x.data + off, len, region, roff,
                imm_of(r.token, c, t.kind, t.slot), (uint64_t{x.token} << 32) | c);
  }
}

void CrossHost::fold(XOp& x, size_t c, const Phase& p) {
  uint64_t off = c * x.chunk_bytes;
  uint64_t elems = std::min(x.chunk_elems, x.count - c * x.chunk_elems);
  std::vector<const void*> in;
  for (int j : p.fold) {
    if (j == x.self) {
      in.push_back(x.data + off);
      continue;
    }
    for (const auto& r : p.recvs)
      if (r.peer == j && r.kind == Xfer::kReduce)
        in.push_back(x.scratch.base + r.slot * x.slot_bytes + off);
  }
  void* out[] = {x.data + off};
  reduce::ReduceArgs a;
  a.inputs = in.data();
  a.n_inputs = in.size();
  a.outputs = out;
  a.n_outputs = 1;
  a.count = elems;
  a.dtype = static_cast<reduce::DType>(x.dtype);
  // Hosts add their contributions; averages are taken once, at the store.
  a.op = x.redop == 3 ? reduce::Op::kMin : x.redop == 4 ? reduce::Op::kMax : reduce::Op::kSum;
  reduce::reduce(a);
}

size_t CrossHost::window_end(const XOp& x) const {
  return std::min(x.nchunks, x.done_prefix + x.window);
}

void CrossHost::progress(XOp& x, size_t c) {
  Chunk& ch = x.chunks[c];
  // Writes may land for a chunk before this host's fold reached it (they go
  // to scratch); its phases wait for the fold, and for the window.
  // A finished chunk is counted once.
  if (ch.done || !chunk_local_ready(x, c)) return;
  if (ch.phase == 0 && !ch.sent && c >= window_end(x)) return;
  const auto& phases = x.sched.chunks[c];
  while (ch.phase < phases.size()) {
    const Phase& p = phases[ch.phase];
    if (!ch.sent) {
      ch.sent = true;
      if (x.eager) {
        send_eager(x, p);
      } else {
        issue_sends(x, c);
      }
    }
    if (ch.pending_sends > 0) return;
    for (const auto& r : p.recvs)
      if (std::find(ch.arrived.begin(), ch.arrived.end(), arrival_code(r.peer, r.kind, r.slot)) ==
          ch.arrived.end())
        return;
    bool reduces = false;
    for (const auto& r : p.recvs) {
      ch.arrived.erase(std::find(ch.arrived.begin(), ch.arrived.end(),
                                 arrival_code(r.peer, r.kind, r.slot)));
      reduces |= r.kind == Xfer::kReduce;
    }
    if (reduces) fold(x, c, p);
    if (x.eager)
      for (const auto& r : p.recvs)
        if (r.kind == Xfer::kReduce) x.weight_acc += x.slot_weight[r.slot];
    ch.phase++;
    ch.sent = false;
  }
  if (x.eager) x.weight_total = x.weight_acc;
  ch.done = true;
  if (x.chunk_done)
    x.chunk_done(c * x.chunk_elems, std::min<uint64_t>(x.count, (c + 1) * x.chunk_elems),
                 x.weight_total);
  size_t admitted = window_end(x);
  while (x.done_prefix < x.nchunks && x.chunks[x.done_prefix].done) x.done_prefix++;
  if (++x.chunks_done == x.nchunks) {
    complete(x, Status::ok());
    return;
  }
  // The window moved: start the chunks it now takes in.
  for (size_t n = admitted; n < window_end(x) && !x.finished; n++) progress(x, n);
}

void CrossHost::on_write(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm) {
  (void)region;
  auto it = by_token_.find(static_cast<uint32_t>(imm >> 32));
  if (it == by_token_.end()) return;  // an op that already ended here
  XOp& x = *it->second;
  size_t c = (imm >> 8) & 0xffffff;
  int j = x.participant_of(peer);
  uint64_t expect = c < x.nchunks ? std::min(x.chunk_bytes, x.bytes - c * x.chunk_bytes) : 0;
  bool copy = (imm >> 7) & 1;
  uint8_t slot = static_cast<uint8_t>(imm & 0x7f);
  uint64_t expect_off = (copy ? 0 : slot * x.slot_bytes) + c * x.chunk_bytes;
  if (j < 0 || c >= x.nchunks || len != expect || offset != expect_off) {
    spdlog::error("{}: unexpected write from host {}: chunk {}, {} bytes at {} (expected {} bytes)",
                  x.describe(), cluster_.hosts[size_t(peer)].id, c, len, offset, expect);
    return;
  }
  x.chunks[c].arrived.push_back(arrival_code(j, copy ? Xfer::kCopy : Xfer::kReduce, slot));
  if (x.running) {
    auto keep = hold(x);
    progress(x, c);
  }
}

void CrossHost::on_write_done(int peer, uint64_t cookie, const Status& st) {
  auto it = by_token_.find(static_cast<uint32_t>(cookie >> 32));
  if (it == by_token_.end()) return;
  XOp& x = *it->second;
  auto keep = hold(x);
  if (!st) {
    fail(x, Status(GSYNC_ERR_HOST_LOST, fmt::format("{}: sending to host {} failed: {}", x.describe(),
                                                    cluster_.hosts[size_t(peer)].id, st.message())),
         true);
    return;
  }
  size_t c = cookie & 0xffffffff;
  if (c >= x.nchunks) return;
  if (--x.chunks[c].pending_sends == 0) progress(x, c);
}

void CrossHost::complete(XOp& x, const Status& st) {
  if (x.finished) return;
  x.finished = true;
  by_token_.erase(x.token);
  auto self = hold(x);
  // Only this op's entry: never one that took its key since.
  if (auto it = ops_.find(OpKeyView{x.job, x.id}); it != ops_.end() && it->second.get() == &x)
    ops_.erase(it);
  Scratch scratch = x.eager ? Scratch{} : x.scratch;
  auto finish = [this, self, st] {
    if (self->done) {
      auto d = std::move(self->done);
      d(st, self->weight_total);
    }
  };
  if (x.scratch_region)
    net_->deregister_region(x.scratch_region, [this, scratch] { give_scratch(scratch); });
  else
    give_scratch(scratch);
  // The data region is the client's tensor: report the op only once no
  // receive can still land in it.
  if (x.data_region)
    net_->deregister_region(x.data_region, finish);
  else
    finish();
}

void CrossHost::fail(XOp& x, const Status& st, bool tell_peers) {
  if (x.finished) return;
  spdlog::warn("{}", st.message());
  if (tell_peers)
    for (int h : x.hosts) send_abort(x.job, x.id, st, h);
  complete(x, st);
}

void CrossHost::send_abort(const std::string& job, const OpId& id, const Status& st, int host) {
  if (host == cluster_.self || !net_->peer_up(host)) return;
  cluster::OpAbort m;
  m.code = st.code();
  cluster::set_field(m.job, sizeof m.job, job);
  m.key = id.key;
  m.step = id.step;
  cluster::set_field(m.message, sizeof m.message, st.message());
  net_->send_control(host, cluster::as_bytes(m));
}

void CrossHost::abort(const std::string& job, const OpId& id, const Status& why) {
  if (XOp* x = find(job, id)) fail(*x, why, true);
}

void CrossHost::abort_unbegun(const std::string& job, const OpId& id, const Status& why) {
  // Every host: the one whose rank left is no longer a member of the job
  // but still runs the ops it began. A host that never sees the op drops
  // the note when it expires (kEarlyLife).
  for (int h = 0; h < static_cast<int>(cluster_.hosts.size()); h++) send_abort(job, id, why, h);
}

std::string CrossHost::waiting_for(const std::string& job, const OpId& id) const {
  XOp* x = find(job, id);
  if (!x) return "";
  if (x->eager) return eager_waiting_for(*x);
  std::string hosts;
  for (size_t j = 0; j < x->hosts.size(); j++)
    if (static_cast<int>(j) != x->self && !x->ready[j].seen)
      hosts += (hosts.empty() ? "" : ", ") + cluster_.hosts[size_t(x->hosts[j])].id;
  if (!hosts.empty()) return "hosts whose ranks have not all arrived: " + hosts;
  return fmt::format("{} of {} chunks done ({})", x->chunks_done, x->nchunks,
                     collective::algo_name(x->sched.algo));
}

std::chrono::milliseconds CrossHost::timeout_grace(const std::string& job, const OpId& id) const {
  XOp* x = find(job, id);
  return x && x->eager ? eager_timeout_grace(*x) : std::chrono::milliseconds(0);
}

// ---------------------------------------------------------------- control

// Hosts must agree on an op's shape before any data moves.
Status CrossHost::shape_mismatch(const XOp& x, const cluster::OpReady& m,
                                 const std::string& from) const {
  if (m.opcode == x.opcode && m.count == x.count && m.dtype == x.dtype && m.redop == x.redop &&
      m.algo == static_cast<uint8_t>(x.sched.algo) && m.chunk_bytes == x.chunk_bytes)
    return Status::ok();
  return Status(GSYNC_ERR_MISMATCH,
                fmt::format("{}: hosts disagree: host {} has {} of {} {} (op {}, {} in {}-byte "
                            "chunks), host {} has {} of {} {} (op {}, {} in {}-byte chunks)",
                            x.describe(), from, opcode_name(m.opcode), m.count, dtype_name(m.dtype),
                            redop_name(m.redop), collective::algo_name(static_cast<Algo>(m.algo)),
                            m.chunk_bytes, self_id(), opcode_name(x.opcode), x.count,
                            dtype_name(x.dtype), redop_name(x.redop),
                            collective::algo_name(x.sched.algo), x.chunk_bytes));
}

void CrossHost::on_control(int peer, std::string_view msg) {
  if (msg.empty()) return;
  const std::string& from = cluster_.hosts[size_t(peer)].id;
  switch (static_cast<uint8_t>(msg[0])) {
    case cluster::kJobAnnounce: {
      cluster::JobAnnounce a;
      std::vector<int> ranks;
      if (!cluster::decode_announce(msg, &a, &ranks)) break;
      std::string job = cluster::field(a.job, sizeof a.job);
      spdlog::info("job {}: host {} has {} ranks of {}", job, from, ranks.size(), a.world_size);
      members_.set_remote(job, peer, a.world_size, std::move(ranks));
      if (members_.has_local(job) && on_job_ready) on_job_ready(job);
      return;
    }
    case cluster::kJobLeave: {
      cluster::JobLeave m;
      std::vector<cluster::OpKey> open;
      if (!cluster::decode_leave(msg, &m, &open)) break;
      std::string job = cluster::field(m.job, sizeof m.job);
      members_.clear_remote(job, peer);
      Status st(GSYNC_ERR_RANK_DEAD, fmt::format("job {}: rank {} (pid {}) on host {} {}", job,
                                                 m.rank, m.pid, from,
                                                 cluster::field(m.reason, sizeof m.reason)));
      std::sort(open.begin(), open.end());
      for (auto& [key, x] : std::map(ops_))
        if (key.first == job && !joined(*x, peer, open))
          fail(*x, Status(st.code(), fmt::format("{}: {}", x->describe(), st.message())), x->eager);
      if (on_job_broken) on_job_broken(job, st);
      return;
    }
    case cluster::kOpReady:
    case cluster::kOpData: {
      cluster::OpReady m;
      if (!cluster::decode(msg, &m)) break;
      std::string_view job(m.job, strnlen(m.job, sizeof m.job));
      OpId id{m.key, m.step};
      XOp* x = find(job, id);
      if (!x) {
        auto& e = early_[OpKey{std::string(job), id}];
        e.ready[peer] = std::string(msg);
        e.expires = Clock::now() + kEarlyLife;
        return;
      }
      if (m.type == cluster::kOpData) {
        on_eager_data(*x, peer, m, msg.substr(sizeof m));
        return;
      }
      int j = x->participant_of(peer);
      if (j < 0 || x->ready[size_t(j)].seen) return;
      if (Status st = shape_mismatch(*x, m, from); !st) {
        fail(*x, st, true);
        return;
      }
      if (x->eager || msg.size() != sizeof m) {
        fail(*x, Status(GSYNC_ERR_PROTOCOL,
                        fmt::format("{}: host {} sent a {}-byte rendezvous; this op goes {}",
                                    x->describe(), from, msg.size(),
                                    x->eager ? "eagerly (no rendezvous)" : "by rendezvous")),
             true);
        return;
      }
      x->ready[size_t(j)] = PeerReady{true, m};
      x->ready_count++;
      maybe_run(*x);
      return;
    }
    case cluster::kOpAbort: {
      cluster::OpAbort m;
      if (!cluster::decode(msg, &m)) break;
      std::string job = cluster::field(m.job, sizeof m.job);
      OpId id{m.key, m.step};
      Status st(m.code, fmt::format("{} (reported by host {})",
                                    cluster::field(m.message, sizeof m.message), from));
      if (XOp* x = find(job, id)) {
        fail(*x, st, false);
      } else {
        auto& e = early_[{job, id}];
        e.abort = std::make_unique<Status>(st);
        e.expires = Clock::now() + kEarlyLife;
      }
      return;
    }
    default:
      break;
  }
  spdlog::error("host {}: malformed control message (type {}, {} bytes); ignored", from,
                static_cast<int>(static_cast<uint8_t>(msg[0])), msg.size());
}

// After a rank of `peer` left: can this op still get that host's part?
// Ops the host has joined go on (its daemon still holds the rank's data and
// aborts explicitly if it cannot finish): those whose OpReady came, and
// those on its open list. In an eager op only the hosts that wait for a
// transfer from that host decide, and they abort the op for everyone: in a
// tree or a doubling not every host hears from every other (and a host that
// finished the op has already sent its transfers, on the same connection as
// the JobLeave).
bool CrossHost::joined(const XOp& x, int peer, const std::vector<cluster::OpKey>& open) const {
  int j = x.participant_of(peer);
  if (j < 0 || x.ready[size_t(j)].seen) return true;
  if (x.eager && !eager_waits_on(x, j)) return true;
  return std::binary_search(open.begin(), open.end(), cluster::OpKey{x.id.key, x.id.step});
}

void CrossHost::on_peer_up(int peer) {
  epoch_++;
  const auto& h = cluster_.hosts[size_t(peer)];
  spdlog::info("peer {} ({}:{}, rack {}) is up; cluster epoch {}", h.id, h.address, h.port, h.rack,
               epoch_);
  for (const auto& [job, wr] : members_.local())
    net_->send_control(peer, cluster::encode_announce(job, wr.first, wr.second));
}

void CrossHost::on_peer_down(int peer, const Status& why) {
  epoch_++;
  const auto& h = cluster_.hosts[size_t(peer)];
  std::string what = fmt::format("lost host {} ({}:{}, rack {}): {}; cluster epoch {}", h.id,
                                 h.address, h.port, h.rack, why.message(), epoch_);
  spdlog::warn("{}", what);
  for (auto& [key, x] : std::map(ops_)) {
    if (x->participant_of(peer) >= 0)
      fail(*x, Status(GSYNC_ERR_HOST_LOST, fmt::format("{}: {}", x->describe(), what)), true);
  }
  for (const auto& job : members_.remove_host(peer))
    if (on_job_broken)
      on_job_broken(job, Status(GSYNC_ERR_HOST_LOST, fmt::format("job {}: {}", job, what)));
}

void CrossHost::expire_early() {
  auto now = Clock::now();
  for (auto it = early_.begin(); it != early_.end();)
    it = it->second.expires < now ? early_.erase(it) : std::next(it);
}

}  // namespace gsync
