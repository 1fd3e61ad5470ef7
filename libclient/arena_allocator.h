// SPDX-License-Identifier: Apache-2.0
//
// Allocator for the client's tensor arena. It works on offsets from the
// arena start, never touches the memory itself and knows nothing of the
// daemon, so it is unit-tested on its own. The arena belongs to one client
// process; the daemon only bounds-checks the offsets it is given.
//
// Not thread-safe: the session serializes calls under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace gsync::client {

class ArenaAllocator {
 public:
  // 256 bytes: a multiple of every cache line and SIMD width the reduce
  // kernels use, so the daemon can run aligned loads on any block.
  static constexpr uint64_t kDefaultAlignment = 256;

  // capacity is rounded down to a multiple of alignment (a power of two).
  explicit ArenaAllocator(uint64_t capacity, uint64_t alignment = kDefaultAlignment);

  // Offset of a new block of at least `bytes` (0 counts as 1), aligned to
  // alignment(); nullopt when no free block is large enough.
  std::optional<uint64_t> allocate(uint64_t bytes);
  // Size of the block that started at `offset`, now free; 0 if no live block
  // starts there (double free, interior or foreign offset).
  uint64_t release(uint64_t offset);

  // Live block containing `offset`: {start, size}, or nullopt.
  std::optional<std::pair<uint64_t, uint64_t>> find_block(uint64_t offset) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t largest_free() const;
  size_t free_block_count() const { return free_by_offset_.size(); }
  size_t live_block_count() const { return live_.size(); }

  // "arena exhausted: asked 300 MiB, largest free block 212 MiB of 1 GiB;
  // 412 MiB free in 3 blocks"
  std::string exhaustion_message(uint64_t asked) const;

  // Internal consistency (indices agree, free blocks sorted, disjoint and
  // fully coalesced, byte totals add up). For tests.
  bool check_invariants() const;

 private:
  void insert_free(uint64_t offset, uint64_t size);
  void erase_free(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t free_bytes_;
  // Free blocks twice: by offset to find neighbours when coalescing, by
  // (size, offset) to find the smallest block that fits in O(log n).
  std::map<uint64_t, uint64_t> free_by_offset_;
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;
  // Live blocks, by offset (ordered so find_block is O(log n)).
  std::map<uint64_t, uint64_t> live_;
};

}  // namespace gsync::client
