// SPDX-License-Identifier: Apache-2.0
//
// Registered memory. The algorithms call register_region once per op with
// pointers into long-lived memory (client arenas, the scratch pool), so a
// registration (ibv_reg_mr: pins pages, programs the NIC, ~tens of µs per MB)
// is made once per *mapping* and cached: the first region inside an arena
// registers the whole arena, every later one is a lookup.
//
// A cached registration pins the pages it was made for; if the mapping were
// unmapped and another put at the same address, a hit would hand out the old
// pages. So, as UCX's ucm does for its registration cache, this library
// interposes munmap() and mremap(): each call marks the cached registrations
// it overlaps stale (deregistered once nothing uses them; never handed out
// again). That covers memory gsync maps itself (arenas, scratch). Memory that
// glibc's malloc maps and unmaps internally bypasses the hook, so it must not
// be given to register_region or write(); the daemon never does.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/transport/transport.h"

namespace gsync::transport::verbs {

// One registration: what the NIC knows as [base, base+bytes).
struct Registration {
  void* handle = nullptr;  // ibv_mr*, or a test's token
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  uint32_t lkey = 0, rkey = 0;
};

// Makes and drops registrations; Device implements it with ibv_reg_mr
// (ibv_reg_dmabuf_mr once a dma-buf fd is given), tests with a fake.
class Registrar {
 public:
  virtual ~Registrar() = default;
  virtual Status register_memory(uint8_t* base, uint64_t bytes, int dmabuf_fd,
                                 Registration* out) = 0;
  virtual void deregister_memory(const Registration& r) = 0;
};

// The mapping of /proc/self/maps that holds [addr, addr+bytes), or false.
bool find_mapping(const void* addr, uint64_t bytes, uintptr_t* lo, uintptr_t* hi);

class MrCache {
 public:
  struct Entry;

  explicit MrCache(Registrar& registrar);
  ~MrCache();  // deregisters everything
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // A registration covering [base, base+bytes) and a reference on it:
  // cached, or a new one of the whole mapping (of exactly the range where it
  // spans several mappings). nullptr with *err on failure.
  Entry* acquire(const void* base, uint64_t bytes, Status* err);
  void release(Entry* e);
  static const Registration& registration(const Entry* e);

  // [lo, hi) was unmapped: registrations overlapping it are stale. Called by
  // the munmap/mremap hooks (any thread); applied on the next acquire().
  void note_unmapped(uintptr_t lo, uintptr_t hi);

  size_t entries() const { return live_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  void apply_unmapped();
  void drop(Entry* e);

  Registrar& registrar_;
  std::map<uintptr_t, std::unique_ptr<Entry>> live_;  // by start address
  std::vector<std::unique_ptr<Entry>> stale_;          // still referenced
  std::mutex unmapped_mu_;
  std::vector<std::pair<uintptr_t, uintptr_t>> unmapped_;
  bool unmapped_overflow_ = false;
  uint64_t hits_ = 0, misses_ = 0;
};

// The regions of this daemon that peers may write into.
struct LocalRegion {
  Region region;
  MrCache::Entry* mr = nullptr;  // null where registration failed
  std::string error;             // why it failed
};

class RegionTable {
 public:
  // Ids are never reused (32-bit counter), so a late write aimed at a
  // deregistered region is told apart from a bad one.
  uint32_t next_id() { return next_id_++ == 0 ? next_id_++ : next_id_ - 1; }
  // The context takes its ids from the internal TCP context's table (one id
  // space for both paths): note one as issued so retired() knows it.
  void note_issued(uint32_t id) {
    if (id >= next_id_) next_id_ = id + 1;
  }
  void add(LocalRegion r) { regions_[r.region.id] = std::move(r); }
  const LocalRegion* find(uint32_t id) const {
    auto it = regions_.find(id);
    return it == regions_.end() ? nullptr : &it->second;
  }
  bool take(uint32_t id, LocalRegion* out);
  bool retired(uint32_t id) const { return id != 0 && id < next_id_ && !regions_.count(id); }
  const std::unordered_map<uint32_t, LocalRegion>& all() const { return regions_; }

 private:
  uint32_t next_id_ = 1;
  std::unordered_map<uint32_t, LocalRegion> regions_;
};

}  // namespace gsync::transport::verbs
