// SPDX-License-Identifier: Apache-2.0
//
// The client's arena allocator on its own: placement, alignment,
// coalescing, exhaustion text, bad frees, and a random run checked against
// a byte-map model of the arena.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "libclient/arena_allocator.h"
#include "libclient/format.h"

namespace gsync::client {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

TEST(ArenaAllocator, FreshArenaIsOneFreeBlock) {
  ArenaAllocator a(1 * kMiB);
  EXPECT_EQ(a.capacity(), 1 * kMiB);
  EXPECT_EQ(a.free_bytes(), 1 * kMiB);
  EXPECT_EQ(a.largest_free(), 1 * kMiB);
  EXPECT_EQ(a.free_block_count(), 1u);
  EXPECT_EQ(a.live_block_count(), 0u);
  EXPECT_TRUE(a.check_invariants());
}

TEST(ArenaAllocator, CapacityRoundsDownToAlignment) {
  ArenaAllocator a(1000);
  EXPECT_EQ(a.capacity(), 768u);
  ArenaAllocator tiny(100);
  EXPECT_EQ(tiny.capacity(), 0u);
  EXPECT_FALSE(tiny.allocate(1).has_value());
  EXPECT_TRUE(tiny.check_invariants());
}

TEST(ArenaAllocator, BlocksAreAlignedAndRoundedUp) {
  ArenaAllocator a(64 * 1024);
  std::vector<uint64_t> offsets;
  for (uint64_t bytes : {1, 255, 256, 257, 1000, 0}) {
    auto off = a.allocate(bytes);
    ASSERT_TRUE(off.has_value()) << bytes;
    EXPECT_EQ(*off % ArenaAllocator::kDefaultAlignment, 0u) << bytes;
    offsets.push_back(*off);
  }
  // Sizes 256, 256, 256, 512, 1024, 256 (0 counts as 1) from an empty arena.
  EXPECT_EQ(a.free_bytes(), 64 * 1024 - (256 * 4 + 512 + 1024));
  EXPECT_EQ(a.release(offsets[3]), 512u);
  EXPECT_EQ(a.release(offsets[5]), 256u);
  EXPECT_TRUE(a.check_invariants());
}

TEST(ArenaAllocator, OtherAlignment) {
  ArenaAllocator a(4096, 64);
  auto x = a.allocate(1);
  auto y = a.allocate(65);
  ASSERT_TRUE(x && y);
  EXPECT_EQ(*y - *x, 64u);
  EXPECT_EQ(a.free_bytes(), 4096u - 64 - 128);
}

TEST(ArenaAllocator, ExhaustionAndExactFit) {
  ArenaAllocator a(4096);
  EXPECT_FALSE(a.allocate(4097).has_value());
  EXPECT_FALSE(a.allocate(UINT64_MAX).has_value());  // must not wrap when rounding up
  auto all = a.allocate(4096);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(*all, 0u);
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.largest_free(), 0u);
  EXPECT_FALSE(a.allocate(1).has_value());
  EXPECT_EQ(a.release(*all), 4096u);
  EXPECT_EQ(a.largest_free(), 4096u);
}

TEST(ArenaAllocator, CoalescesWithBothNeighbours) {
  ArenaAllocator a(4 * 256);
  auto b0 = a.allocate(256), b1 = a.allocate(256), b2 = a.allocate(256), b3 = a.allocate(256);
  ASSERT_TRUE(b0 && b1 && b2 && b3);
  EXPECT_EQ(a.free_bytes(), 0u);

  a.release(*b0);
  a.release(*b2);
  EXPECT_EQ(a.free_block_count(), 2u);  // not adjacent: no merge
  EXPECT_EQ(a.largest_free(), 256u);

  a.release(*b1);  // merges with b0 before and b2 after
  EXPECT_EQ(a.free_block_count(), 1u);
  EXPECT_EQ(a.largest_free(), 768u);
  EXPECT_TRUE(a.check_invariants());

  a.release(*b3);  // merges with the block before it
  EXPECT_EQ(a.free_block_count(), 1u);
  EXPECT_EQ(a.largest_free(), 1024u);
  EXPECT_TRUE(a.check_invariants());
}

TEST(ArenaAllocator, FragmentedArenaRefusesWhatOnlyTotalFreeWouldFit) {
  ArenaAllocator a(8 * 256);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*a.allocate(256));
  for (int i = 0; i < 8; i += 2) a.release(blocks[i]);
  EXPECT_EQ(a.free_bytes(), 4 * 256u);
  EXPECT_EQ(a.largest_free(), 256u);
  EXPECT_FALSE(a.allocate(512).has_value());
  EXPECT_TRUE(a.allocate(256).has_value());
}

TEST(ArenaAllocator, BestFitPrefersTheSmallestHoleThenTheLowest) {
  ArenaAllocator a(16 * 256);
  // Layout: [A 2][B 1][C 4][D 1][E 1][rest 7] (units of 256 bytes).
  auto A = a.allocate(2 * 256), B = a.allocate(256), C = a.allocate(4 * 256), D = a.allocate(256),
       E = a.allocate(256);
  ASSERT_TRUE(A && B && C && D && E);
  a.release(*A);  // hole of 2 at 0
  a.release(*C);  // hole of 4 at 3
  auto x = a.allocate(2 * 256);
  EXPECT_EQ(*x, *A);  // the 2-hole, not the 4-hole nor the 7-block at the end
  auto y = a.allocate(3 * 256);
  EXPECT_EQ(*y, *C);  // the 4-hole is the smallest that fits 3
  auto z = a.allocate(256);
  EXPECT_EQ(*z, *C + 3 * 256);  // the 1 left of the 4-hole
  EXPECT_TRUE(a.check_invariants());
}

