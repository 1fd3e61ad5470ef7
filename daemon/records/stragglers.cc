// SPDX-License-Identifier: Apache-2.0
#include "daemon/records/stragglers.h"

#include <algorithm>

namespace gsync {

namespace {
// The median and the 99th percentile of v (not empty), which it reorders:
// two selections, not a sort.
void median_p99(std::vector<float>& v, double* median, double* p99) {
  const size_t m = v.size() / 2, p = std::min(v.size() - 1, v.size() * 99 / 100);
  std::nth_element(v.begin(), v.begin() + long(m), v.end());
  *median = v[m];
  // p >= m: the 99th is among the elements after the median.
  std::nth_element(v.begin() + long(m), v.begin() + long(p), v.end());
  *p99 = v[p];
}
}  // namespace

void StragglerBook::add(std::span<const RankArrival> arrivals) {
  if (arrivals.size() < 2) return;  // one rank is never behind another
  if (ranks_ != arrivals.size()) {  // the first op (a job's local ranks do not change)
    ranks_ = arrivals.size();
    lag_.assign(kWindow * ranks_, 0.0f);
    last_.assign(kWindow, 0);
    next_ = ops_ = 0;
  }
  Clock::time_point first = arrivals[0].at;
  size_t last = 0;
  for (size_t l = 1; l < ranks_; l++) {
    first = std::min(first, arrivals[l].at);
    if (arrivals[l].at > arrivals[last].at) last = l;
  }
  float* row = &lag_[next_ * ranks_];
  for (size_t l = 0; l < ranks_; l++)
    row[l] = float(std::chrono::duration<double>(arrivals[l].at - first).count());
  last_[next_] = uint16_t(last);
  next_ = (next_ + 1) % kWindow;
  ops_ = std::min(ops_ + 1, kWindow);
  seen_++;
}

std::vector<RankLag> StragglerBook::lags() const {
  std::vector<RankLag> out;
  std::vector<float> v;
  for (size_t l = 0; l < ranks_ && ops_ > 0; l++) {
    v.clear();
    size_t last = 0;
    for (size_t s = 0; s < ops_; s++) {
      v.push_back(lag_[s * ranks_ + l]);
      last += last_[s] == l;
    }
    RankLag r;
    median_p99(v, &r.median_s, &r.p99_s);
    r.last_share = double(last) / double(ops_);
    out.push_back(r);
  }
  return out;
}

int StragglerBook::straggler(const std::vector<RankLag>& lags) const {
  if (ops_ < kMinOps) return -1;
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
    HostLag l;
    l.host = h;
    median_p99(v, &l.median_s, &l.p99_s);
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
