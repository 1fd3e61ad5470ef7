// SPDX-License-Identifier: Apache-2.0
//
// The anomaly guard's memory (docs/fault-tolerance.md, "The anomaly
// guard"), for the allreduce's guard stage (pipeline/guard_stage.h) and the
// parameter server's (ps/guard.cc): per (job, key), the norms of the last `window` reduced
// gradients that passed. A reduced gradient is an anomaly when its norm is
// not finite (a NaN or an Inf in it), or, once at least kMinSamples norms
// are known, when it is above mean + sigmas x deviation of those norms.
// The deviation has a floor of 1% of the mean: gradients whose norm barely
// moves would otherwise flag the first ordinary wobble. An anomaly's norm
// is not remembered.
//
// Every host reduces to the same bits and sees a key's ops in the same
// order, so every host's book decides the same: the ranks of every host
// get the same verdict without a message between the hosts. The sums run
// in double in a fixed order (guard_stage.h, ps/guard.cc). Event thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "daemon/core/status.h"
#include "protocol/guard.h"

namespace gsync {

class GuardBook {
 public:
  static constexpr size_t kMinSamples = 8;

  // The verdict on the reduced gradient of job's key at step: ok, or
  // GSYNC_ERR_ANOMALY with the norm, the threshold and the step (what
  // names the op goes in front).
  Status check(const std::string& job, uint64_t key, uint64_t step, const proto::Guard& g,
               double norm);
  void job_closed(const std::string& job);
  // Steps checked and anomalies found, all keys of the job.
  std::pair<uint64_t, uint64_t> counts(const std::string& job) const;

 private:
  struct Key {
    std::deque<double> norms;
    uint64_t checked = 0, anomalies = 0;
  };
  std::map<std::pair<std::string, uint64_t>, Key> keys_;
};

}  // namespace gsync
