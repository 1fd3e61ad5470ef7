// SPDX-License-Identifier: Apache-2.0
#include "daemon/transport/verbs/buffer.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace gsync::transport::verbs {

struct MrCache::Entry {
  Registration reg;
  int refs = 0;
  bool stale = false;
};

namespace {

// Every live cache, for the hooks. A plain spinlock: munmap may be called
// from any thread, and from code that holds allocator locks.
std::atomic_flag g_lock = ATOMIC_FLAG_INIT;
std::vector<MrCache*>* g_caches = nullptr;

struct SpinGuard {
  SpinGuard() {
    while (g_lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinGuard() { g_lock.clear(std::memory_order_release); }
};

void notify_unmapped(const void* addr, size_t len) {
  if (len == 0) return;
  auto lo = reinterpret_cast<uintptr_t>(addr);
  SpinGuard g;
  if (g_caches == nullptr) return;
  for (MrCache* c : *g_caches) c->note_unmapped(lo, lo + len);
}

}  // namespace

bool find_mapping(const void* addr, uint64_t bytes, uintptr_t* lo, uintptr_t* hi) {
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return false;
  auto a = reinterpret_cast<uintptr_t>(addr);
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    uintptr_t l = 0, h = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &l, &h) != 2) continue;
    if (a >= l && a < h) {
      found = a + bytes <= h;
      *lo = l;
      *hi = h;
      break;
    }
  }
  std::fclose(f);
  return found;
}

MrCache::MrCache(Registrar& registrar) : registrar_(registrar) {
  SpinGuard g;
  if (g_caches == nullptr) g_caches = new std::vector<MrCache*>();
  g_caches->push_back(this);
}

MrCache::~MrCache() {
  {
    SpinGuard g;
    g_caches->erase(std::find(g_caches->begin(), g_caches->end(), this));
  }
  for (auto& [start, e] : live_) registrar_.deregister_memory(e->reg);
  for (auto& e : stale_) registrar_.deregister_memory(e->reg);
}

void MrCache::note_unmapped(uintptr_t lo, uintptr_t hi) {
  std::lock_guard<std::mutex> l(unmapped_mu_);
  if (unmapped_.size() >= 1024) {
    unmapped_overflow_ = true;
    return;
  }
  unmapped_.emplace_back(lo, hi);
}

void MrCache::apply_unmapped() {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  bool all;
  {
    std::lock_guard<std::mutex> l(unmapped_mu_);
    if (unmapped_.empty() && !unmapped_overflow_) return;
    ranges.swap(unmapped_);
    all = unmapped_overflow_;
    unmapped_overflow_ = false;
  }
  for (auto it = live_.begin(); it != live_.end();) {
    auto lo = reinterpret_cast<uintptr_t>(it->second->reg.base);
    uintptr_t hi = lo + it->second->reg.bytes;
    bool hit = all;
    for (auto& [ul, uh] : ranges) hit = hit || (ul < hi && lo < uh);
    if (!hit) {
      ++it;
      continue;
    }
    std::unique_ptr<Entry> e = std::move(it->second);
    it = live_.erase(it);
    e->stale = true;
    if (e->refs == 0)
      registrar_.deregister_memory(e->reg);
    else
      stale_.push_back(std::move(e));
  }
}

MrCache::Entry* MrCache::acquire(const void* base, uint64_t bytes, Status* err) {
  apply_unmapped();
  auto a = reinterpret_cast<uintptr_t>(base);
  uint64_t want = std::max<uint64_t>(bytes, 1);
  // Registrations are whole mappings, which do not overlap; ranges spanning
  // mappings are registered exactly and may overlap those, so look at a few.
  auto it = live_.upper_bound(a);
  for (int i = 0; i < 8 && it != live_.begin(); i++) {
    --it;
    Entry* e = it->second.get();
    auto lo = reinterpret_cast<uintptr_t>(e->reg.base);
    if (a >= lo && a + want <= lo + e->reg.bytes) {
      hits_++;
      e->refs++;
      return e;
    }
  }
  misses_++;
  uintptr_t lo = 0, hi = 0;
  if (!find_mapping(base, want, &lo, &hi)) {
    long page = sysconf(_SC_PAGESIZE);
    lo = a & ~uintptr_t(page - 1);
    hi = (a + want + page - 1) & ~uintptr_t(page - 1);
  }
  auto e = std::make_unique<Entry>();
  Status st = registrar_.register_memory(reinterpret_cast<uint8_t*>(lo), hi - lo, -1, &e->reg);
  if (!st) {
    if (err != nullptr) *err = st;
    return nullptr;
  }
  e->refs = 1;
  Entry* raw = e.get();
  // A stale twin at the same start (remapped since) is already out of live_.
  live_[lo] = std::move(e);
  return raw;
}

void MrCache::release(Entry* e) {
  if (e == nullptr || --e->refs > 0 || !e->stale) return;
  drop(e);
}

void MrCache::drop(Entry* e) {
  auto it = std::find_if(stale_.begin(), stale_.end(), [e](auto& p) { return p.get() == e; });
  if (it == stale_.end()) return;
  registrar_.deregister_memory(e->reg);
  stale_.erase(it);
}

const Registration& MrCache::registration(const Entry* e) { return e->reg; }

bool RegionTable::take(uint32_t id, LocalRegion* out) {
  auto it = regions_.find(id);
  if (it == regions_.end()) return false;
  *out = std::move(it->second);
  regions_.erase(it);
  return true;
}

}  // namespace gsync::transport::verbs

// The hooks (see buffer.h). They reach the kernel directly, so they work
// however early they are called and never recurse.
extern "C" int munmap(void* addr, size_t len) {
  gsync::transport::verbs::notify_unmapped(addr, len);
  return static_cast<int>(syscall(SYS_munmap, addr, len));
}

extern "C" void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  void* target = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    target = va_arg(ap, void*);
    va_end(ap);
  }
  gsync::transport::verbs::notify_unmapped(old, old_len);
  if (flags & MREMAP_FIXED) gsync::transport::verbs::notify_unmapped(target, new_len);
  return reinterpret_cast<void*>(syscall(SYS_mremap, old, old_len, new_len, flags, target));
}
