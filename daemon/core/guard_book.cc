// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/guard_book.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace gsync {

Status GuardBook::check(const std::string& job, uint64_t key, uint64_t step,
                        const proto::Guard& g, double norm) {
  Key& k = keys_[{job, key}];
  k.checked++;
  if (!std::isfinite(norm)) {
    k.anomalies++;
    return Status(GSYNC_ERR_ANOMALY,
                  fmt::format("anomaly at step {}: the reduced gradient holds a NaN or an Inf "
                              "(its norm is {})",
                              step, norm));
  }
  if (k.norms.size() >= kMinSamples) {
    double sum = 0, sq = 0;
    for (double n : k.norms) sum += n;
    const double mean = sum / double(k.norms.size());
    for (double n : k.norms) sq += (n - mean) * (n - mean);
    const double sd = std::sqrt(sq / double(k.norms.size()));
    const double threshold = mean + double(g.sigmas) * std::max(sd, 0.01 * mean);
    if (norm > threshold) {
      k.anomalies++;
      return Status(GSYNC_ERR_ANOMALY,
                    fmt::format("anomaly at step {}: the reduced gradient's norm {:.6g} is above "
                                "the threshold {:.6g} (mean {:.6g} + {} x deviation {:.6g} of "
                                "the last {} steps)",
                                step, norm, threshold, mean, g.sigmas, sd, k.norms.size()));
    }
  }
  k.norms.push_back(norm);
  while (k.norms.size() > g.window) k.norms.pop_front();
  return Status::ok();
}

void GuardBook::job_closed(const std::string& job) {
  for (auto it = keys_.lower_bound({job, 0}); it != keys_.end() && it->first.first == job;)
    it = keys_.erase(it);
}

std::pair<uint64_t, uint64_t> GuardBook::counts(const std::string& job) const {
  std::pair<uint64_t, uint64_t> c{0, 0};
  for (auto it = keys_.lower_bound({job, 0}); it != keys_.end() && it->first.first == job; ++it) {
    c.first += it->second.checked;
    c.second += it->second.anomalies;
  }
  return c;
}

}  // namespace gsync
