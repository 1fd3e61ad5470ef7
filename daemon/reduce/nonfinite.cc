// SPDX-License-Identifier: Apache-2.0
#include "daemon/reduce/nonfinite.h"

#include <algorithm>
#include <cstring>

namespace gsync::reduce {

namespace {
constexpr size_t kBlock = 1024;

struct Layout {
  uint32_t exp_mask, quiet, payload;  // in the element's own bits
  size_t bytes;
};
Layout layout(proto::DType d) {
  switch (d) {
    case proto::DType::kF16: return {0x7c00u, 0x7e00u, 0x01ffu, 2};
    case proto::DType::kBF16: return {0x7f80u, 0x7fc0u, 0x003fu, 2};
    default: return {0x7f800000u, 0x7fc00000u, 0x003fffffu, 4};
  }
}

uint32_t bits_at(const uint8_t* p, size_t i, size_t bytes) {
  if (bytes == 2) {
    uint16_t v;
    std::memcpy(&v, p + i * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p + i * 4, 4);
  return v;
}

// Whether [b, e) of one tensor has an element whose exponent is all ones.
// Loads by memcpy: the bytes are floats (no aliasing through another type),
// and the compiler still vectorizes the loop.
bool any_nonfinite(const uint8_t* p, size_t b, size_t e, const Layout& l) {
  uint32_t hit = 0;
  if (l.bytes == 4)
    for (size_t i = b; i < e; i++) hit |= (bits_at(p, i, 4) & l.exp_mask) == l.exp_mask;
  else
    for (size_t i = b; i < e; i++) hit |= (bits_at(p, i, 2) & l.exp_mask) == l.exp_mask;
  return hit != 0;
}
}  // namespace

void find_nonfinite(const reduce::ReduceArgs& a, size_t b, size_t e,
                    std::vector<std::pair<size_t, size_t>>* hits) {
  const Layout l = layout(a.dtype);
  for (size_t at = b; at < e; at += kBlock) {
    const size_t end = std::min(e, at + kBlock);
    bool any = false;
    for (size_t r = 0; r < a.n_inputs && !any; r++)
      any = any_nonfinite(static_cast<const uint8_t*>(a.inputs[r]), at, end, l);
    if (!any) continue;
    for (size_t i = at; i < end; i++)
      for (size_t r = 0; r < a.n_inputs; r++)
        if ((bits_at(static_cast<const uint8_t*>(a.inputs[r]), i, l.bytes) & l.exp_mask) ==
            l.exp_mask) {
          hits->emplace_back(i, r);
          break;
        }
  }
}

void mark_nonfinite(const reduce::ReduceArgs& a, const std::vector<int>& ranks,
                    const std::vector<std::pair<size_t, size_t>>& hits) {
  const Layout l = layout(a.dtype);
  auto* out = static_cast<uint8_t*>(a.outputs[0]);
  for (const auto& [i, r] : hits) {
    const uint32_t mark = static_cast<uint32_t>(ranks[r]) + 1;
    const uint32_t v = l.quiet | (mark <= l.payload ? mark : 0);
    if (l.bytes == 2) {
      const auto h = static_cast<uint16_t>(v);
      std::memcpy(out + i * 2, &h, 2);
    } else {
      std::memcpy(out + i * 4, &v, 4);
    }
  }
}

int64_t marked_rank(const void* data, proto::DType dtype, uint64_t n) {
  const Layout l = layout(dtype);
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint64_t at = 0; at < n; at += kBlock) {
    const uint64_t end = std::min<uint64_t>(n, at + kBlock);
    if (!any_nonfinite(p, at, end, l)) continue;
    for (uint64_t i = at; i < end; i++) {
      const uint32_t v = bits_at(p, i, l.bytes);
      const uint32_t payload = v & l.payload;
      // A NaN (not an Inf: its mantissa is zero) with a mark.
      if ((v & l.exp_mask) == l.exp_mask && (v & (l.quiet & ~l.exp_mask)) && payload != 0)
        return static_cast<int64_t>(payload) - 1;
    }
  }
  return -1;
}

int64_t marked_rank_widened(const float* data, uint64_t n, proto::DType from) {
  const int64_t r = marked_rank(data, proto::DType::kF32, n);
  if (r < 0 || (from != proto::DType::kF16 && from != proto::DType::kBF16)) return r;
  const int shift = from == proto::DType::kF16 ? 13 : 16;
  const auto mark = static_cast<uint64_t>(r + 1);
  if ((mark & ((uint64_t{1} << shift) - 1)) != 0) return -1;  // not a widened mark
  return static_cast<int64_t>(mark >> shift) - 1;
}

std::string nonfinite_origin(int64_t rank) {
  if (rank < 0) return "; no rank's gradient was non-finite itself (the sum overflowed)";
  return "; the first non-finite value is rank " + std::to_string(rank) + "'s";
}

}  // namespace gsync::reduce
