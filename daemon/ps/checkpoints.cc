// SPDX-License-Identifier: Apache-2.0
//
// A key's checkpoints and its recovery from them (docs/fault-tolerance.md).
//
// When: bsp takes one between clocks, when the clock just reached is a
// multiple of checkpoint_clocks, or at the first clock reached at or
// after one a PsCheckpoint asked for. Every shard reaches the same clocks
// in the same states, so the shards' files of one clock make one
// consistent set. The time cadence is the key's first host's: when it is
// due there, that host asks every shard (itself too) for one at the clock
// after the next, which no shard has reached yet (a bsp shard is at most
// one clock ahead of another). asp and ssp take one when the clock every
// worker has pushed up to reaches a multiple, or at once when asked.
//
// How: the server's state is snapshotted (param_server.h: copied by the writer's
// thread, copy-before-write on the event thread) and written by the
// storage layer's writer (storage/checkpoint_writer.h). One at a time per
// key: one due while the last is still being written is skipped (and
// counted).
//
// Recovery: at declaration each host lists the clocks of its shard's files
// that load and whose whole set (every key of the job at that clock,
// checkpoint_sets.cc) loads here too, and tells the others in its
// PsRegions; once all are known, every host takes the newest clock all of
// them hold - the same for every key of the job - loads its file, and the
// workers pull the parameters of that clock (PsDeclareStage).
#include <sys/stat.h>

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/ps/checkpoint_sets.h"
#include "daemon/ps/service_key.h"
#include "daemon/storage/checkpoint_files.h"

