// SPDX-License-Identifier: Apache-2.0
//
// Anonymous memory of the parameter server's own (push slots, reply
// staging, the reply area): mappings, not malloc, because the verbs
// provider's registration cache must see every unmap
// (transport/verbs/buffer.h), and a write's source must be memory it can
// register.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <utility>

namespace gsync::ps {

class Mapping {
 public:
  Mapping() = default;
  explicit Mapping(uint64_t bytes) : bytes_(bytes ? bytes : 1) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      bytes_ = 0;
    } else {
      base_ = static_cast<uint8_t*>(p);
    }
  }
  ~Mapping() {
    if (base_) munmap(base_, bytes_);
  }
  Mapping(Mapping&& o) noexcept : base_(std::exchange(o.base_, nullptr)), bytes_(o.bytes_) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      if (base_) munmap(base_, bytes_);
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = o.bytes_;
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  uint8_t* data() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  explicit operator bool() const { return base_ != nullptr; }

 private:
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace gsync::ps
