// SPDX-License-Identifier: Apache-2.0
//
// The parameter server's anomaly guard (docs/fault-tolerance.md, "The
// anomaly guard"), for bsp keys of a job with the guard on. Each server
// applies a clock's update to its shard as the pushes land (param_server.h:
// keeping the state it changes, and summing the squares of the gradient),
// then, before any answer, sends its sum to every other server of the key
// (PsNorm). Once a server has every shard's sum it adds them in
// participant order, takes the square root and asks the key's book
// (core/guard_book.h) for the verdict: every server has the same sums and
// the same history, so all decide alike. An anomaly rolls the shard back
// to the state before the clock, from memory; the clock passes without an
// update. Then the clock's answers go.
#include <chrono>
#include <climits>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/ps/service_key.h"
#include "daemon/reduce/nonfinite.h"

namespace gsync::ps {

namespace {
// The rolled-back clocks a key remembers for its requests' answers.
constexpr size_t kRolledBackKept = 64;
}  // namespace

// A clock's norms as they come. A participant whose shard of the key is
// empty (a key of fewer than 16 elements a host) applies nothing and sends
// none: its sum is 0, known from the start.
std::vector<Service::Norm>& Service::norms_of(Key& k, uint64_t clock) {
  auto& at = k.norms[clock];
  if (at.empty()) {
    at.resize(k.hosts.size());
    for (size_t p = 0; p < at.size(); p++) at[p].in = k.shard_bytes(int(p)) == 0;
  }
  return at;
}

void Service::on_clock_applied(Key& k) {
  const uint64_t clock = k.server->bsp_clock() - 1;  // the one just applied
  k.verdict_pending = true;
  k.verdict_clock = clock;
  PsNorm m;
  cluster::set_field(m.job, sizeof m.job, k.job);
  m.key = k.key;
  m.clock = clock;
  m.sum_squares = k.server->clock_sum_squares();
  const int64_t marked = k.server->clock_marked_rank();
  m.marked = marked >= 0 && marked < INT32_MAX ? static_cast<int32_t>(marked + 1) : 0;
  norms_of(k, clock)[size_t(k.self)] = {true, m.sum_squares, marked};
  for (int h : k.hosts)
    if (h != self()) cp_->send(h, cluster::as_bytes(m));
  try_verdict(k);
}

void Service::on_norm(int peer, const PsNorm& m) {
  Key* k = find(cluster::field(m.job, sizeof m.job), m.key);
  const int p = k ? k->participant_of(peer) : -1;
  if (!k || p < 0 || !k->guard.on) {
    spdlog::error("host {}: a gradient norm for job {} key {} clock {} that no guarded key "
                  "here expects; ignored",
                  host_id(peer), cluster::field(m.job, sizeof m.job), m.key, m.clock);
    return;
  }
  // A peer is at most one clock ahead of this server (bsp): anything else
  // is not a norm this key will ask for.
  const uint64_t here = k->server->bsp_clock();
  if (m.clock + 1 < here || m.clock > here) {
    spdlog::error("{}: host {} sent the norm of clock {}; this server is at clock {}; ignored",
                  k->describe(), host_id(peer), m.clock, here);
    return;
  }
  norms_of(*k, m.clock)[size_t(p)] = {true, m.sum_squares, int64_t{m.marked} - 1};
  if (k->verdict_pending && k->verdict_clock == m.clock) try_verdict(*k);
}

void Service::try_verdict(Key& k) {
  auto it = k.norms.find(k.verdict_clock);
  if (it == k.norms.end()) return;
  double total = 0;
  int64_t marked = -1;  // the first participant's mark: its shard comes first in the tensor
  for (const Norm& n : it->second) {
    if (!n.in) return;  // a shard's sum is still on its way
    total += n.sum_squares;
    if (marked < 0) marked = n.marked;
  }
  const uint64_t clock = k.verdict_clock;
  k.norms.erase(it);
  k.verdict_pending = false;
  // A clock without data (every push weighed 0) changed nothing; its norm
  // of 0 would only drag the rolling mean down.
  const double norm = std::sqrt(total);
  Status st = k.server->last_clock_empty() ? Status::ok()
                                           : guards_.check(k.job, k.key, clock, k.guard, norm);
  if (!st) {
    const auto t0 = std::chrono::steady_clock::now();
    k.server->rollback();
    if (k.dtype != proto::DType::kF32) k.server->read(k.staging_slot(k.self));
    k.last_rollback_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    k.anomalies++;
    k.last_anomaly =
        st.message() + (std::isfinite(norm) ? std::string() : reduce::nonfinite_origin(marked));
    k.rolled_back[clock] = fmt::format("{}: clock {} rolled back: {}", k.describe(), clock,
                                       k.last_anomaly);
    while (k.rolled_back.size() > kRolledBackKept) k.rolled_back.erase(k.rolled_back.begin());
    spdlog::warn("{}; the clock's update is not applied (this shard rolled back in {:.1f} ms)",
                 k.rolled_back[clock], 1e3 * k.last_rollback_s);
  }
  maybe_checkpoint(k);  // between clocks: the state the verdict left
  answer_ready(k);
}

}  // namespace gsync::ps