TEST(ArenaAllocator, DoubleAndForeignReleaseAreRejected) {
  ArenaAllocator a(4096);
  auto x = a.allocate(512);
  ASSERT_TRUE(x);
  EXPECT_EQ(a.release(*x + 256), 0u);  // interior pointer
  EXPECT_EQ(a.release(3000), 0u);      // never allocated
  EXPECT_EQ(a.release(1 << 20), 0u);   // outside the arena
  EXPECT_EQ(a.release(*x), 512u);
  EXPECT_EQ(a.release(*x), 0u);  // double free
  EXPECT_EQ(a.free_bytes(), 4096u);
  EXPECT_TRUE(a.check_invariants());
}

TEST(ArenaAllocator, FindBlockCoversExactlyTheLiveRange) {
  ArenaAllocator a(4096);
  auto x = a.allocate(300);  // 512-byte block
  auto y = a.allocate(256);
  ASSERT_TRUE(x && y);
  auto b = a.find_block(*x + 511);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->first, *x);
  EXPECT_EQ(b->second, 512u);
  EXPECT_EQ(a.find_block(*y)->first, *y);
  EXPECT_FALSE(a.find_block(*y + 256).has_value());  // free space after y
  a.release(*x);
  EXPECT_FALSE(a.find_block(*x).has_value());
}

TEST(ArenaAllocator, ExhaustionMessageNamesTheNumbers) {
  ArenaAllocator a(1024 * kMiB);
  auto big = a.allocate(812 * kMiB);
  ASSERT_TRUE(big);
  EXPECT_FALSE(a.allocate(300 * kMiB).has_value());
  EXPECT_EQ(a.exhaustion_message(300 * kMiB),
            "arena exhausted: asked 300 MiB, largest free block 212 MiB of 1 GiB; "
            "212 MiB free in 1 block");
  a.release(*big);
  auto x = a.allocate(400 * kMiB), y = a.allocate(200 * kMiB), z = a.allocate(424 * kMiB);
  ASSERT_TRUE(x && y && z);
  a.release(*x);
  a.release(*z);
  EXPECT_EQ(a.exhaustion_message(500 * kMiB),
            "arena exhausted: asked 500 MiB, largest free block 424 MiB of 1 GiB; "
            "824 MiB free in 2 blocks");
}

TEST(Format, Bytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(300 * kMiB), "300 MiB");
  EXPECT_EQ(format_bytes(uint64_t{3} << 30), "3 GiB");
  EXPECT_EQ(format_bytes(UINT64_MAX), "16.0 EiB");
}

// Random allocations and frees against a model that marks each 256-byte
// unit of the arena free or owned. Checked after every step: blocks never
// overlap, the counters agree with the model, and, because free blocks are
// fully coalesced, largest_free() is the longest run of free units.
TEST(ArenaAllocator, RandomStressAgainstModel) {
  constexpr uint64_t kUnit = ArenaAllocator::kDefaultAlignment;
  constexpr uint64_t kUnits = 512;
  ArenaAllocator a(kUnits * kUnit);
  std::vector<int> owner(kUnits, -1);  // block id per unit, -1 when free
  struct Live {
    uint64_t offset, size;
  };
  std::vector<Live> live;
  std::mt19937_64 rng(12345);
  int next_id = 0;

  auto longest_free_run = [&] {
    uint64_t best = 0, run = 0;
    for (int o : owner) {
      run = o < 0 ? run + 1 : 0;
      best = std::max(best, run);
    }
    return best * kUnit;
  };

  for (int step = 0; step < 20000; ++step) {
    const bool do_alloc = live.empty() || rng() % 100 < 55;
    if (do_alloc) {
      // Mostly small, sometimes large, sometimes not a multiple of the unit.
      uint64_t bytes = (rng() % 4 == 0) ? rng() % (kUnits * kUnit / 4) : rng() % (8 * kUnit);
      const uint64_t largest_before = a.largest_free();
      const uint64_t rounded = std::max<uint64_t>(1, (bytes + kUnit - 1) / kUnit) * kUnit;
      auto off = a.allocate(bytes);
      ASSERT_EQ(off.has_value(), rounded <= largest_before) << "step " << step;
      if (off) {
        ASSERT_EQ(*off % kUnit, 0u);
        for (uint64_t u = *off / kUnit; u < (*off + rounded) / kUnit; ++u) {
          ASSERT_LT(u, kUnits);
          ASSERT_EQ(owner[u], -1) << "overlap at unit " << u << ", step " << step;
          owner[u] = next_id;
        }
        ++next_id;
        live.push_back({*off, rounded});
      }
    } else {
      const size_t i = rng() % live.size();
      ASSERT_EQ(a.release(live[i].offset), live[i].size);
      for (uint64_t u = live[i].offset / kUnit; u < (live[i].offset + live[i].size) / kUnit; ++u) {
        owner[u] = -1;
      }
      live[i] = live.back();
      live.pop_back();
    }
    const uint64_t model_free = kUnit * std::count(owner.begin(), owner.end(), -1);
    ASSERT_EQ(a.free_bytes(), model_free) << "step " << step;
    ASSERT_EQ(a.largest_free(), longest_free_run()) << "step " << step;
    ASSERT_EQ(a.live_block_count(), live.size());
    if (step % 64 == 0) {
      ASSERT_TRUE(a.check_invariants()) << "step " << step;
    }
  }
  for (const Live& l : live) ASSERT_EQ(a.release(l.offset), l.size);
  EXPECT_EQ(a.free_block_count(), 1u);
  EXPECT_EQ(a.largest_free(), a.capacity());
  EXPECT_TRUE(a.check_invariants());
}

}  // namespace
}  // namespace gsync::client
