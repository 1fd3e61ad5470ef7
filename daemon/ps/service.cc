// SPDX-License-Identifier: Apache-2.0
//
// Declarations, the regions every host tells the others, and what peers
// coming and going do to the keys.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/ps/service_key.h"

namespace gsync::ps {

namespace {
const std::string kLocal = "local";
}

Service::Service(cluster::ControlPlane* cp, CheckpointConfig ckpt,
                 storage::CheckpointWriter* writer)
    : cp_(cp), ckpt_cfg_(std::move(ckpt)), writer_(writer) {}

Service::~Service() = default;

cluster::ServiceClaim Service::claim() {
  return {"the parameter server", std::vector<uint8_t>(std::begin(kPsMessages), std::end(kPsMessages)),
          kPsWriteBit, kPsWriteBit};
}

int Service::self() const { return cp_ ? cp_->self() : 0; }

const std::string& Service::host_id(int host) const { return cp_ ? cp_->host_id(host) : kLocal; }

Service::Key* Service::find(std::string_view job, uint64_t key) const {
  auto it = keys_.find({std::string(job), key});
  return it == keys_.end() ? nullptr : it->second.get();
}

Status Service::make_key(const Declaration& d, std::unique_ptr<Key>* out) {
  auto k = std::make_unique<Key>();
  k->id = next_key_id_++;
  k->job = d.job;
  k->key = d.key;
  k->count = d.count;
  k->dtype = d.dtype;
  k->elem = proto::dtype_size(d.dtype);
  k->opts = d.opts;
  k->sync = d.sync;
  k->hosts = d.hosts;
  k->self = k->participant_of(self());
  if (k->self < 0)
    return Status(GSYNC_ERR_INTERNAL, fmt::format("{}: this host is not among its hosts", k->describe()));
  size_t n = k->hosts.size();
  k->shards = place(d.count, n);
  const Shard& mine = k->shards[size_t(k->self)];
  k->server = std::make_unique<ParamServer>(d.opts, d.sync, d.dtype, mine, static_cast<int>(n),
                                            d.init + mine.begin * k->elem);
  k->served.resize(n);
  k->push_area = Mapping(k->shard_bytes(k->self) * n);
  k->staging = Mapping(k->shard_bytes(k->self) * n);
  if (!k->push_area || !k->staging)
    return Status(GSYNC_ERR_NOMEM, fmt::format("{}: no memory for its {} bytes of regions",
                                               k->describe(), 2 * n * k->shard_bytes(k->self)));
  if (k->bsp()) k->server->read(k->staging_slot(k->self));
  if (cp_) {
    k->push_region = cp_->net().register_region(k->push_area.data(), k->push_area.bytes()).id;
    by_region_[k->push_region] = k.get();
  }
  k->peer_push.assign(n, 0);
  k->known.assign(n, false);
  k->known[size_t(k->self)] = true;
  setup_checkpoints(*k);
  k->guard = d.guard;
  k->server->set_guard(d.guard.on);
  by_id_[k->id] = k.get();
  *out = std::move(k);
  return Status::ok();
}

void Service::declare(const Declaration& d, Done done) {
  std::string what = fmt::format("job {} parameter key {}", d.job, d.key);
  if (d.guard.on && d.sync.mode != proto::SyncMode::kBsp) {
    // Every host refuses alike: the job's mode and guard are the same there.
    done(Status(GSYNC_ERR_UNSUPPORTED,
                fmt::format("{}: the anomaly guard judges bsp clocks only, and the job is {}: "
                            "asp and ssp apply each push at once, with no clock of every worker "
                            "to judge or roll back (declare the key in a bsp job, or turn the "
                            "guard off)",
                            what, proto::describe(d.sync))));
    return;
  }
  if (Key* old = find(d.job, d.key)) {
    bool same = old->count == d.count && old->dtype == d.dtype && old->opts == d.opts;
    done(Status(same ? GSYNC_ERR_INVALID : GSYNC_ERR_MISMATCH,
                same ? fmt::format("{} is already declared", what)
                     : fmt::format("{} is declared as {} {} with {}; declared again as {} {} with {}",
                                   what, old->count, proto::name(old->dtype),
                                   proto::describe(old->opts), d.count, proto::name(d.dtype),
                                   proto::describe(d.opts))));
    return;
  }
  std::unique_ptr<Key> k;
  if (Status st = make_key(d, &k); !st) {
    done(st);
    return;
  }
  Key& key = *k;
  key.declared = std::move(done);
  keys_[{d.job, d.key}] = std::move(k);
  PsRegions m;
  m.dtype = proto::wire(d.dtype);
  m.sync = proto::to_wire(d.sync);
  cluster::set_field(m.job, sizeof m.job, d.job);
  m.key = d.key;
  m.count = d.count;
  m.options = proto::to_header(d.opts);
  m.push_region = key.push_region;
  m.hosts = static_cast<uint32_t>(key.hosts.size());
  m.n_clocks = static_cast<uint32_t>(std::min<size_t>(key.ckpt.valid.size(), kMaxResumeClocks));
  for (uint32_t i = 0; i < m.n_clocks; i++) m.clocks[i] = key.ckpt.valid[i];
  for (int h : key.hosts)
    if (h != self()) cp_->send(h, cluster::as_bytes(m));
  // What came before this host declared it.
  if (cp_)
    for (auto& h : cp_->take_early({this, d.job, d.key, 0})) on_message(h.peer, h.bytes);
  if (Key* again = find(d.job, d.key)) maybe_declared(*again);
}

Status Service::check_regions(const Key& k, int peer, const PsRegions& m) const {
  proto::PsOptions o;
  bool opt_ok = proto::from_header(m.options, &o).empty();
  proto::Sync sync;
  bool sync_ok = proto::from_wire(m.sync, &sync).empty();
  proto::DType dtype{};
  bool dtype_ok = proto::dtype_from_wire(m.dtype, &dtype);
  if (m.n_clocks > kMaxResumeClocks)
    return Status(GSYNC_ERR_PROTOCOL,
                  fmt::format("{}: host {} sent {} checkpoint clocks; at most {} fit", k.describe(),
                              host_id(peer), m.n_clocks, kMaxResumeClocks));
  if (opt_ok && sync_ok && dtype_ok && dtype == k.dtype && m.count == k.count && o == k.opts &&
      sync == k.sync && m.hosts == k.hosts.size())
    return Status::ok();
  return Status(GSYNC_ERR_MISMATCH,
                fmt::format("{}: hosts disagree: host {} declared {} {} with {}, {}, {} hosts; "
                            "host {} declared {} {} with {}, {}, {} hosts",
                            k.describe(), host_id(peer), m.count, proto::dtype_name(m.dtype),
                            opt_ok ? proto::describe(o) : "an unknown optimizer",
                            sync_ok ? proto::describe(sync) : "an unknown sync mode", m.hosts,
                            host_id(self()), k.count, proto::name(k.dtype),
                            proto::describe(k.opts), proto::describe(k.sync), k.hosts.size()));
}

void Service::on_regions(int peer, const PsRegions& m) {
  std::string job = cluster::field(m.job, sizeof m.job);
  Key* k = find(job, m.key);
  if (!k) {
    // Kept until this host declares the key or the job closes, however
    // late its ranks come.
    cp_->hold_early({this, job, m.key, 0}, peer, cluster::as_bytes(m), Clock::now(),
                    Clock::time_point::max());
    return;
  }
  int p = k->participant_of(peer);
  if (p < 0) {
    spdlog::error("{}: host {} sent its regions but is not one of the job's hosts; ignored",
                  k->describe(), host_id(peer));
    return;
  }
  if (Status st = check_regions(*k, peer, m); !st) {
    if (k->declared) {
      auto done = std::move(k->declared);
      k->declared = nullptr;
      drop(*k, st);
      done(st);
    } else {
      k->broken = st;
    }
    return;
  }
  k->peer_push[size_t(p)] = m.push_region;
  k->known[size_t(p)] = true;
  if (k->ckpt.resume_pending) k->ckpt.peers[size_t(p)].assign(m.clocks, m.clocks + m.n_clocks);
  for (uint32_t i = 0; i < m.n_clocks && i < kMaxResumeClocks; i++)
    note_set(k->job, peer, m.clocks[i]);  // whole there (checkpoint_sets.cc)
  maybe_declared(*k);
}

void Service::maybe_declared(Key& k) {
  if (k.ready || !std::all_of(k.known.begin(), k.known.end(), [](bool b) { return b; })) return;
  k.ready = true;
  if (Status st = resume(k); !st) {
    spdlog::error("{}", st.message());
    k.broken = st;
    if (k.declared) {
      auto done = std::move(k.declared);
      k.declared = nullptr;
      drop(k, st);
      done(st);
    }
    return;
  }
  spdlog::info("{}: declared, {} {} with {}, {}; this host serves [{}, {})", k.describe(),
               k.count, proto::name(k.dtype), proto::describe(k.opts), proto::describe(k.sync),
               k.shards[size_t(k.self)].begin, k.shards[size_t(k.self)].end);
  if (k.declared) {
    auto done = std::move(k.declared);
    k.declared = nullptr;
    done(Status::ok());
  }
  // Requests that came while the resume clock was being agreed.
  if (Key* still = find(k.job, k.key); still == &k) answer_ready(k);
}

// Forgets the key: its queued ops fail with why, its regions are retired
// (a late write into them is dropped: ids are never reused), and its memory
// goes once no receive into its regions and no reply from its staging is
// in progress.
void Service::drop(Key& k, const Status& why) {
  auto it = keys_.find({k.job, k.key});
  if (it == keys_.end() || it->second.get() != &k) return;
  std::unique_ptr<Key> owned = std::move(it->second);
  keys_.erase(it);
  std::vector<std::unique_ptr<WorkerOp>> ops;
  if (owned->current) ops.push_back(std::move(owned->current));
  for (auto& q : owned->queue) ops.push_back(std::move(q));
  owned->queue.clear();
  Key* raw = owned.get();
  retiring_[raw] = std::move(owned);
  // Held for the rest of this function: a transport may finish a
  // deregistration at once, inside the call, and the key must outlive that.
  raw->releasing++;
  release_tensor(*raw);
  for (uint32_t r : {raw->push_region}) {
    if (r == 0) continue;
    by_region_.erase(r);
    raw->releasing++;
    cp_->net().deregister_region(r, [this, raw] {
      raw->releasing--;
      maybe_free(*raw);
    });
  }
  for (auto& op : ops) {
    ops_.erase(op->req.token);
    // Its pushes' sources are the client's buffer, kept by the op's stage
    // until done runs; none of ours is in flight once the key is gone
    // from the wire (the transport fails them with the link).
    if (op->done) op->done(why);
  }
  raw->releasing--;
  maybe_free(*raw);
}

void Service::maybe_free(Key& k) {
  if (k.releasing > 0 || k.replies_in_flight > 0) return;
  by_id_.erase(k.id);
  retiring_.erase(&k);
}

void Service::job_closed(const std::string& job) {
  std::vector<Key*> doomed;
  for (auto it = keys_.lower_bound({job, 0}); it != keys_.end() && it->first.first == job; ++it)
    doomed.push_back(it->second.get());
  for (Key* k : doomed) drop(*k, Status(GSYNC_ERR_CLOSED, fmt::format("job {} closed", job)));
  if (cp_) cp_->drop_early(this, job);
  guards_.job_closed(job);
  sets_.erase(job);
  // The job's files checked for its sets: checked again if it comes back.
  const std::string folder = storage::job_folder(ckpt_cfg_.dir, job) + "/";
  for (auto it = file_checks_.lower_bound(folder);
       it != file_checks_.end() && it->first.compare(0, folder.size(), folder) == 0;)
    it = file_checks_.erase(it);
}

std::vector<KeyReport> Service::report(const std::string& job) const {
  std::vector<KeyReport> out;
  for (auto it = keys_.lower_bound({job, 0}); it != keys_.end() && it->first.first == job; ++it) {
    const Key& k = *it->second;
    KeyReport r;
    r.key = k.key;
    r.count = k.count;
    r.dtype = proto::name(k.dtype);
    r.optimizer = proto::describe(k.opts);
    r.sync = proto::describe(k.sync);
    r.shard_begin = k.shards[size_t(k.self)].begin;
    r.shard_end = k.shards[size_t(k.self)].end;
    r.updates = k.server->updates();
    r.updates_per_s = k.updates_per_s(std::chrono::steady_clock::now());
    r.checkpoint = checkpoint_report(k);
    r.anomalies = k.anomalies;
    r.last_anomaly = k.last_anomaly;
    r.last_rollback_s = k.last_rollback_s;
    for (size_t p = 0; p < k.hosts.size(); p++) {
      r.worker_clocks.emplace_back(host_id(k.hosts[p]), k.server->next_clock(int(p)));
      r.shard_bytes.emplace_back(host_id(k.hosts[p]), k.shard_bytes(int(p)));
      r.pulls_waiting += k.served[p].waiting_pull;
      r.pull_wait_s.emplace_back(host_id(k.hosts[p]), k.served[p].waited_s);
    }
    out.push_back(std::move(r));
  }
  return out;
}

// ---------------------------------------------------------------- traffic

void Service::on_message(int peer, std::string_view msg) {
  if (msg.empty()) return;
  switch (static_cast<uint8_t>(msg[0])) {
    case kPsRegions: {
      PsRegions m;
      if (decode_exact(msg, &m)) return on_regions(peer, m);
      break;
    }
    case kPsPush: {
      PsPush m;
      if (decode_exact(msg, &m)) return on_push(peer, m);
      break;
    }
    case kPsAck: {
      PsAck m;
      if (decode_exact(msg, &m)) return on_ack(peer, m);
      break;
    }
    case kPsNorm: {
      PsNorm m;
      if (decode_exact(msg, &m)) return on_norm(peer, m);
      break;
    }
    case kPsCheckpoint: {
      PsCheckpoint m;
      if (decode_exact(msg, &m)) return on_checkpoint_request(peer, m);
      break;
    }
    default:
      break;
  }
  spdlog::error("host {}: malformed parameter-server message (type {}, {} bytes); ignored",
                host_id(peer), static_cast<int>(static_cast<uint8_t>(msg[0])), msg.size());
}

void Service::on_write(int peer, uint32_t region, uint64_t offset, uint64_t len, uint64_t imm) {
  auto it = by_region_.find(region);
  if (it == by_region_.end()) return;  // a key that is gone
  Key& k = *it->second;
  int p = k.participant_of(peer);
  if (p < 0) return;
  if (region != k.push_region && region != k.tensor_region) return;  // a tensor let go of
  if (region == k.push_region)
    on_push_data(k, p, offset, len, imm);
  else
    on_reply(k, p, imm, offset, len);
}

void Service::on_peer_lost(int peer, const Status& why) {
  std::vector<Key*> hit;
  for (auto& [id, k] : keys_)
    if (k->participant_of(peer) >= 0) hit.push_back(k.get());
  for (Key* k : hit) {
    Status st(why.code(), fmt::format("{}: {}", k->describe(), why.message()));
    k->broken = st;
    if (k->declared) {
      auto done = std::move(k->declared);
      k->declared = nullptr;
      drop(*k, st);
      done(st);
      continue;
    }
    if (k->current) {
      WorkerOp& op = *k->current;
      if (op.failed.is_ok()) op.failed = st;
      op.answers = 0;
      check_done(op);
    }
  }
}

void Service::on_peer_left_job(std::string_view job, int peer, const std::vector<proto::OpId>&,
                               const Status& why) {
  // A rank of another host left, and its host told the job's others: that
  // host's worker pushes nothing more until the rank rejoins (and if it was
  // the host's last rank, its shards go with the job once their answers
  // are out). This host's ops of the job that wait for a push it never
  // made end now, naming the rank, not at the op timeout
  // (docs/fault-tolerance.md); the others complete (its pushes came before
  // its JobLeave, on the same ordered link).
  std::vector<uint32_t> hit;
  for (const auto& [token, op] : ops_)
    if (op->req.job == job && op->key->participant_of(peer) >= 0 &&
        !pushed_enough(*op, op->key->participant_of(peer)))
      hit.push_back(token);
  // The queued ones first: ending the current op would start the next.
  std::sort(hit.begin(), hit.end(),
            [&](uint32_t a, uint32_t b) { return !ops_.at(a)->started && ops_.at(b)->started; });
  for (uint32_t token : hit) {
    auto it = ops_.find(token);
    if (it == ops_.end()) continue;
    abort(token, Status(why.code(), fmt::format("{}: {}", it->second->key->describe(),
                                                why.message())));
  }
}

// Whether worker w has pushed what op's answer waits for, as this host's
// own server saw it: in bsp the op's clock (a pull: the clocks before it),
// in ssp those beyond the bound; asp waits for nobody. A host without a
// shard of the key cannot tell, and says no.
bool Service::pushed_enough(const WorkerOp& op, int w) const {
  const Key& k = *op.key;
  const uint64_t c = op.req.clock;
  const bool push = op.req.opcode != proto::Opcode::kPull;
  uint64_t need = 0;  // w's next clock must be at least this
  switch (k.sync.mode) {
    case proto::SyncMode::kAsp: return true;
    case proto::SyncMode::kBsp: need = push ? c + 1 : c; break;
    case proto::SyncMode::kSsp: {
      if (op.req.opcode == proto::Opcode::kPush) return true;  // applied at once
      const uint64_t step = push ? c + 1 : c, s = k.sync.staleness;
      need = step > s ? step - s : 0;
      break;
    }
  }
  if (need == 0) return true;
  if (k.shard_bytes(k.self) == 0) return false;
  return k.server->next_clock(w) >= need;
}

std::vector<proto::OpId> Service::open_ops(std::string_view job) const {
  std::vector<proto::OpId> open;
  for (auto& [token, op] : ops_)
    if (op->req.job == job) open.push_back({op->req.key, op->req.clock});
  return open;
}

}  // namespace gsync::ps
