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
  seen_++;
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

void HostLagBook::add(const HostArrivals& a, int self, int hosts) {
  if (a.self() == Clock::time_point{} || a.peers() == 0 || self < 0 || self >= hosts) return;
  if (hosts_ != hosts) {  // the first op (a cluster's hosts do not change)
    hosts_ = hosts;
    lag_.assign(StragglerBook::kWindow * size_t(hosts), -1.0f);
    last_.assign(StragglerBook::kWindow, -1);
    next_ = ops_ = 0;
  }
  Clock::time_point first = a.self(), last = a.self();
  int last_host = self;
  for (int i = 0; i < a.peers(); i++) {
    first = std::min(first, a.at(i));
    if (a.at(i) > last) last = a.at(i), last_host = a.peer(i);
  }
  float* row = &lag_[next_ * size_t(hosts_)];
  std::fill(row, row + hosts_, -1.0f);
  row[self] = float(std::chrono::duration<double>(a.self() - first).count());
  for (int i = 0; i < a.peers(); i++)
    if (a.peer(i) >= 0 && a.peer(i) < hosts_)
      row[a.peer(i)] = float(std::chrono::duration<double>(a.at(i) - first).count());
  last_[next_] = int16_t(last_host);
  next_ = (next_ + 1) % StragglerBook::kWindow;
  ops_ = std::min(ops_ + 1, StragglerBook::kWindow);
  seen_++;
}

std::vector<HostLag> HostLagBook::lags() const {
  std::vector<HostLag> out;
  std::vector<float> v;
  for (int h = 0; h < hosts_; h++) {
    v.clear();
    size_t last = 0;
    for (size_t s = 0; s < ops_; s++) {
      const float lag = lag_[s * size_t(hosts_) + size_t(h)];
      if (lag < 0) continue;
      v.push_back(lag);
      last += last_[s] == h;
    }
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    HostLag l;
    l.host = h;
    l.median_s = v[v.size() / 2];
    l.p99_s = v[std::min(v.size() - 1, v.size() * 99 / 100)];
    l.last_share = double(last) / double(v.size());
    out.push_back(l);
  }
  return out;
}

int HostLagBook::straggler(const std::vector<HostLag>& lags) const {
  if (ops_ < StragglerBook::kMinOps) return -1;
  for (size_t i = 0; i < lags.size(); i++)
    if (lags[i].last_share > StragglerBook::kWarnShare &&
        lags[i].median_s > StragglerBook::kWarnLagS)
      return int(i);
  return -1;
}

bool HostLagBook::may_warn(int host, Clock::time_point now) {
  if (host == warned_host_ && now - warned_ < std::chrono::minutes(1)) return false;
  warned_host_ = host;
  warned_ = now;
  return true;
}

}  // namespace gsync
