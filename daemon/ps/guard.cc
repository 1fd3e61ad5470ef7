// SPDX-License-Identifier: Apache-2.0
//
// The parameter server's anomaly guard (docs/fault-tolerance.md, "The
// anomaly guard"), for bsp keys of a job with the guard on. Each server
// applies a clock's update to its shard as the pushes land (server.h:
// keeping the state it changes, and summing the squares of the gradient),
// then, before any answer, sends its sum to every other server of the key
// (PsNorm). Once a server has every shard's sum it adds them in
// participant order, takes the square root and asks the key's book
// (core/guard_book.h) for the verdict: every server has the same sums and
// the same history, so all decide alike. An anomaly rolls the shard back
// to the state before the clock, from memory; the clock passes without an
// update. Then the clock's answers go.
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/ps/service_key.h"

namespace gsync::ps {

void Service::on_clock_applied(Key& k) {
  const uint64_t clock = k.server->bsp_clock() - 1;  // the one just applied
  k.verdict_pending = true;
  k.verdict_clock = clock;
  auto& mine = k.norms[clock];
  mine.resize(k.hosts.size(), {false, 0.0});
  mine[size_t(k.self)] = {true, k.server->clock_sum_squares()};
  PsNorm m;
  cluster::set_field(m.job, sizeof m.job, k.job);
  m.key = k.key;
  m.clock = clock;
  m.sum_squares = k.server->clock_sum_squares();
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
  auto& at = k->norms[m.clock];
  at.resize(k->hosts.size(), {false, 0.0});
  at[size_t(p)] = {true, m.sum_squares};
  if (k->verdict_pending && k->verdict_clock == m.clock) try_verdict(*k);
}

void Service::try_verdict(Key& k) {
  auto it = k.norms.find(k.verdict_clock);
  if (it == k.norms.end()) return;
  double total = 0;
  for (const auto& [in, s] : it->second) {
    if (!in) return;  // a shard's sum is still on its way
    total += s;
  }
  const uint64_t clock = k.verdict_clock;
  k.norms.erase(it);
  k.verdict_pending = false;
  // A clock without data (every push weighed 0) changed nothing; its norm
  // of 0 would only drag the rolling mean down.
  Status st = k.server->last_clock_empty()
                  ? Status::ok()
                  : guards_.check(k.job, k.key, clock, k.guard, std::sqrt(total));
  if (!st) {
    const auto t0 = std::chrono::steady_clock::now();
    k.server->rollback();
    if (k.dtype != proto::DType::kF32) k.server->read(k.staging_slot(k.self));
    k.last_rollback_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    k.anomalies++;
    k.last_anomaly = st.message();
    spdlog::warn("{}: {}; the clock's update is not applied (this shard rolled back in "
                 "{:.1f} ms)",
                 k.describe(), st.message(), 1e3 * k.last_rollback_s);
  }
  maybe_checkpoint(k);  // between clocks: the state the verdict left
  answer_ready(k);
}

}  // namespace gsync::ps
