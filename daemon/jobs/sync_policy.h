// SPDX-License-Identifier: Apache-2.0
//
// When an op of a job may start: the seam where the sync modes differ. BSP
// (bulk synchronous): an op starts once every local rank of the job has
// submitted it; across hosts the cross-host stage then waits for every
// other host's part, so every rank ends each step with the same sum. The
// parameter-server mode adds ASP and SSP here (a push applied as it
// arrives, a pull bounded by a staleness), which only change this answer.
#pragma once

namespace gsync {

struct Job;
struct JobOp;

class SyncPolicy {
 public:
  virtual ~SyncPolicy() = default;
  virtual const char* name() const = 0;
  // All the local submissions the op needs to start are in.
  virtual bool ready(const Job& job, const JobOp& op) const = 0;
};

class BspPolicy final : public SyncPolicy {
 public:
  const char* name() const override { return "bsp"; }
  bool ready(const Job& job, const JobOp& op) const override;
};

}  // namespace gsync
