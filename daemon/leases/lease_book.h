// SPDX-License-Identifier: Apache-2.0
//
// The ledger of one job's batch leases (docs/fault-tolerance.md, "Batch
// leases"), kept by one daemon of the job, its keeper (lease_service.h).
// An epoch's batch ids 0 .. batches-1 go out in order; a batch that comes
// back (its rank died before its pushes were taken) goes out again first.
// A batch is in one of three states: free, leased (to a rank, for a clock)
// or settled; it is settled at most once, and only from leased, so every
// batch of an epoch is trained on exactly once. Event thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "daemon/core/status.h"

namespace gsync::leases {

// lease()'s third answer, never sent: no batch is free and every batch
// still out is leased for an earlier clock than the asker's; their pushes
// were applied (or their ranks left) and their settlements are on the way,
// so the answer (a batch that comes back, or the end) waits for them. A
// kLeaseWait then would make this rank take a step the others, told the
// end a moment later, never take with it.
constexpr uint32_t kLeaseHold = 0xfffffffdu;

// gsyncctl jobs: one epoch's ledger.
struct EpochReport {
  uint64_t epoch = 0, batches = 0;
  uint64_t leased = 0;       // leases handed out (a reassigned batch counts again)
  uint64_t outstanding = 0;  // leased, not settled
  uint64_t settled = 0;
  uint64_t reassigned = 0;  // came back from a rank that left, to go out again
  uint64_t free = 0;        // not leased now (never, or back)
};

class LeaseBook {
 public:
  // A batch of epoch `epoch` (of `batches` ids) for `rank`'s clock `clock`:
  // its id, proto::kLeaseWait (none free; some leased for this clock or a
  // later one: their ranks train this clock), proto::kLeaseEnd (all
  // settled) or kLeaseHold (ask again after the next settle or drop) in
  // *out. An epoch's
  // batches are fixed by its first lease; a rank that says another number
  // is refused (GSYNC_ERR_MISMATCH) naming both.
  Status lease(int rank, uint64_t epoch, uint64_t batches, uint64_t clock, uint32_t* out);
  // rank's pushes of `clock` were applied: its leases for that clock are
  // settled. Returns how many.
  size_t settle(int rank, uint64_t clock);
  // rank left: its leases for clocks >= from_clock were never trained on
  // (their pushes were not taken) and go out again. Returns how many.
  size_t drop(int rank, uint64_t from_clock);

  std::vector<EpochReport> report() const;
  // Leases not settled, over every epoch.
  uint64_t outstanding() const;

 private:
  struct Lease {
    int rank = 0;
    uint64_t clock = 0;
  };
  struct Epoch {
    uint64_t batches = 0;
    uint64_t next = 0;              // ids below it have gone out at least once
    std::deque<uint32_t> back;      // came back: out again before `next`
    std::map<uint32_t, Lease> out;  // leased, not settled
    std::vector<bool> settled;      // by id
    uint64_t leased = 0, n_settled = 0, reassigned = 0;
    bool complete() const { return n_settled == batches; }
  };
  void prune();

  std::map<uint64_t, Epoch> epochs_;
  // Epochs below this one were complete and forgotten: they are over.
  uint64_t forgotten_below_ = 0;
};

}  // namespace gsync::leases
