// SPDX-License-Identifier: Apache-2.0
//
// The pieces of one transfer - a push's bytes into a server's slot, or a
// server's reply into a worker's tensor - that may land in any order:
// writes to one peer travel over several streams (transport.h). A transfer
// of `bytes` is cut at multiples of kPsChunkBytes from its start; a write
// covers one or more whole pieces. What counts is which pieces are in, and
// how many bytes from the start are in without a gap (a bsp server applies
// that prefix while the rest still comes).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "daemon/ps/messages.h"

namespace gsync::ps {

class Pieces {
 public:
  void reset(uint64_t bytes) {
    bytes_ = bytes;
    got_.assign(size_t((bytes + kPsChunkBytes - 1) / kPsChunkBytes), false);
    left_ = got_.size();
    prefix_ = 0;
  }
  // [offset, offset + len) of the transfer has landed: false (and nothing
  // changes) unless it is whole pieces inside the transfer, none in yet.
  bool land(uint64_t offset, uint64_t len) {
    if (len == 0 || offset > bytes_ || len > bytes_ - offset || offset % kPsChunkBytes != 0)
      return false;
    const uint64_t end = offset + len;
    if (end != bytes_ && end % kPsChunkBytes != 0) return false;
    const size_t first = size_t(offset / kPsChunkBytes);
    const size_t last = size_t((end + kPsChunkBytes - 1) / kPsChunkBytes);
    for (size_t i = first; i < last; i++)
      if (got_[i]) return false;
    for (size_t i = first; i < last; i++) got_[i] = true;
    left_ -= last - first;
    while (prefix_ < got_.size() && got_[prefix_]) prefix_++;
    return true;
  }
  // Bytes in from the start without a gap.
  uint64_t prefix() const { return std::min(bytes_, uint64_t(prefix_) * kPsChunkBytes); }
  bool complete() const { return left_ == 0; }
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t bytes_ = 0;
  std::vector<bool> got_;
  size_t left_ = 0, prefix_ = 0;
};

}  // namespace gsync::ps
