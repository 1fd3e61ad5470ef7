// SPDX-License-Identifier: Apache-2.0
//
// The regions peers may write into: id -> (base, bytes). Every WRITE header a
// peer sends is checked here before a single payload byte is received, so a
// peer can never make the daemon write outside memory it registered. An id
// that was registered once and is gone now is "retired": a late write into
// it is discarded, while an id never handed out is a protocol error.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "daemon/transport/transport.h"

namespace gsync::transport::tcp {

class RegionTable {
 public:
  // Ids are not reused until the 32-bit counter wraps (4e9 registrations):
  // a late write aimed at a region that was deregistered cannot land in one
  // registered after it.
  Region add(void* base, uint64_t bytes);
  bool remove(uint32_t id);

  // Where [offset, offset+len) of region id is in memory, or nullptr with
  // *why saying what is wrong (unknown region, range past its end).
  uint8_t* locate(uint32_t id, uint64_t offset, uint64_t len, std::string* why) const;
  bool contains(uint32_t id) const { return regions_.count(id) != 0; }
  bool retired(uint32_t id) const {
    return id != 0 && !contains(id) && (wrapped_ || id < next_id_);
  }
  size_t size() const { return regions_.size(); }

 private:
  uint32_t next_id_ = 1;
  bool wrapped_ = false;
  std::unordered_map<uint32_t, Region> regions_;
};

}  // namespace gsync::transport::tcp
