// SPDX-License-Identifier: Apache-2.0
//
// Best fit over a size-ordered index, ties broken by lowest address, with
// immediate coalescing on free. Johnstone & Wilson ("The Memory
// Fragmentation Problem: Solved?", ISMM 1998) measured address-ordered first
// fit and best fit as the two least fragmenting policies; best fit is the one
// of the two that a std::set gives in O(log n), and an arena holds a few
// hundred gradient buckets and staging blocks at most.
#include "libclient/arena_allocator.h"

#include <iterator>

#include "libclient/format.h"

namespace gsync::client {

ArenaAllocator::ArenaAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity / alignment * alignment), alignment_(alignment), free_bytes_(0) {
  if (capacity_ > 0) insert_free(0, capacity_);
}

std::optional<uint64_t> ArenaAllocator::allocate(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  // Checked before rounding up so huge requests cannot wrap around.
  if (bytes > capacity_) return std::nullopt;
  const uint64_t size = (bytes + alignment_ - 1) / alignment_ * alignment_;
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const uint64_t offset = fit->second;
  const uint64_t block = fit->first;
  erase_free(free_by_offset_.find(offset));
  if (block > size) insert_free(offset + size, block - size);
  live_.emplace(offset, size);
  return offset;
}

uint64_t ArenaAllocator::release(uint64_t offset) {
  auto it = live_.find(offset);
  if (it == live_.end()) return 0;
  uint64_t start = offset;
  uint64_t size = it->second;
  const uint64_t released = size;
  live_.erase(it);

  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  if (next != free_by_offset_.end() && next->first == offset + released) {
    size += next->second;
    erase_free(next);
  }
  insert_free(start, size);
  return released;
}

std::optional<std::pair<uint64_t, uint64_t>> ArenaAllocator::find_block(uint64_t offset) const {
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (offset - it->first >= it->second) return std::nullopt;
  return *it;
}

uint64_t ArenaAllocator::largest_free() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

std::string ArenaAllocator::exhaustion_message(uint64_t asked) const {
  const size_t blocks = free_by_offset_.size();
  return format("arena exhausted: asked %s, largest free block %s of %s; %s free in %zu block%s",
                format_bytes(asked).c_str(), format_bytes(largest_free()).c_str(),
                format_bytes(capacity_).c_str(), format_bytes(free_bytes_).c_str(), blocks,
                blocks == 1 ? "" : "s");
}

bool ArenaAllocator::check_invariants() const {
  if (free_by_offset_.size() != free_by_size_.size()) return false;
  uint64_t free_sum = 0;
  uint64_t prev_end = 0;
  bool first = true;
  for (const auto& [offset, size] : free_by_offset_) {
    if (size == 0 || offset % alignment_ != 0 || size % alignment_ != 0) return false;
    if (offset + size > capacity_) return false;
    // Disjoint, and never adjacent: adjacent free blocks must have merged.
    if (!first && offset <= prev_end) return false;
    if (!free_by_size_.count({size, offset})) return false;
    free_sum += size;
    prev_end = offset + size;
    first = false;
  }
  if (free_sum != free_bytes_) return false;
  uint64_t live_sum = 0;
  for (const auto& [offset, size] : live_) {
    if (size == 0 || offset % alignment_ != 0 || offset + size > capacity_) return false;
    live_sum += size;
  }
  return live_sum + free_sum == capacity_;
}

void ArenaAllocator::insert_free(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
  free_bytes_ += size;
}

void ArenaAllocator::erase_free(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  free_by_offset_.erase(it);
}

}  // namespace gsync::client
