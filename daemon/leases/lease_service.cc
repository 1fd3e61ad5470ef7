// SPDX-License-Identifier: Apache-2.0
#include "daemon/leases/lease_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "daemon/leases/messages.h"
#include "protocol/admin_jobs.h"
#include "protocol/lease.h"
#include "protocol/ops.h"

namespace gsync::leases {

namespace k = admin::jobs;

namespace {
// Ledgers one keeper holds at most: a peer cannot make it grow without end.
constexpr size_t kMaxBooks = 4096;
// How long a closed job's ledger still answers its other hosts.
constexpr auto kRetiredFor = std::chrono::minutes(10);

}  // namespace

LeaseService::LeaseService(cluster::ControlPlane* cp) : cp_(cp) {}

cluster::ServiceClaim LeaseService::claim() {
  return {"batch leases",
          std::vector<uint8_t>(std::begin(kLeaseMessages), std::end(kLeaseMessages)), 0, 0};
}

std::string LeaseService::host_id(int host) const {
  return cp_ ? cp_->host_id(host) : std::string("this host");
}

LeaseBook* LeaseService::book(const std::string& job, bool create) {
  auto it = books_.find(job);
  if (it != books_.end()) return &it->second;
  if (!create || books_.size() >= kMaxBooks) return nullptr;
  return &books_[job];
}

void LeaseService::keep(const std::string& job, int rank, uint64_t epoch, uint64_t batches,
                        uint64_t clock, Answer done) {
  uint32_t v = 0;
  LeaseBook* b = book(job, true);
  Status st = b ? b->lease(rank, epoch, batches, clock, &v)
                : Status(GSYNC_ERR_NOMEM, fmt::format("{} lease ledgers kept on host {}", kMaxBooks,
                                                      host_id(cp_ ? cp_->self() : 0)));
  if (st && v == kLeaseHold) {
    held_[job].push_back(Held{rank, epoch, batches, clock, std::move(done)});
    return;
  }
  if (!st) st = Status(st.code(), fmt::format("job {}: {}", job, st.message()));
  done(st, v);
}

void LeaseService::on_settle(const std::string& job, int rank, uint64_t clock) {
  LeaseBook* b = book(job, false);
  if (!b || b->settle(rank, clock) == 0) return;
  // The held asks, in the order they came: each may now have its answer.
  auto it = held_.find(job);
  if (it == held_.end()) return;
  std::vector<Held> asks = std::move(it->second);
  held_.erase(it);
  for (Held& h : asks) keep(job, h.rank, h.epoch, h.batches, h.clock, std::move(h.done));
}

size_t LeaseService::on_drop(const std::string& job, int rank, uint64_t from_clock) {
  LeaseBook* b = book(job, false);
  if (!b) return 0;
  std::vector<Held> asks;
  if (auto it = held_.find(job); it != held_.end()) {
    asks = std::move(it->second);
    held_.erase(it);
  }
  // An ask of the rank that left goes unanswered by the ledger: a batch
  // granted to it now would be lost with it.
  for (auto it = asks.begin(); it != asks.end();) {
    if (it->rank != rank) {
      ++it;
      continue;
    }
    it->done(Status(GSYNC_ERR_CLOSED, fmt::format("job {}: rank {} left", job, rank)), 0);
    it = asks.erase(it);
  }
  const size_t n = b->drop(rank, from_clock);
  for (Held& h : asks) keep(job, h.rank, h.epoch, h.batches, h.clock, std::move(h.done));
  return n;
}

void LeaseService::ask(const std::string& job, int keeper, int rank, uint64_t epoch,
                       uint64_t batches, uint64_t clock, Answer done) {
  Counts& c = counts_[job];
  c.keeper = cp_ ? keeper : -1;
  auto counted = [this, job, done = std::move(done)](const Status& st, uint32_t v) {
    auto it = counts_.find(job);
    if (it != counts_.end() && st) {
      if (v == proto::kLeaseWait)
        it->second.waits++;
      else if (v == proto::kLeaseEnd)
        it->second.ends++;
      else
        it->second.leased++;
    }
    done(st, v);
  };
  if (here(keeper)) return keep(job, rank, epoch, batches, clock, std::move(counted));
  if (!cp_->peer_up(keeper)) {
    counted(Status(GSYNC_ERR_HOST_LOST,
                   fmt::format("job {}: the lease keeper, host {}, is down", job, host_id(keeper))),
            0);
    return;
  }
  LeaseAsk m;
  m.rank = rank;
  cluster::set_field(m.job, sizeof m.job, job);
  m.id = next_id_++;
  m.epoch = epoch;
  m.batches = batches;
  m.clock = clock;
  asked_[m.id] = Asked{job, keeper, std::move(counted)};
  cp_->send(keeper, cluster::as_bytes(m));
}

void LeaseService::settle(const std::string& job, int keeper, int rank, uint64_t clock) {
  counts_[job].settled++;
  if (here(keeper)) return on_settle(job, rank, clock);
  LeaseSettle m;
  m.rank = rank;
  cluster::set_field(m.job, sizeof m.job, job);
  m.clock = clock;
  cp_->send(keeper, cluster::as_bytes(m));
}

void LeaseService::drop(const std::string& job, int keeper, int rank, uint64_t from_clock) {
  if (here(keeper)) {
    const size_t n = on_drop(job, rank, from_clock);
    counts_[job].dropped += n;
    spdlog::info("job {}: rank {} left; {} of its leases (clock {} on) go to the other ranks", job,
                 rank, n, from_clock);
    return;
  }
  LeaseDrop m;
  m.rank = rank;
  cluster::set_field(m.job, sizeof m.job, job);
  m.from_clock = from_clock;
  cp_->send(keeper, cluster::as_bytes(m));
  spdlog::info("job {}: rank {} left; its leases from clock {} on go back to the keeper, host {}",
               job, rank, from_clock, host_id(keeper));
}

void LeaseService::job_opened(const std::string& job) {
  if (retired_.erase(job)) books_.erase(job);
}

void LeaseService::job_closed(const std::string& job) {
  const auto now = Clock::now();
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (now - it->second < kRetiredFor) {
      ++it;
      continue;
    }
    books_.erase(it->first);
    it = retired_.erase(it);
  }
  if (books_.count(job)) retired_[job] = now;
  counts_.erase(job);
  for (auto it = asked_.begin(); it != asked_.end();)
    it = it->second.job == job ? asked_.erase(it) : std::next(it);
}

