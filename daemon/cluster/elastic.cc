// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/elastic.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace gsync::cluster {

int ElasticWorldView::world_size() const {
  int n = 0;
  for (const auto& h : hosts) n += h.local_size;
  return n;
}

int ElasticWorldView::offset_of(int host) const {
  int n = 0;
  for (const auto& h : hosts) {
    if (h.host == host) return n;
    n += h.local_size;
  }
  return -1;
}

const ElasticJobState* ElasticBook::find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

bool ElasticBook::alive(const ElasticJobState& j, int host,
                        const std::function<bool(int)>& up) const {
  if (host == self_) return j.local_size > 0;
  return j.joined.count(host) > 0 && up(host);
}

int ElasticBook::leader(const ElasticJobState& j, const std::function<bool(int)>& up) const {
  if (j.world.formed() && !j.world.failed)
    for (const auto& h : j.world.hosts)
      if (alive(j, h.host, up)) return h.host;  // in host order: the lowest
  // No world yet, or none of its hosts is left: the lowest that joined.
  int lowest = j.local_size > 0 ? self_ : -1;
  for (const auto& [h, n] : j.joined)
    if (up(h) && (lowest < 0 || h < lowest)) lowest = h;
  return lowest;
}

std::optional<ElasticWorldView> ElasticBook::propose(
    const std::string& id, const std::function<bool(int)>& up,
    const std::function<std::string(int)>& name) const {
  const ElasticJobState* j = find(id);
  if (!j || j->world.failed || j->local_size == 0 || leader(*j, up) != self_) return std::nullopt;
  // The world's hosts that are still there keep their places; joined hosts
  // fill what max_hosts leaves, lowest first.
  std::vector<int> keep, extra;
  for (const auto& h : j->world.hosts)
    if (alive(*j, h.host, up)) keep.push_back(h.host);
  std::set<int> candidates(j->local_size > 0 ? std::set<int>{self_} : std::set<int>{});
  for (const auto& [h, n] : j->joined)
    if (up(h)) candidates.insert(h);
  for (int h : candidates)
    if (std::find(keep.begin(), keep.end(), h) == keep.end()) extra.push_back(h);
  std::vector<int> hosts = keep;
  for (int h : extra)
    if (j->max_hosts == 0 || static_cast<int>(hosts.size()) < j->max_hosts) hosts.push_back(h);
  std::sort(hosts.begin(), hosts.end());
  ElasticWorldView w;
  for (int h : hosts)
    w.hosts.push_back({h, h == self_ ? j->local_size : j->joined.at(h)});
  auto same = [](const ElasticMember& a, const ElasticMember& b) {
    return a.host == b.host && a.local_size == b.local_size;
  };
  if (j->world.formed() && w.hosts.size() == j->world.hosts.size() &&
      std::equal(w.hosts.begin(), w.hosts.end(), j->world.hosts.begin(), same))
    return std::nullopt;
  auto names = [&](const std::vector<int>& hs) {
    std::string out;
    for (int h : hs) out += (out.empty() ? "" : ", ") + name(h);
    return out.empty() ? std::string("none") : out;
  };
  w.epoch = epoch_of(j->counter + 1, self_);
  std::vector<int> left, came;
  for (const auto& h : j->world.hosts)
    if (std::find(hosts.begin(), hosts.end(), h.host) == hosts.end()) left.push_back(h.host);
  for (int h : hosts)
    if (!j->world.has(h)) came.push_back(h);
  if (static_cast<int>(hosts.size()) < j->min_hosts) {
    if (!j->world.formed()) return std::nullopt;  // a first world waits for enough hosts
    w.failed = true;
    w.hosts.clear();
    // Who left comes first: every error of the ended job carries this text,
    // and the ranks of the step in flight learn from it which host it was.
    w.reason = fmt::format("{} left: only {} host{} left ({}), below the job's min_hosts {}",
                           names(left), hosts.size(), hosts.size() == 1 ? " is" : "s are",
                           names(hosts), j->min_hosts);
    return w;
  }
  if (!j->world.formed())
    w.reason = fmt::format("formed on {}", names(hosts));
  else if (!left.empty() && !came.empty())
    w.reason = fmt::format("{} left and {} joined", names(left), names(came));
  else if (!left.empty())
    w.reason = fmt::format("{} left", names(left));
  else if (!came.empty())
    w.reason = fmt::format("{} joined", names(came));
  else
    w.reason = "a host's ranks changed";
  return w;
}

bool ElasticBook::adopt(const std::string& id, ElasticWorldView w) {
  ElasticJobState& j = jobs_[id];
  if (w.epoch <= j.world.epoch || j.world.failed) return false;
  j.counter = std::max(j.counter, epoch_counter(w.epoch));
  j.world = std::move(w);
  return true;
}

std::vector<std::string> ElasticBook::host_gone(int host) {
  std::vector<std::string> out;
  for (auto& [id, j] : jobs_)
    if (j.joined.erase(host) || j.world.has(host)) out.push_back(id);
  return out;
}

void ElasticBook::forget_ended(const std::string& id) {
  auto it = jobs_.find(id);
  if (it != jobs_.end() && it->second.world.failed) jobs_.erase(it);
}

std::string ElasticBook::world_name(const std::string& job, uint64_t epoch) {
  return fmt::format("{}#{:x}", job, epoch);
}

bool ElasticBook::parse_world_name(const std::string& name, std::string* job, uint64_t* epoch) {
  const size_t at = name.rfind('#');
  if (at == std::string::npos || at == 0 || at + 1 == name.size() || name.size() - at - 1 > 16)
    return false;
  uint64_t v = 0;
  for (size_t i = at + 1; i < name.size(); i++) {
    const char c = name[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | uint64_t(d);
  }
  if (v == 0) return false;
  *job = name.substr(0, at);
  *epoch = v;
  return true;
}

}  // namespace gsync::cluster
