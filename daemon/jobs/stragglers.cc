// SPDX-License-Identifier: Apache-2.0
#include "daemon/jobs/stragglers.h"

#include <algorithm>

namespace gsync {

void StragglerBook::add(const std::vector<Clock::time_point>& arrivals) {
  if (arrivals.size() < 2) return;  // one rank is never behind another
  const auto first = *std::min_element(arrivals.begin(), arrivals.end());
  std::vector<double> lag;
  lag.reserve(arrivals.size());
  for (const auto& a : arrivals) lag.push_back(std::chrono::duration<double>(a - first).count());
  if (ops_.size() >= kWindow) ops_.pop_front();
  ops_.push_back(std::move(lag));
}

std::vector<RankLag> StragglerBook::lags() const {
  std::vector<RankLag> out;
  if (ops_.empty()) return out;
  const size_t ranks = ops_.front().size();
  std::vector<size_t> last(ranks, 0);
  for (const auto& op : ops_) {
    if (op.size() != ranks) continue;
    last[size_t(std::max_element(op.begin(), op.end()) - op.begin())]++;
  }
  for (size_t l = 0; l < ranks; l++) {
    std::vector<double> v;
    for (const auto& op : ops_)
      if (op.size() == ranks) v.push_back(op[l]);
    std::sort(v.begin(), v.end());
    RankLag r;
    r.median_s = v[v.size() / 2];
    r.p99_s = v[std::min(v.size() - 1, v.size() * 99 / 100)];
    r.last_share = double(last[l]) / double(ops_.size());
    out.push_back(r);
  }
  return out;
}

int StragglerBook::straggler(const std::vector<RankLag>& lags) const {
  if (ops_.size() < kMinOps) return -1;
  for (size_t l = 0; l < lags.size(); l++)
    if (lags[l].last_share > kWarnShare && lags[l].median_s > kWarnLagS) return int(l);
  return -1;
}

bool StragglerBook::may_warn(int l, Clock::time_point now) {
  if (l == warned_rank_ && now - warned_ < std::chrono::minutes(1)) return false;
  warned_rank_ = l;
  warned_ = now;
  return true;
}

}  // namespace gsync
