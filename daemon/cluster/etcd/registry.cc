// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/etcd/registry.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/cluster/etcd/client.h"
#include "daemon/core/text.h"

namespace gsync::cluster::etcd {

namespace {

using std::chrono::milliseconds;

// A unary call waits this long for etcd; the watch has no such bound.
constexpr milliseconds kCallTimeout{2000};
// Between attempts at an etcd that does not answer.
constexpr milliseconds kRetryMin{100}, kRetryMax{2000};
// Tries at a free slot when other hosts claim at the same time.
constexpr int kClaimTries = 64;

bool parse_int(std::string_view s, int* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// The record a hosts/ key holds, or why it is not one.
Status record_of(std::string_view cluster, const KeyValue& kv, HostRecord* r) {
  std::string id = id_of_host_key(cluster, kv.key);
  if (Status st = decode_record(kv.value, r); !st)
    return {st.code(), fmt::format("key {}: {}", printable(kv.key, 128), st.message())};
  if (r->id != id)
    return {GSYNC_ERR_PROTOCOL, fmt::format("key {} holds the record of host '{}'",
                                            printable(kv.key, 128), r->id)};
  r->create_revision = kv.create_revision;
  r->lease = kv.lease;
  return Status::ok();
}

}  // namespace

Registry::Registry(RegistryOptions options)
    : o_(std::move(options)),
      keeper_client_(std::make_unique<Client>(o_.endpoints, kCallTimeout)),
      watcher_client_(std::make_unique<Client>(o_.endpoints, kCallTimeout)) {}

Registry::~Registry() {
  stop_ = true;
  cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  if (watcher_.joinable()) watcher_.join();
  // A clean leave: peers see the key go now, not a ttl later.
  if (state_.lease != 0) {
    if (Status st = keeper_client_->revoke(state_.lease); !st)
      spdlog::warn("etcd: could not revoke this host's lease ({}); peers see it leave when the "
                   "lease expires",
                   st.message());
  }
}

Status Registry::claim_slot(Client& c, int* slot) {
  const std::string by_id = slot_by_id_key(o_.cluster, o_.self.id);
  for (int attempt = 0; attempt < kClaimTries; attempt++) {
    std::vector<KeyValue> kvs;
    int64_t rev = 0;
    if (Status st = c.range_prefix(fmt::format("{}slots/", o_.cluster), &kvs, &rev); !st) return st;
    int used = 0;
    for (const auto& kv : kvs) {
      if (kv.key == by_id) {
        if (!parse_int(kv.value, slot) || *slot < 0 || *slot >= kMaxSlots)
          return {GSYNC_ERR_PROTOCOL, fmt::format("etcd key {} holds \"{}\", not a slot number",
                                                  by_id, printable(kv.value, 32))};
        return Status::ok();
      }
      if (kv.key.rfind(fmt::format("{}slots/n/", o_.cluster), 0) == 0) used++;
    }
    // Slots are handed out in order and never given back: a host that
    // left keeps its place for when it returns.
    if (used >= kMaxSlots)
      return {GSYNC_ERR_NOMEM, fmt::format("cluster {}: all {} slots are taken", o_.cluster,
                                           kMaxSlots)};
    bool created = false;
    Status st = c.create_all({{by_id, std::to_string(used)},
                              {slot_by_number_key(o_.cluster, used), o_.self.id}},
                             &created);
    if (!st) return st;
    if (created) {
      *slot = used;
      return Status::ok();
    }
  }
  return {GSYNC_ERR_AGAIN, fmt::format("cluster {}: no slot after {} tries (other hosts kept "
                                       "claiming the same one)",
                                       o_.cluster, kClaimTries)};
}

Status Registry::register_self(Client& c) {
  int64_t lease = 0;
  if (Status st = c.grant(o_.ttl_s, &lease); !st) return st;
  if (Status st = c.put(host_key(o_.cluster, o_.self.id), encode_record(o_.self), lease); !st)
    return st;
  std::lock_guard lock(mu_);
  state_.lease = lease;
  return Status::ok();
}

Status Registry::read_hosts(Client& c, std::vector<HostRecord>* hosts, int64_t* revision) {
  std::vector<KeyValue> kvs;
  if (Status st = c.range_prefix(hosts_prefix(o_.cluster), &kvs, revision); !st) return st;
  hosts->clear();
  for (const auto& kv : kvs) {
    HostRecord r;
    if (Status st = record_of(o_.cluster, kv, &r); !st) {
      spdlog::error("etcd: {}; that host is left out", st.message());
      continue;
    }
    hosts->push_back(std::move(r));
  }
  return Status::ok();
}

Status Registry::join(int* slot, std::vector<HostRecord>* hosts) {
  Client& c = *keeper_client_;
  auto deadline = std::chrono::steady_clock::now() + o_.join_deadline;
  milliseconds wait = kRetryMin;
  Status st;
  for (;;) {
    st = claim_slot(c, slot);
    if (st) {
      o_.self.slot = *slot;
      std::vector<HostRecord> now;
      int64_t rev = 0;
      st = read_hosts(c, &now, &rev);
      for (const auto& h : now)
        if (st && h.id == o_.self.id && (h.address != o_.self.address || h.port != o_.self.port))
          st = Status(GSYNC_ERR_INVALID,
                      fmt::format("host id {} is registered in etcd already by the daemon at "
                                  "{}:{} (pid {}); each daemon needs its own id",
                                  h.id, h.address, h.port, h.pid));
      if (st) st = register_self(c);
      if (st) st = read_hosts(c, hosts, &revision_);
    }
    if (st || st.code() != GSYNC_ERR_CONNECT || std::chrono::steady_clock::now() >= deadline)
      break;
    spdlog::warn("etcd: {}; trying again", st.message());
    if (!pause(wait)) break;
    wait = std::min(kRetryMax, wait * 2);
  }
  if (!st) return {st.code(), fmt::format("etcd membership of host {}: {}", o_.self.id, st.message())};
  std::lock_guard lock(mu_);
  state_.revision = revision_;
  state_.endpoint = c.endpoint();
  return Status::ok();
}

void Registry::start(std::function<void()> wake) {
  wake_ = std::move(wake);
  keeper_ = std::thread([this] { keep(); });
  watcher_ = std::thread([this] { watch(); });
}

std::vector<Change> Registry::take() {
  std::lock_guard lock(mu_);
  return std::exchange(queue_, {});
}

Registry::State Registry::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

void Registry::post(Change c) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(c));
    state_.changes++;
  }
  if (wake_) wake_();
}