void LeaseService::on_message(int peer, std::string_view msg) {
  LeaseMessage m;
  if (!decode(msg, &m)) {
    spdlog::error("host {}: malformed lease message (type {}, {} bytes); ignored", host_id(peer),
                  msg.empty() ? -1 : int(static_cast<uint8_t>(msg[0])), msg.size());
    return;
  }
  switch (m.type) {
    case kLeaseAsk: {
      const uint64_t id = m.ask.id;
      keep(cluster::field(m.ask.job, sizeof m.ask.job), m.ask.rank, m.ask.epoch, m.ask.batches,
           m.ask.clock, [this, peer, id](const Status& st, uint32_t v) {
             LeaseGrant g;
             g.id = id;
             g.code = st.code();
             g.value = v;
             if (!st) cluster::set_field(g.message, sizeof g.message, st.message());
             cp_->send(peer, cluster::as_bytes(g));
           });
      return;
    }
    case kLeaseGrant:
      return on_grant(peer, m.grant);
    case kLeaseSettle:
      return on_settle(cluster::field(m.settle.job, sizeof m.settle.job), m.settle.rank,
                       m.settle.clock);
    case kLeaseDrop: {
      const std::string job = cluster::field(m.drop.job, sizeof m.drop.job);
      const size_t n = on_drop(job, m.drop.rank, m.drop.from_clock);
      spdlog::info(
          "job {}: rank {} on host {} left; {} of its leases (clock {} on) go to the "
          "other ranks",
          job, m.drop.rank, host_id(peer), n, m.drop.from_clock);
      return;
    }
    default:
      return;
  }
}

void LeaseService::on_grant(int peer, const LeaseGrant& g) {
  auto it = asked_.find(g.id);
  if (it == asked_.end() || it->second.keeper != peer) {
    spdlog::warn("host {}: a lease answer {} that no ask here waits for; ignored", host_id(peer),
                 g.id);
    return;
  }
  Answer done = std::move(it->second.done);
  asked_.erase(it);
  if (g.code == 0) return done(Status::ok(), g.value);
  if (!proto::is_error_code(g.code))
    return done(Status(GSYNC_ERR_PROTOCOL,
                       fmt::format("host {} answered a lease with code {}", host_id(peer), g.code)),
                0);
  done(Status(g.code, cluster::field(g.message, sizeof g.message)), 0);
}

void LeaseService::on_peer_lost(int peer, const Status& why) {
  for (auto it = asked_.begin(); it != asked_.end();) {
    if (it->second.keeper != peer) {
      ++it;
      continue;
    }
    Answer done = std::move(it->second.done);
    std::string job = it->second.job;
    it = asked_.erase(it);
    done(
        Status(why.code(), fmt::format("job {}: the lease keeper is gone: {}", job, why.message())),
        0);
  }
}

nlohmann::json LeaseService::report(const std::string& job) const {
  nlohmann::json j = nlohmann::json::object();
  auto c = counts_.find(job);
  auto b = books_.find(job);
  if (c == counts_.end() && b == books_.end()) return j;
  if (c != counts_.end()) {
    const Counts& n = c->second;
    j[k::kKeeper] = n.keeper < 0 ? std::string("this host") : host_id(n.keeper);
    j[k::kLeased] = n.leased;
    j[k::kWaits] = n.waits;
    j[k::kEnds] = n.ends;
    j[k::kSettledClocks] = n.settled;
  }
  if (b != books_.end()) {
    j[k::kOutstanding] = b->second.outstanding();
    nlohmann::json epochs = nlohmann::json::array();
    for (const auto& e : b->second.report())
      epochs.push_back({{k::kEpoch, e.epoch},
                        {k::kBatches, e.batches},
                        {k::kLeased, e.leased},
                        {k::kOutstanding, e.outstanding},
                        {k::kSettled, e.settled},
                        {k::kReassigned, e.reassigned},
                        {k::kFree, e.free}});
    j[k::kEpochs] = std::move(epochs);
  }
  return j;
}

}  // namespace gsync::leases
