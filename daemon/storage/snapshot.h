// SPDX-License-Identifier: Apache-2.0
//
// A copy of a shard's state as it was at one moment, taken without
// stopping the event thread (docs/fault-tolerance.md, "Taking a
// checkpoint"): the checkpoint writer's thread copies the arrays block by
// block into a staging buffer while training goes on, and the event
// thread, before it writes into a block the writer has not copied yet,
// copies that block itself (copy-before-write). Each block is copied
// exactly once, by whichever side claims it first; a side that finds a
// block claimed by the other waits for that one copy (a block is 1 MiB of
// each array).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/storage/checkpoint_format.h"

namespace gsync::storage {

class Snapshot {
 public:
  // Elements per block.
  static constexpr size_t kBlock = size_t{1} << 18;

  // sources: arrays of n floats each, which the caller changes only after
  // before_write() of the range.
  Snapshot(std::vector<const float*> sources, size_t n);
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;
  // False when there was no memory for the staging buffer.
  bool ok() const { return buf_ != nullptr; }

  // Event thread: elements [begin, end) of every source are about to
  // change; their blocks' old values are copied first.
  void before_write(size_t begin, size_t end);
  // Writer thread: copies every block no one has copied yet.
  void copy_rest();
  bool complete() const { return copied_.load(std::memory_order_acquire) == blocks_; }

  // The staging buffer is the file's image (checkpoint_format.h): room for
  // the header in its first kPayloadOffset bytes, then the arrays one after
  // the other (valid once complete), then zeros to a multiple of 4 KiB; its
  // address is page-aligned, so all of it can be written with O_DIRECT.
  const uint8_t* payload() const { return buf_ + kPayloadOffset; }
  uint64_t payload_bytes() const { return bytes_; }
  uint8_t* image() const { return buf_; }
  uint64_t image_bytes() const { return mapped_; }
  // Blocks the event thread copied itself, and the time it spent in
  // before_write all told (copies and waits): what the snapshot cost it.
  uint64_t blocks_copied_inline() const { return inline_blocks_; }
  double inline_s() const { return inline_s_; }

 private:
  void copy_block(size_t b);
  bool claim(size_t b);
  void wait_copied(size_t b) const;

  std::vector<const float*> src_;
  size_t n_, blocks_;
  uint8_t* buf_ = nullptr;
  uint64_t bytes_ = 0, mapped_ = 0;
  // Per block: 0 free, 1 claimed, 2 copied.
  std::unique_ptr<std::atomic<uint8_t>[]> state_;
  std::atomic<size_t> copied_{0};
  uint64_t inline_blocks_ = 0;
  double inline_s_ = 0;
};

}  // namespace gsync::storage