namespace gsync::ps {

namespace {
using Clock = std::chrono::steady_clock;
// The files of a shard the writer keeps at most, whatever sets they are
// of; a declaration reads that many to find the whole sets among them.
constexpr size_t kFilesKept = 2 * kMaxResumeClocks;
// Whole sets remembered per host: enough for keep (at most 8) and the
// ones in between.
constexpr size_t kSetsKept = 32;
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void Service::setup_checkpoints(Key& k) {
  Checkpoints& c = k.ckpt;
  if (!k.opts.checkpoints()) return;
  if (ckpt_cfg_.dir.empty() || !writer_) {
    spdlog::warn("{}: checkpoints asked for, but this daemon has no checkpoint directory "
                 "(checkpoint.dir); none are taken here",
                 k.describe());
    c.last_error = "this daemon has no checkpoint directory (checkpoint.dir)";
    return;
  }
  c.on = true;
  const Shard& mine = k.shards[size_t(k.self)];
  c.id.job = k.job;
  c.id.key = k.key;
  c.id.count = k.count;
  c.id.begin = mine.begin;
  c.id.end = mine.end;
  c.id.hosts = static_cast<uint32_t>(k.hosts.size());
  c.id.dtype = k.dtype;
  c.id.options = k.opts;
  c.id.sync = k.sync;
  c.folder = storage::job_folder(ckpt_cfg_.dir, k.job);
  c.peers.assign(k.hosts.size(), {});
  c.last_request = Clock::now();
  if (!k.opts.resume) return;
  // The clocks whose whole set this host holds (checkpoint_sets.cc), from
  // every file the writer keeps.
  std::vector<storage::CheckpointHeader> headers;
  const std::vector<uint64_t> valid =
      storage::valid_clocks(c.folder, c.id, kFilesKept, &c.newest, &headers);
  c.valid = whole_clocks(k, valid, headers);
  for (uint64_t clock : c.valid) {
    c.written.insert(clock);
    note_set(k.job, self(), clock);
  }
  c.peers[size_t(k.self)] = c.valid;
  c.resume_pending = true;
}

Status Service::resume(Key& k) {
  Checkpoints& c = k.ckpt;
  if (!c.resume_pending) return Status::ok();
  c.resume_pending = false;
  storage::Loaded newest = std::move(c.newest);  // freed at the end, whatever is decided
  // The newest clock every host holds (the lists are newest first).
  uint64_t agreed = 0;
  for (uint64_t clock : c.valid) {
    bool everywhere = std::all_of(c.peers.begin(), c.peers.end(), [clock](const auto& l) {
      return std::find(l.begin(), l.end(), clock) != l.end();
    });
    if (everywhere) {
      agreed = clock;
      break;
    }
  }
  if (agreed == 0) {
    bool any = std::any_of(c.peers.begin(), c.peers.end(), [](const auto& l) { return !l.empty(); });
    if (any) {
      std::string held;
      for (size_t p = 0; p < k.hosts.size(); p++)
        held += fmt::format("{}{}: [{}]", p ? "; " : "", host_id(k.hosts[p]),
                            fmt::join(c.peers[p], ", "));
      spdlog::warn("{}: no checkpoint clock is held by every host ({}); starting from the "
                   "declared values",
                   k.describe(), held);
    }
    return Status::ok();
  }
  // Usually the newest, read and checked at declaration; an older one is
  // read (and checked) again now.
  const bool newest_agreed = !newest.payload.empty() && newest.header.clock == agreed;
  storage::Loaded l = newest_agreed ? std::move(newest) : storage::Loaded{};
  if (Status st = newest_agreed ? Status::ok() : storage::load(c.folder, c.id, agreed, &l); !st)
    return Status(GSYNC_ERR_INTERNAL,
                  fmt::format("{}: every host holds the checkpoint of clock {}, but this "
                              "host's no longer loads: {}",
                              k.describe(), agreed, st.message()));
  k.server->restore(agreed, l.header.steps, l.header.updates, l.payload.data());
  if (k.bsp()) k.server->read(k.staging_slot(k.self));
  c.resumed_from = agreed;
  c.last_clock = agreed;
  spdlog::info("{}: resumed from the checkpoint of clock {} ({} optimizer steps, {} updates), "
               "{}",
               k.describe(), agreed, l.header.steps, l.header.updates,
               c.folder + "/" + storage::file_name(c.id, agreed));
  return Status::ok();
}

void Service::maybe_checkpoint(Key& k) {
  Checkpoints& c = k.ckpt;
  if (!c.on || c.resume_pending || !k.ready || k.verdict_pending) return;
  ParamServer& sv = *k.server;
  if (!sv.between_clocks()) return;
  const uint64_t clock = sv.checkpoint_clock();
  const auto now = Clock::now();
  if (k.opts.checkpoint_ms != 0 && k.self == 0 &&
      now - c.last_request >= std::chrono::milliseconds(k.opts.checkpoint_ms)) {
    c.last_request = now;
    ask_checkpoint(k, k.bsp() ? clock + 1 : clock);
  }
  if (clock == 0 || clock == c.last_clock) return;
  const bool by_clock = k.opts.checkpoint_clocks != 0 && clock % k.opts.checkpoint_clocks == 0;
  if (!by_clock && clock < c.wanted_at) return;
  if (c.writing) {
    // The disk is slower than the cadence: this one is skipped, the one
    // being written goes on (and a forced one stays wanted).
    c.skipped++;
    spdlog::debug("{}: checkpoint at clock {} skipped: the one of clock {} is still being "
                  "written",
                  k.describe(), clock, c.last_clock);
    return;
  }
  take_checkpoint(k, clock);
}

void Service::take_checkpoint(Key& k, uint64_t clock) {
  Checkpoints& c = k.ckpt;
  ParamServer& sv = *k.server;
  if (clock >= c.wanted_at) c.wanted_at = Checkpoints::kNever;
  c.last_clock = clock;
  c.writing = true;
  c.started = Clock::now();
  c.snapshot = sv.snapshot();
  storage::WriteJob j;
  j.tag = k.id;
  j.folder = c.folder;
  j.id = c.id;
  j.clock = clock;
  j.steps = sv.steps();
  j.updates = sv.updates();
  j.set = set_now(k);
  // keep counts sets whole on every host (checkpoint_sets.cc); past
  // kFilesKept files a shard's oldest go whatever they were.
  j.keep = int(kFilesKept);
  j.keep_from = keep_from(k);
  j.snapshot = c.snapshot;
  writer_->submit(std::move(j));
}

void Service::ask_checkpoint(Key& k, uint64_t at) {
  PsCheckpoint m;
  cluster::set_field(m.job, sizeof m.job, k.job);
  m.key = k.key;
  m.at = at;
  for (int h : k.hosts)
    if (h != self()) cp_->send(h, cluster::as_bytes(m));
  on_checkpoint_request(self(), m);
}

void Service::on_checkpoint_request(int peer, const PsCheckpoint& m) {
  const std::string job = cluster::field(m.job, sizeof m.job);
  if (m.kind == PsCheckpoint::kSetWhole) {
    // Kept for a job this host serves (its keys know the peer) only.
    auto it = keys_.lower_bound({job, 0});
    if (it != keys_.end() && it->first.first == job && it->second->participant_of(peer) >= 0)
      note_set(job, peer, m.at);
    return;
  }
  if (m.kind != PsCheckpoint::kTake) {
    spdlog::error("host {}: a checkpoint message of kind {} for job {}; ignored", host_id(peer),
                  m.kind, job);
    return;
  }
  Key* k = find(job, m.key);
  if (!k || k->participant_of(peer) < 0 || !k->ckpt.on) return;
  k->ckpt.wanted_at = std::min(k->ckpt.wanted_at, m.at);
  maybe_checkpoint(*k);
}

Status Service::request_checkpoint(const std::string& job) {
  std::vector<Key*> keys;
  for (auto it = keys_.lower_bound({job, 0}); it != keys_.end() && it->first.first == job; ++it)
    keys.push_back(it->second.get());
  if (keys.empty())
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("job {} has no parameter-server key on this host", job));
  int asked = 0;
  for (Key* k : keys) {
    if (!k->ckpt.on || !k->ready) continue;
    asked++;
    ParamServer& sv = *k->server;
    // bsp: the clock after the one this shard is at (it may be mid-update,
    // and another shard may be one clock ahead of it).
    ask_checkpoint(*k, k->bsp() ? sv.checkpoint_clock() + 1 : 0);
  }
  if (asked == 0)
    return Status(GSYNC_ERR_INVALID,
                  fmt::format("no key of job {} keeps checkpoints on this host{}", job,
                              ckpt_cfg_.dir.empty() ? " (it has no checkpoint.dir)" : ""));
  return Status::ok();
}

void Service::on_checkpoints_written(std::vector<storage::WriteResult> results) {
  for (storage::WriteResult& r : results) {
    auto it = by_id_.find(static_cast<uint32_t>(r.tag));
    if (it == by_id_.end()) continue;  // the key went; its file is whole or gone
    Key& k = *it->second;
    Checkpoints& c = k.ckpt;
    c.writing = false;
    if (c.snapshot) {
      c.stall_s = c.snapshot->inline_s();
      c.longest_stall_s = std::max(c.longest_stall_s, c.stall_s);
      c.snapshot.reset();
    }
    if (!r.ok) {
      c.failed++;
      c.last_error = fmt::format("checkpoint of clock {} failed: {}", r.clock, r.error);
      spdlog::error("{}: {}; training goes on, the last good checkpoint is kept",
                    k.describe(), c.last_error);
      continue;
    }
    c.taken++;
    c.last_error.clear();
    if (find(k.job, k.key) == &k) on_checkpoint_written(k, r.clock);
    c.have_last = true;
    c.written_clock = r.clock;
    c.written_bytes = r.bytes;
    c.written_at = Clock::now();
    c.written_s = secs(c.written_at - c.started);
    c.copy_s = r.copy_s;
    spdlog::info("{}: checkpoint of clock {} written, {} bytes in {:.3f} s ({})", k.describe(),
                 r.clock, r.bytes, c.written_s, r.path);
    if (find(k.job, k.key) == &k) maybe_checkpoint(k);  // one wanted while this was written
  }
}

uint64_t Service::resumed_clock(const std::string& job, uint64_t key) const {
  const Key* k = find(job, key);
  return k ? k->ckpt.resumed_from : 0;
}

CheckpointReport Service::checkpoint_report(const Key& k) const {
  const Checkpoints& c = k.ckpt;
  CheckpointReport r;
  r.on = c.on;
  r.every_clocks = k.opts.checkpoint_clocks;
  r.every_ms = k.opts.checkpoint_ms;
  r.folder = c.folder;
  r.taken = c.taken;
  r.failed = c.failed;
  r.skipped = c.skipped;
  r.writing = c.writing;
  r.have_last = c.have_last;
  r.last_clock = c.written_clock;
  r.last_bytes = c.written_bytes;
  r.last_age_s = c.have_last ? secs(Clock::now() - c.written_at) : 0;
  r.last_duration_s = c.written_s;
  r.last_copy_s = c.copy_s;
  r.longest_stall_s = c.longest_stall_s;
  r.last_error = c.last_error;
  r.resumed_from = c.resumed_from;
  return r;
}

// ---------------------------------------------------------------- sets
// (checkpoint_sets.cc says what a set is and why.)

storage::CheckpointSet Service::set_now(const Key& k) const {
  std::vector<uint64_t> keys;
  for (auto it = keys_.lower_bound({k.job, 0}); it != keys_.end() && it->first.first == k.job;
       ++it)
    if (it->second->ckpt.on) keys.push_back(it->first.second);
  return storage::checkpoint_set(std::move(keys));
}

bool Service::file_whole(const Key& k, const storage::ListedFile& f, uint64_t clock) {
  const std::string path = k.ckpt.folder + "/" + f.name;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return false;
  // A file is read once while it stays the same file (a set's files are
  // asked about by each of its keys).
  const FileSig sig{uint64_t(st.st_ino), uint64_t(st.st_size), uint64_t(st.st_mtim.tv_sec),
                    uint64_t(st.st_mtim.tv_nsec)};
  auto it = file_checks_.find(path);
  if (it == file_checks_.end() || !(it->second.sig == sig)) {
    FileCheck c{sig, false, 0};
    const Status ok = storage::check_file(k.ckpt.folder, f.name, k.job, f.key,
                                          static_cast<uint32_t>(k.hosts.size()), clock, &c.count);
    if (!ok) spdlog::warn("checkpoint skipped: {}", ok.message());
    c.whole = ok.is_ok();
    it = file_checks_.insert_or_assign(path, c).first;
  }
  // This host's shard of that key, where hosts share the folder.
  const Shard mine = place(it->second.count, k.hosts.size())[size_t(k.self)];
  return it->second.whole && mine.begin == f.begin && mine.end == f.end;
}

std::vector<uint64_t> Service::whole_clocks(Key& k, const std::vector<uint64_t>& valid,
                                            const std::vector<storage::CheckpointHeader>& headers) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < valid.size() && out.size() < kMaxResumeClocks; i++) {
    const uint64_t clock = valid[i];
    const storage::CheckpointSet want{headers[i].set_keys, headers[i].set_hash};
    if (want.keys == 0) {  // a version 1 file: a set of itself
      out.push_back(clock);
      continue;
    }
    std::vector<uint64_t> here;
    for (const storage::ListedFile& f :
         storage::files_at(k.ckpt.folder, static_cast<uint32_t>(k.hosts.size()), clock)) {
      const Shard& own = k.shards[size_t(k.self)];
      if (f.key == k.key ? f.begin == own.begin && f.end == own.end : file_whole(k, f, clock))
        here.push_back(f.key);
    }
    const storage::CheckpointSet got = storage::checkpoint_set(here);
    if (got == want) {
      out.push_back(clock);
      continue;
    }
    spdlog::warn("{}: its checkpoint of clock {} is not used: that clock's set of {} keys is "
                 "not whole on this host ({} of its files load here: keys {})",
                 k.describe(), clock, want.keys, here.size(), fmt::join(here, ", "));
  }
  return out;
}

