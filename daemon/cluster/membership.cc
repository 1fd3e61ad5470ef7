// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/membership.h"

#include <algorithm>

namespace gsync::cluster {

void Membership::set_local(const std::string& job, int world, std::vector<int> ranks) {
  local_[job] = {world, std::move(ranks)};
}

void Membership::clear_local(const std::string& job) { local_.erase(job); }

void Membership::forget(const std::string& job) {
  local_.erase(job);
  remote_.erase(job);
  tuning_.erase(job);
}

std::vector<std::string> Membership::names() const {
  std::vector<std::string> out;
  for (const auto& [job, l] : local_) out.push_back(job);
  for (const auto& [job, r] : remote_)
    if (!local_.count(job)) out.push_back(job);
  return out;
}

void Membership::set_remote(const std::string& job, int host, int world, std::vector<int> ranks) {
  auto& r = remote_[job];
  r.world = world;
  r.hosts[host] = std::move(ranks);
}

void Membership::clear_remote(const std::string& job, int host) {
  if (auto it = remote_.find(job); it != remote_.end()) it->second.hosts.erase(host);
  if (auto it = tuning_.find(job); it != tuning_.end()) it->second.erase(host);
}

uint32_t Membership::tuning_of(const std::string& job, int host) const {
  auto it = tuning_.find(job);
  if (it == tuning_.end()) return 0;
  auto h = it->second.find(host);
  return h == it->second.end() ? 0 : h->second;
}

bool Membership::tuning_agrees(const std::string& job) const {
  auto it = tuning_.find(job);
  if (it == tuning_.end()) return true;
  for (const auto& [host, digest] : it->second)
    if (digest != it->second.begin()->second) return false;
  return true;
}

std::vector<std::string> Membership::remove_host(int host) {
  std::vector<std::string> jobs;
  for (auto& [job, r] : remote_)
    if (r.hosts.erase(host)) jobs.push_back(job);
  for (auto& [job, t] : tuning_) t.erase(host);
  return jobs;
}

bool Membership::ready(const std::string& job, int world) const {
  auto l = local_.find(job);
  if (l == local_.end() || l->second.first != world) return false;
  std::vector<bool> seen(static_cast<size_t>(world), false);
  size_t n = 0;
  auto take = [&](const std::vector<int>& ranks) {
    for (int r : ranks) {
      if (r < 0 || r >= world || seen[size_t(r)]) return false;
      seen[size_t(r)] = true;
      n++;
    }
    return true;
  };
  if (!take(l->second.second)) return false;
  if (auto it = remote_.find(job); it != remote_.end()) {
    if (it->second.world != world) return false;
    for (const auto& [host, ranks] : it->second.hosts)
      if (!take(ranks)) return false;
  }
  return n == static_cast<size_t>(world);
}

std::string Membership::missing(const std::string& job, int world,
                                const std::vector<int>& also_seen, std::vector<int>* hosts) const {
  std::vector<bool> seen(static_cast<size_t>(world), false);
  auto mark = [&](const std::vector<int>& ranks) {
    for (int r : ranks)
      if (r >= 0 && r < world) seen[size_t(r)] = true;
  };
  mark(also_seen);
  if (auto l = local_.find(job); l != local_.end()) mark(l->second.second);
  if (auto it = remote_.find(job); it != remote_.end()) {
    for (const auto& [host, ranks] : it->second.hosts) {
      mark(ranks);
      hosts->push_back(host);
    }
  }
  std::string out;
  for (int r = 0; r < world; r++)
    if (!seen[size_t(r)]) {
      if (!out.empty()) out += ' ';
      out += std::to_string(r);
    }
  return out;
}

std::vector<int> Membership::participants(const std::string& job) const {
  std::vector<int> hosts = {self_};
  if (auto it = remote_.find(job); it != remote_.end())
    for (const auto& [host, ranks] : it->second.hosts) hosts.push_back(host);
  std::sort(hosts.begin(), hosts.end());
  return hosts;
}

int Membership::host_of(const std::string& job, int rank) const {
  if (auto l = local_.find(job); l != local_.end()) {
    const auto& r = l->second.second;
    if (std::find(r.begin(), r.end(), rank) != r.end()) return self_;
  }
  if (auto it = remote_.find(job); it != remote_.end())
    for (const auto& [host, ranks] : it->second.hosts)
      if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) return host;
  return -1;
}

}  // namespace gsync::cluster
