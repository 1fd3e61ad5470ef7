// SPDX-License-Identifier: Apache-2.0
//
// Shared by the schedule tests (tests/unit/test_schedule.cc,
// test_compress_schedule.cc): every host's schedule run against the others
// in one process, writes delivered in a random order and late, as a network
// would. The driver knows only the phases: a phase starts (its sends go out
// with the bytes the test makes for it), waits until every write it expects
// has landed, and ends (the test folds what arrived), as the engine does
// (daemon/collective/chunks.cc). What the bytes are is the test's.
#pragma once

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/collective/schedule.h"

namespace gsync::collective::sim {

inline std::vector<Participant> racks(const std::vector<int>& sizes) {
  std::vector<Participant> p;
  int host = 0;
  for (size_t r = 0; r < sizes.size(); r++)
    for (int i = 0; i < sizes[r]; i++)
      p.push_back({host++, std::string("r").append(std::to_string(r))});
  return p;
}

// One write on the wire.
struct Delivery {
  int to, from;
  size_t chunk;
  Xfer kind;
  uint8_t slot;
  std::vector<uint8_t> bytes;
};

struct Hooks {
  // Host h starts phase ph of chunk c: the bytes every send of it carries.
  std::function<std::vector<uint8_t>(int h, size_t c, const Phase& ph)> begin;
  // Everything ph expects has landed (one delivery per receive, in the
  // phase's receive order): fold it.
  std::function<void(int h, size_t c, const Phase& ph, std::vector<Delivery>& in)> end;
};

// Runs every host's schedule (s[h] is host h's) to the end. False on a
// deadlock: nothing in flight and some phase still waiting.
inline bool run(const std::vector<Schedule>& s, unsigned seed, const Hooks& hooks) {
  const int n = static_cast<int>(s.size());
  const size_t chunks = n ? s[0].chunks.size() : 0;
  struct State {
    size_t phase = 0;
    bool sent = false;
    std::vector<Delivery> arrived;
  };
  std::vector<std::vector<State>> st(static_cast<size_t>(n), std::vector<State>(chunks));
  std::mt19937 rng(seed);
  std::vector<Delivery> net;
  auto key = [](int peer, Xfer kind, uint8_t slot) { return std::make_tuple(peer, kind, slot); };
  auto find = [&](std::vector<Delivery>& a, const Transfer& r) {
    return std::find_if(a.begin(), a.end(), [&](const Delivery& d) {
      return key(d.from, d.kind, d.slot) == key(r.peer, r.kind, r.slot);
    });
  };
  for (int round = 0; round < 1000000; round++) {
    bool progressed = false;
    // Deliver some of the writes in flight, in random order.
    std::shuffle(net.begin(), net.end(), rng);
    size_t deliver = net.empty() ? 0 : 1 + rng() % net.size();
    for (size_t i = 0; i < deliver; i++) {
      Delivery d = std::move(net.back());
      net.pop_back();
      st[size_t(d.to)][d.chunk].arrived.push_back(std::move(d));
      progressed = true;
    }
    for (int h = 0; h < n; h++) {
      for (size_t c = 0; c < chunks; c++) {
        State& x = st[size_t(h)][c];
        const auto& phases = s[size_t(h)].chunks[c];
        while (x.phase < phases.size()) {
          const Phase& p = phases[x.phase];
          if (!x.sent) {
            x.sent = true;
            std::vector<uint8_t> bytes = hooks.begin(h, c, p);
            for (const auto& t : p.sends) net.push_back({t.peer, h, c, t.kind, t.slot, bytes});
            progressed = true;
          }
          bool all = true;
          for (const auto& r : p.recvs) all &= find(x.arrived, r) != x.arrived.end();
          if (!all) break;
          std::vector<Delivery> in;
          for (const auto& r : p.recvs) {
            auto it = find(x.arrived, r);
            in.push_back(std::move(*it));
            x.arrived.erase(it);
          }
          hooks.end(h, c, p, in);
          x.phase++;
          x.sent = false;
          progressed = true;
        }
      }
    }
    bool done = net.empty();
    for (int h = 0; h < n && done; h++)
      for (size_t c = 0; c < chunks; c++)
        done &= st[size_t(h)][c].phase == s[size_t(h)].chunks[c].size();
    if (done) return true;
    if (!progressed) return false;
  }
  return false;
}

}  // namespace gsync::collective::sim
