// SPDX-License-Identifier: Apache-2.0
#include "daemon/pipeline/plan_cache.h"

#include <cstring>
#include <tuple>

#include <spdlog/spdlog.h>

namespace gsync::pipeline {

namespace {
auto tie_shape(const OpShape& s) {
  const proto::Compression& c = s.compress;
  uint32_t fraction = 0;  // by its bits: == on the shape compares the bits too
  std::memcpy(&fraction, &c.topk_fraction, sizeof fraction);
  return std::make_tuple(s.opcode, s.dtype, s.redop, s.count, s.root, c.codec, c.hops,
                         c.error_feedback, c.block, fraction);
}
}  // namespace

bool PlanKey::operator<(const PlanKey& o) const {
  return std::tie(job, key, epoch) < std::tie(o.job, o.key, o.epoch) ||
         (std::tie(job, key, epoch) == std::tie(o.job, o.key, o.epoch) &&
          tie_shape(shape) < tie_shape(o.shape));
}

PlanCache::~PlanCache() {
  // The daemon is going: nothing will write any more, the regions go with
  // the transport context.
  idle_.clear();
  by_key_.clear();
}

PlanLease PlanCache::lease(const PlanKey& key, const collective::PlanInputs& in, const Buffer& host,
                           Status* err) {
  PlanLease l;
  l.key = key;
  auto it = by_key_.find(key);
  if (it != by_key_.end() && !collective::plan_fits(*it->second->plan, in)) {
    drop_idle(it->second);  // built for other participants
    it = by_key_.end();
  }
  if (it != by_key_.end()) {
    l.plan = std::move(it->second->plan);
    idle_.erase(it->second);
    by_key_.erase(it);
    stats_.hits++;
  } else {
    l.plan = collective::build_plan(in);
    stats_.misses++;
  }
  if (Status st = engine_.prepare(*l.plan, host.ptr, host.owner); !st) {
    *err = st;
    evict(std::move(l.plan), nullptr);
    return PlanLease{};
  }
  leased_[l.plan.get()] = Leased{host.arena, false, key.job};
  return l;
}

void PlanCache::give_back(PlanLease lease, bool ok, std::function<void()> released) {
  if (!lease.plan) {
    if (released) released();
    return;
  }
  auto it = leased_.find(lease.plan.get());
  uint64_t arena = it == leased_.end() ? 0 : it->second.arena;
  bool gone = it == leased_.end() || it->second.arena_closed;
  if (it != leased_.end()) leased_.erase(it);
  if (!ok || gone || lease.key.epoch != epoch_) {
    evict(std::move(lease.plan), std::move(released));
    return;
  }
  idle_.push_front(Idle{lease.key, std::move(lease.plan), arena});
  by_key_.emplace(lease.key, idle_.begin());
  while (idle_.size() > kMaxIdle) drop_idle(std::prev(idle_.end()));
  if (released) released();
}

void PlanCache::evict(std::shared_ptr<collective::Plan> plan, std::function<void()> released) {
  stats_.evictions++;
  stats_.retiring++;
  collective::Plan& p = *plan;
  engine_.retire(p, [this, plan = std::move(plan), released = std::move(released)]() mutable {
    stats_.retiring--;
    plan.reset();
    if (released) released();
  });
}

void PlanCache::drop_idle(IdleList::iterator it) {
  auto range = by_key_.equal_range(it->key);
  for (auto k = range.first; k != range.second; ++k)
    if (k->second == it) {
      by_key_.erase(k);
      break;
    }
  auto plan = std::move(it->plan);
  idle_.erase(it);
  evict(std::move(plan), nullptr);
}

template <class Pred>
void PlanCache::evict_idle_if(Pred pred) {
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto next = std::next(it);
    if (pred(*it)) drop_idle(it);
    it = next;
  }
}

void PlanCache::arena_closed(uint64_t arena) {
  evict_idle_if([arena](const Idle& i) { return i.arena == arena; });
  // A leased plan over it is evicted when its op gives it back.
  for (auto& [plan, l] : leased_)
    if (l.arena == arena) l.arena_closed = true;
}

void PlanCache::job_closed(const std::string& job) {
  evict_idle_if([&job](const Idle& i) { return i.key.job == job; });
  for (auto it = tensors_.lower_bound({job, 0}); it != tensors_.end() && it->first.first == job;)
    it = tensors_.erase(it);
}

void PlanCache::epoch_changed(uint64_t epoch) {
  epoch_ = epoch;
  evict_idle_if([epoch](const Idle& i) { return i.key.epoch != epoch; });
}

TensorState& PlanCache::tensor(const std::string& job, uint64_t key) {
  return tensors_[{job, key}];
}

uint64_t PlanCache::error_feedback_bytes(const std::string& job) const {
  uint64_t bytes = 0;
  for (const auto& i : idle_)
    if (i.key.job == job) bytes += i.plan->residuals.size() * sizeof(float);
  for (const auto& [plan, l] : leased_)
    if (l.job == job) bytes += plan->residuals.size() * sizeof(float);
  return bytes;
}

PlanCacheStats PlanCache::stats() const {
  PlanCacheStats s = stats_;
  s.idle = idle_.size();
  s.leased = leased_.size();
  return s;
}

}  // namespace gsync::pipeline
