// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/tcp/buffer.h"

#include <fmt/format.h>

namespace gsync::transport::tcp {

Region RegionTable::add(void* base, uint64_t bytes) {
  // 0 is never a valid id; after a wrap, skip ids still registered.
  while (next_id_ == 0 || regions_.count(next_id_) != 0) {
    if (next_id_ == 0) wrapped_ = true;
    next_id_++;
  }
  Region r;
  r.id = next_id_++;
  r.base = static_cast<uint8_t*>(base);
  r.bytes = bytes;
  regions_[r.id] = r;
  return r;
}

bool RegionTable::remove(uint32_t id) { return regions_.erase(id) != 0; }

uint8_t* RegionTable::locate(uint32_t id, uint64_t offset, uint64_t len, std::string* why) const {
  auto it = regions_.find(id);
  if (it == regions_.end()) {
    *why = fmt::format("region {} is not registered here", id);
    return nullptr;
  }
  const Region& r = it->second;
  // Written so that offset + len cannot wrap around.
  if (offset > r.bytes || len > r.bytes - offset) {
    *why = fmt::format("[{}, +{}) is outside region {} ({} bytes)", offset, len, id, r.bytes);
    return nullptr;
  }
  return r.base + offset;
}

}  // namespace gsync::transport::tcp
