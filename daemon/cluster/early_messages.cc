// SPDX-License-Identifier: Apache-2.0
#include "daemon/cluster/early_messages.h"

#include <algorithm>

namespace gsync::cluster {

bool EarlyMessages::hold(const Key& key, int peer, std::string_view msg, Clock::time_point at,
                         Clock::time_point expires) {
  if (msg.empty()) return true;
  if (messages_ + 1 > max_messages_ || bytes_ + msg.size() > max_bytes_) return false;
  auto it = entries_.find(key);
  if (it == entries_.end())
    it = entries_.emplace(Stored{key.owner, std::string(key.job), key.a, key.b}, Entry{}).first;
  Entry& e = it->second;
  e.expires = std::max(e.expires, expires);
  auto same = std::find_if(e.held.begin(), e.held.end(), [&](const Held& h) {
    return h.peer == peer && h.bytes[0] == msg[0];
  });
  if (same != e.held.end()) {
    bytes_ -= same->bytes.size();
    messages_--;
    e.held.erase(same);
  }
  e.held.push_back({peer, std::string(msg), at});
  bytes_ += msg.size();
  messages_++;
  return true;
}

std::vector<EarlyMessages::Held> EarlyMessages::take(const Key& key) {
  auto it = entries_.find(key);
  return it == entries_.end() ? std::vector<Held>{} : erase(it);
}

std::vector<EarlyMessages::Held> EarlyMessages::erase(Entries::iterator it) {
  std::vector<Held> held = std::move(it->second.held);
  for (const Held& h : held) bytes_ -= h.bytes.size();
  messages_ -= held.size();
  entries_.erase(it);
  return held;
}

void EarlyMessages::drop_job(const CrossHostService* owner, std::string_view job) {
  for (auto it = entries_.lower_bound(Key{owner, job, 0, 0});
       it != entries_.end() && it->first.owner == owner && it->first.job == job;)
    erase(it++);
}

void EarlyMessages::drop_owner(const CrossHostService* owner) {
  for (auto it = entries_.begin(); it != entries_.end();)
    if (it->first.owner == owner)
      erase(it++);
    else
      ++it;
}

size_t EarlyMessages::expire(Clock::time_point now) {
  size_t dropped = 0;
  for (auto it = entries_.begin(); it != entries_.end();)
    if (it->second.expires < now)
      dropped += erase(it++).size();
    else
      ++it;
  return dropped;
}

}  // namespace gsync::cluster