void Registry::set_down(const Status& why) {
  bool was_up;
  {
    std::lock_guard lock(mu_);
    was_up = state_.etcd_up;
    state_.etcd_up = false;
    state_.last_error = why.message();
  }
  if (was_up) post({Change::Kind::kEtcdDown, {}, {}, {}, why.message()});
}

void Registry::set_up() {
  bool was_down;
  {
    std::lock_guard lock(mu_);
    was_down = !state_.etcd_up;
    state_.etcd_up = true;
  }
  if (was_down) post({Change::Kind::kEtcdUp, {}, {}, {}, ""});
}

bool Registry::pause(milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [this] { return stop_.load(); });
  return !stop_;
}

void Registry::keep() {
  Client& c = *keeper_client_;
  const milliseconds period(o_.ttl_s * 1000 / 3);
  milliseconds wait = period;
  while (pause(wait)) {
    int64_t lease = state().lease, left = 0;
    Status st = c.keepalive(lease, &left);
    if (st && left == 0) {
      // The lease expired while etcd could not be reached (or someone
      // revoked it): peers have seen this host leave; register again.
      st = register_self(c);
      if (st) {
        {
          std::lock_guard lock(mu_);
          state_.rejoins++;
        }
        post({Change::Kind::kRejoined, {}, {}, {},
              fmt::format("lease {:x} was gone; registered again", lease)});
      }
    }
    if (!st) {
      set_down(st);
      wait = std::min(period, kRetryMax / 4);
      continue;
    }
    set_up();
    wait = period;
  }
}

void Registry::watch() {
  Client& c = *watcher_client_;
  int64_t from = revision_ + 1;
  milliseconds wait = kRetryMin;
  bool resync = false;
  while (!stop_) {
    if (resync) {
      Change snap{Change::Kind::kSnapshot, {}, {}, {}, ""};
      int64_t rev = 0;
      if (Status st = read_hosts(c, &snap.hosts, &rev); !st) {
        set_down(st);
        if (!pause(wait)) return;
        wait = std::min(kRetryMax, wait * 2);
        continue;
      }
      post(std::move(snap));
      from = rev + 1;
      resync = false;
    }
    Status st = c.watch_prefix(
        hosts_prefix(o_.cluster), from,
        [&](const WatchResponse& r) {
          set_up();
          wait = kRetryMin;
          if (r.compact_revision > 0 || r.canceled) {
            resync = true;
            return false;
          }
          for (const auto& e : r.events) {
            if (e.kind == WatchEvent::Kind::kDelete) {
              post({Change::Kind::kLeft, {}, id_of_host_key(o_.cluster, e.kv.key), {},
                    "its key in etcd went (the lease expired or was revoked)"});
              continue;
            }
            Change j{Change::Kind::kJoined, {}, {}, {}, ""};
            if (Status bad = record_of(o_.cluster, e.kv, &j.host); !bad) {
              spdlog::error("etcd: {}; ignored", bad.message());
              continue;
            }
            post(std::move(j));
          }
          if (r.revision > 0) {
            from = r.revision + 1;
            std::lock_guard lock(mu_);
            state_.revision = r.revision;
          }
          return true;
        },
        stop_);
    if (stop_) return;
    if (!resync) {
      // The stream failed or ended: events may have been missed while
      // it was down, so read the whole list again once etcd answers.
      set_down(st.ok() ? Status(GSYNC_ERR_CONNECT, "the watch stream ended") : st);
      resync = true;
      if (!pause(wait)) return;
      wait = std::min(kRetryMax, wait * 2);
    }
  }
}

}  // namespace gsync::cluster::etcd
