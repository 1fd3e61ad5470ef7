// SPDX-License-Identifier: Apache-2.0
//
// Bytes per second over the last few seconds, from one-second buckets.
// Cheap enough to feed on every completed op.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace gsync {

class RateMeter {
 public:
  static constexpr int kWindow = 5;  // seconds averaged

  void add(uint64_t bytes, std::chrono::steady_clock::time_point now) {
    int64_t sec = seconds(now);
    roll(sec);
    buckets_[sec % kBuckets] += bytes;
  }
  // Bytes per second over the last kWindow whole seconds plus the current one.
  // Const: reading rolls the buckets forward, which changes no rate.
  double rate(std::chrono::steady_clock::time_point now) const {
    int64_t sec = seconds(now);
    roll(sec);
    uint64_t sum = 0;
    for (int i = 0; i <= kWindow; i++) sum += buckets_[(sec - i + kBuckets) % kBuckets];
    double frac = std::chrono::duration<double>(now.time_since_epoch()).count() - double(sec);
    return double(sum) / (kWindow + frac);
  }

 private:
  static constexpr int kBuckets = kWindow + 2;
  static int64_t seconds(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  }
  void roll(int64_t sec) const {
    if (last_ == 0) last_ = sec;
    for (int64_t s = last_ + 1; s <= sec && s <= last_ + kBuckets; s++) buckets_[s % kBuckets] = 0;
    if (sec > last_) last_ = sec;
  }
  mutable std::array<uint64_t, kBuckets> buckets_{};
  mutable int64_t last_ = 0;
};

}  // namespace gsync
