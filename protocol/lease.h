// SPDX-License-Identifier: Apache-2.0
//
// Batch leases (docs/fault-tolerance.md, "Batch leases"), written once for
// both sides: a parameter-server job may have the daemons hand out its
// data. An epoch is the batch ids 0 .. batches-1; a rank leases the next
// for its clock c, and the lease is settled when the rank's pushes of
// clock c (every declared key) are applied. A rank that dies or closes has
// its unsettled leases handed to the next ranks that ask, so every batch is
// trained on exactly once per epoch.
//
// A lease's submission: opcode kLease, key the epoch, step the clock, count
// the epoch's batches; no tensor. Its completion's value is the batch id,
// or one of the two answers below.
#pragma once

#include <cstdint>

namespace gsync::proto {

// No batch is free now but some are leased and not settled (one may still
// come back from a rank that dies): take a step without data (a push of
// weight 0) so the others' clocks go on, and ask again at the next clock.
constexpr uint32_t kLeaseWait = 0xfffffffeu;
// Every batch of the epoch is settled: the epoch is over for this rank.
constexpr uint32_t kLeaseEnd = 0xffffffffu;
// The most batches an epoch may have (its ledger keeps a bit per batch);
// every id is below the two answers.
constexpr uint64_t kMaxLeaseBatches = uint64_t{1} << 28;
// The most epochs of a job open at once (begun, not complete).
constexpr size_t kMaxOpenEpochs = 64;

}  // namespace gsync::proto
