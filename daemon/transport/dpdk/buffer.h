// SPDX-License-Identifier: Apache-2.0
//
// This daemon's regions as the DPDK provider sees them: peers' frames are
// copied by our CPU from the receive buffer into the region, so a region
// needs no registration and no announcement - only a table the receive
// path checks every frame against. Ids come from the peering context
// (never reused, increasing): an id below the highest seen and not in the
// table was retired, and a late write into it is dropped as on TCP; an id
// never seen is a protocol error.
#pragma once

#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "daemon/transport/transport.h"

namespace gsync::transport::dpdk {

class RegionTable {
 public:
  void add(const Region& r) {
    table_[r.id] = r;
    if (r.id > max_id_) max_id_ = r.id;
  }
  void remove(uint32_t id) { table_.erase(id); }
  const Region* find(uint32_t id) const {
    auto it = table_.find(id);
    return it == table_.end() ? nullptr : &it->second;
  }
  bool retired(uint32_t id) const { return id != 0 && id <= max_id_ && !find(id); }

 private:
  std::unordered_map<uint32_t, Region> table_;
  uint32_t max_id_ = 0;
};

// Where a pair puts the frames it sends: the port's transmit burst
// (device.h), or a test's wire. frame() gives room for one frame of
// `bytes`, to be filled before the next call; null when no buffer is free
// (the pair tries again on the next turn).
class TxSink {
 public:
  virtual ~TxSink() = default;
  virtual uint8_t* frame(size_t bytes) = 0;
  // A frame of `header` bytes (to be filled) followed by [payload,
  // payload+len): by reference where the port can (the payload stays valid
  // until the write completes, long after the port took it), else copied.
  virtual uint8_t* frame_with(size_t header, const uint8_t* payload, size_t len) {
    uint8_t* p = frame(header + len);
    if (p != nullptr) std::memcpy(p + header, payload, len);
    return p;
  }
  // Frames that fit before the burst goes out.
  virtual size_t room() const = 0;
};

}  // namespace gsync::transport::dpdk
