// SPDX-License-Identifier: Apache-2.0
//
// When an op of a job may start: the seam where the sync modes differ. BSP
// (bulk synchronous): an op starts once every local rank of the job has
// submitted it; across hosts the cross-host stage then waits for every
// other host's part, so every rank ends each step with the same sum. The
// parameter server's ASP and SSP are not here: they decide on the serving
// host, when a shard applies a push and answers a pull (ps/param_server.h).
#pragma once

namespace gsync {

struct Job;
namespace ops {
class Op;
}

class SyncPolicy {
 public:
  virtual ~SyncPolicy() = default;
  virtual const char* name() const = 0;
  // All the local submissions the op needs to start are in.
  virtual bool ready(const Job& job, const ops::Op& op) const = 0;
};

class BspPolicy final : public SyncPolicy {
 public:
  const char* name() const override { return "bsp"; }
  bool ready(const Job& job, const ops::Op& op) const override;
};

}  // namespace gsync
