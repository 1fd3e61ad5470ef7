// SPDX-License-Identifier: Apache-2.0
#include "daemon/leases/lease_book.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "protocol/lease.h"

namespace gsync::leases {

namespace {
// Complete epochs kept for gsyncctl (a job may run thousands).
constexpr size_t kKeepEpochs = 4;
}  // namespace

Status LeaseBook::lease(int rank, uint64_t epoch, uint64_t batches, uint64_t clock, uint32_t* out) {
  if (batches == 0 || batches > proto::kMaxLeaseBatches)
    return Status(GSYNC_ERR_INVALID, fmt::format("rank {}: epoch {} of {} batches (1 to {})", rank,
                                                 epoch, batches, proto::kMaxLeaseBatches));
  auto it = epochs_.find(epoch);
  if (it == epochs_.end()) {
    if (epoch < forgotten_below_) {  // complete long ago
      *out = proto::kLeaseEnd;
      return Status::ok();
    }
    if (epochs_.size() >= proto::kMaxOpenEpochs)
      return Status(GSYNC_ERR_INVALID,
                    fmt::format("rank {} begins epoch {}, but {} epochs are open (begun and not "
                                "complete); an epoch ends when every batch is settled",
                                rank, epoch, epochs_.size()));
    it = epochs_.emplace(epoch, Epoch{}).first;
    it->second.batches = batches;
    it->second.settled.assign(batches, false);
    prune();
  }
  Epoch& e = it->second;
  if (e.batches != batches)
    return Status(GSYNC_ERR_MISMATCH,
                  fmt::format("rank {} leases from epoch {} of {} batches, but the epoch was "
                              "begun with {}",
                              rank, epoch, batches, e.batches));
  uint32_t id;
  if (!e.back.empty()) {
    id = e.back.front();
    e.back.pop_front();
  } else if (e.next < e.batches) {
    id = static_cast<uint32_t>(e.next++);
  } else {
    *out = e.out.empty() ? proto::kLeaseEnd : kLeaseHold;
    for (const auto& [held, l] : e.out)
      if (l.clock >= clock) *out = proto::kLeaseWait;
    return Status::ok();
  }
  e.out[id] = Lease{rank, clock};
  e.leased++;
  *out = id;
  return Status::ok();
}

size_t LeaseBook::settle(int rank, uint64_t clock) {
  size_t n = 0;
  for (auto& [num, e] : epochs_) {
    for (auto it = e.out.begin(); it != e.out.end();) {
      if (it->second.rank != rank || it->second.clock != clock) {
        ++it;
        continue;
      }
      // Only a leased batch gets here, and it leaves `out` now: settled
      // once. A second would be a bug in this file; say so loudly.
      if (e.settled[it->first])
        spdlog::error("lease book: epoch {} batch {} settled twice (rank {} clock {})", num,
                      it->first, rank, clock);
      e.settled[it->first] = true;
      e.n_settled++;
      it = e.out.erase(it);
      n++;
    }
  }
  prune();
  return n;
}

size_t LeaseBook::drop(int rank, uint64_t from_clock) {
  size_t n = 0;
  for (auto& [num, e] : epochs_) {
    for (auto it = e.out.begin(); it != e.out.end();) {
      if (it->second.rank != rank || it->second.clock < from_clock) {
        ++it;
        continue;
      }
      e.back.push_back(it->first);
      e.reassigned++;
      it = e.out.erase(it);
      n++;
    }
  }
  return n;
}

void LeaseBook::prune() {
  while (epochs_.size() > kKeepEpochs && epochs_.begin()->second.complete()) {
    forgotten_below_ = epochs_.begin()->first + 1;
    epochs_.erase(epochs_.begin());
  }
}

std::vector<EpochReport> LeaseBook::report() const {
  std::vector<EpochReport> out;
  for (const auto& [num, e] : epochs_) {
    EpochReport r;
    r.epoch = num;
    r.batches = e.batches;
    r.leased = e.leased;
    r.outstanding = e.out.size();
    r.settled = e.n_settled;
    r.reassigned = e.reassigned;
    r.free = e.batches - e.n_settled - e.out.size();
    out.push_back(r);
  }
  return out;
}

uint64_t LeaseBook::outstanding() const {
  uint64_t n = 0;
  for (const auto& [num, e] : epochs_) n += e.out.size();
  return n;
}

}  // namespace gsync::leases
