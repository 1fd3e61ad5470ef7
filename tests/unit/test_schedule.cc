// SPDX-License-Identifier: Apache-2.0
//
// The cross-host schedules run against each other in one process: every
// host's phases, with writes delivered in a random order and late, as a
// network would. Checks that each algorithm ends with the full sum on every
// host, with the same bits everywhere, for uneven racks and any chunk count,
// and that no schedule can deadlock. (The schedules are pure functions; the
// transport they run over has its own tests over real sockets.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "daemon/collective/schedule.h"
#include "tests/util/schedule_sim.h"

namespace gsync::collective {
namespace {

using sim::racks;

// Runs all hosts' schedules to the end; returns each host's final data.
std::vector<std::vector<float>> simulate(Algo algo, const std::vector<Participant>& parts,
                                         size_t chunks, size_t per_chunk,
                                         const std::vector<std::vector<float>>& input,
                                         unsigned seed, int root = 0) {
  int n = static_cast<int>(parts.size());
  std::vector<Schedule> s;
  for (int h = 0; h < n; h++) s.push_back(build_schedule(algo, parts, h, chunks, root));
  auto data = input;
  auto chunk_of = [&](int h, size_t c) { return data[size_t(h)].data() + c * per_chunk; };
  sim::Hooks hooks;
  hooks.begin = [&](int h, size_t c, const Phase&) {
    auto* b = reinterpret_cast<const uint8_t*>(chunk_of(h, c));
    return std::vector<uint8_t>(b, b + per_chunk * sizeof(float));
  };
  hooks.end = [&](int h, size_t c, const Phase& p, std::vector<sim::Delivery>& in) {
    bool reduces = false;
    for (const auto& d : in) {
      if (d.kind == Xfer::kCopy) std::memcpy(chunk_of(h, c), d.bytes.data(), d.bytes.size());
      reduces |= d.kind == Xfer::kReduce;
    }
    if (!reduces) return;
    std::vector<float> acc;
    for (int j : p.fold) {
      std::vector<float> v(per_chunk);
      if (j == h) {
        std::memcpy(v.data(), chunk_of(h, c), per_chunk * sizeof(float));
      } else {
        for (const auto& d : in)
          if (d.from == j && d.kind == Xfer::kReduce)
            std::memcpy(v.data(), d.bytes.data(), d.bytes.size());
      }
      if (acc.empty()) {
        acc = v;
      } else {
        for (size_t i = 0; i < acc.size(); i++) acc[i] += v[i];
      }
    }
    std::memcpy(chunk_of(h, c), acc.data(), per_chunk * sizeof(float));
  };
  if (!sim::run(s, seed, hooks))
    ADD_FAILURE() << algo_name(algo) << ": deadlock with " << n << " hosts, " << chunks << " chunks";
  return data;
}

struct Case {
  std::vector<int> racks;
  size_t chunks;
};

class ScheduleTest : public ::testing::TestWithParam<std::tuple<Algo, Case>> {};

// Runs algo over parts from random inputs (4 seeds) and checks every host
// ends with the same bits, equal to the sum up to rounding.
void expect_full_sum_everywhere(Algo algo, const std::vector<Participant>& parts, size_t chunks,
                                int root = 0) {
  Case k{{}, chunks};
  int n = static_cast<int>(parts.size());
  const size_t per_chunk = 5;
  for (unsigned seed = 1; seed <= 4; seed++) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<std::vector<float>> in(static_cast<size_t>(n), std::vector<float>(k.chunks * per_chunk));
    std::vector<double> exact(k.chunks * per_chunk, 0.0);
    for (int h = 0; h < n; h++)
      for (size_t i = 0; i < in[size_t(h)].size(); i++) {
        // Random floats for the same-bits check; the exact sum is checked
        // with a tolerance (the fold order is the algorithm's).
        in[size_t(h)][i] = dist(rng);
        exact[i] += in[size_t(h)][i];
      }
    auto out = simulate(algo, parts, k.chunks, per_chunk, in, seed, root);
    for (int h = 0; h < n; h++) {
      ASSERT_EQ(std::memcmp(out[size_t(h)].data(), out[0].data(), out[0].size() * sizeof(float)), 0)
          << algo_name(algo) << ": host " << h << " differs from host 0 (seed " << seed
          << ", root " << root << ")";
      for (size_t i = 0; i < exact.size(); i++)
        ASSERT_NEAR(out[size_t(h)][i], exact[i], 1e-4)
            << algo_name(algo) << " host " << h << " i " << i << " root " << root;
    }
  }
}

TEST_P(ScheduleTest, EveryHostEndsWithTheSameFullSum) {
  auto [algo, k] = GetParam();
  expect_full_sum_everywhere(algo, racks(k.racks), k.chunks);
}

// Trees deeper than a star (more than kTreeFanout + 1 hosts) and every kind
// of root: first, last, middle.
TEST(Schedule, TreeWithAnyRootAndDepth) {
  for (int n : {2, 3, 9, 10, 17, 30, 81}) {
    for (int root : {0, n - 1, n / 2}) {
      SCOPED_TRACE(testing::Message() << n << " hosts, root " << root);
      expect_full_sum_everywhere(Algo::kTree, racks({n}), 2, root);
    }
  }
}

TEST(Schedule, TreeSendsTwoTransfersPerHostButTheRoot) {
  for (int n : {4, 9, 30}) {
    auto parts = racks({n});
    size_t transfers = 0, root_sends = 0;
    for (int h = 0; h < n; h++) {
      Schedule s = build_schedule(Algo::kTree, parts, h, 1, 1);
      for (const auto& p : s.chunks[0]) transfers += p.sends.size();
      if (h == 1)
        for (const auto& p : s.chunks[0]) root_sends += p.sends.size();
    }
    EXPECT_EQ(transfers, size_t(2 * (n - 1))) << n << " hosts: n-1 up, n-1 down";
    EXPECT_EQ(root_sends, size_t(std::min(n - 1, kTreeFanout))) << "the root only sends down";
  }
  for (uint64_t step = 0; step < 8; step++) EXPECT_LT(tree_root(4, 7, step), 4);
  EXPECT_NE(tree_root(4, 7, 0), tree_root(4, 7, 1)) << "the root moves from op to op";
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, ScheduleTest,
    ::testing::Combine(::testing::Values(Algo::kRing, Algo::kHier, Algo::kDirect, Algo::kTree,
                                         Algo::kDoubling),
                       ::testing::Values(Case{{2}, 1}, Case{{3}, 7}, Case{{4}, 2}, Case{{2, 2}, 16},
                                         Case{{3, 1}, 9}, Case{{1, 1}, 3}, Case{{2, 3}, 1},
                                         Case{{1, 2, 3}, 11}, Case{{4, 4}, 32}, Case{{5}, 13})));

// Recursive doubling at and between powers of two (the hosts beyond the
// power hand their part in and get the sum back), and its message count.
TEST(Schedule, DoublingAtAndBetweenPowersOfTwo) {
  for (int n : {2, 3, 5, 6, 7, 8, 9, 12, 16, 17}) expect_full_sum_everywhere(Algo::kDoubling, racks({n}), 2);
  for (int n : {4, 6, 8}) {
    auto parts = racks({n});
    int p = n >= 8 ? 8 : 4, k = n >= 8 ? 3 : 2;
    size_t sends = 0;
    for (int h = 0; h < n; h++) {
      Schedule s = build_schedule(Algo::kDoubling, parts, h, 1);
      for (const auto& ph : s.chunks[0]) sends += ph.sends.size();
    }
    EXPECT_EQ(sends, size_t(p * k + 2 * (n - p))) << n << " hosts";
  }
}

// The timeout grace relies on Phase::step: whoever a host waits on in step
// s waited only in earlier steps before it sent that transfer, and a host's
// steps never go down.
TEST(Schedule, SmallOpSendersWaitedOnlyInEarlierSteps) {
  for (Algo a : {Algo::kTree, Algo::kDoubling, Algo::kDirect})
    for (int n : {2, 3, 4, 5, 7, 8, 9, 11, 30, 81, 100}) {
      auto parts = racks({n});
      std::vector<Schedule> s;
      for (int h = 0; h < n; h++) s.push_back(build_schedule(a, parts, h, 1, n / 2));
      for (int h = 0; h < n; h++) {
        const auto& mine = s[size_t(h)].chunks[0];
        int last = 0;
        for (size_t i = 0; i < mine.size(); i++) {
          EXPECT_GE(mine[i].step, last) << algo_name(a) << " n " << n << " host " << h;
          last = mine[i].step;
          for (const auto& t : mine[i].sends) {
            int recv_step = -1;
            for (const auto& q : s[size_t(t.peer)].chunks[0])
              for (const auto& r : q.recvs)
                if (r.peer == h && r.kind == t.kind && r.slot == t.slot) recv_step = q.step;
            ASSERT_GE(recv_step, 0) << algo_name(a) << " n " << n << ": " << h << " -> " << t.peer;
            for (size_t e = 0; e < i; e++) {
              if (!mine[e].recvs.empty()) {
                EXPECT_LT(mine[e].step, recv_step)
                    << algo_name(a) << " n " << n << ": " << h << " -> " << t.peer;
              }
            }
          }
        }
      }
    }
}

TEST(Schedule, HierarchicalCrossesTheUplinkOncePerElementEachWay) {
  // 2 racks x 2 hosts: count the bytes that go from rack 0 to rack 1.
  auto parts = racks({2, 2});
  size_t chunks = 64, cross = 0, ring_cross = 0;
  for (int h = 0; h < 4; h++) {
    for (Algo a : {Algo::kHier, Algo::kRing}) {
      Schedule s = build_schedule(a, parts, h, chunks);
      for (const auto& phases : s.chunks)
        for (const auto& p : phases)
          for (const auto& t : p.sends)
            if (parts[size_t(h)].rack == "r0" && parts[size_t(t.peer)].rack == "r1")
              (a == Algo::kHier ? cross : ring_cross)++;
    }
  }
  EXPECT_EQ(cross, chunks) << "every chunk crosses rack 0 -> rack 1 exactly once";
  EXPECT_EQ(ring_cross, chunks * 3 / 2) << "the flat ring carries 1.5 x S over the uplink";
}

TEST(Schedule, AutoChoice) {
  EXPECT_EQ(choose_algo(racks({3}), 4096), Algo::kDirect);
  EXPECT_EQ(choose_algo(racks({4}), 4096), Algo::kTree);
  EXPECT_EQ(choose_algo(racks({2, 2}), 64 << 10), Algo::kTree);
  EXPECT_EQ(choose_algo(racks({4}), 64 << 20), Algo::kRing);
  EXPECT_EQ(choose_algo(racks({2, 2}), 64 << 20), Algo::kHier);
  EXPECT_EQ(choose_chunk_bytes(Algo::kRing, 4, 256 << 20) % 4096, 0u);
}

}  // namespace
}  // namespace gsync::collective