void Service::note_set(const std::string& job, int host, uint64_t clock) {
  std::set<uint64_t>& whole = sets_[job][host];
  whole.insert(clock);
  while (whole.size() > kSetsKept) whole.erase(whole.begin());
}

void Service::on_checkpoint_written(Key& k, uint64_t clock) {
  Checkpoints& c = k.ckpt;
  c.written.insert(clock);
  while (c.written.size() > kSetsKept) c.written.erase(c.written.begin());
  // Whole here once every key of the job that keeps checkpoints has it.
  for (auto it = keys_.lower_bound({k.job, 0}); it != keys_.end() && it->first.first == k.job;
       ++it)
    if (it->second->ckpt.on && !it->second->ckpt.written.count(clock)) return;
  note_set(k.job, self(), clock);
  PsCheckpoint m;
  m.kind = PsCheckpoint::kSetWhole;
  cluster::set_field(m.job, sizeof m.job, k.job);
  m.at = clock;
  for (int h : k.hosts)
    if (h != self()) cp_->send(h, cluster::as_bytes(m));
}

uint64_t Service::keep_from(const Key& k) const {
  auto it = sets_.find(k.job);
  std::vector<std::set<uint64_t>> by_host;
  for (int h : k.hosts) {
    const std::set<uint64_t>* whole = nullptr;
    if (it != sets_.end())
      if (auto hit = it->second.find(h); hit != it->second.end()) whole = &hit->second;
    by_host.push_back(whole ? *whole : std::set<uint64_t>{});
  }
  return ps::keep_from(by_host, ckpt_cfg_.keep);
}

}  // namespace gsync::ps
