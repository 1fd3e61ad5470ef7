// SPDX-License-Identifier: Apache-2.0
//
// Top-k sparsification (codec.h): keep the k values of largest |v|, ties to
// the lowest index, as sparse (index, value) entries in index order.
//
// Selection is O(n) and sorts nothing: |v| as an integer key (the fp32 bits
// without the sign order magnitudes; every NaN gets one key above +Inf) is
// narrowed radix digit by digit, 11 + 11 + 10 bits, each a histogram pass
// over the values whose key matches the digits found so far, until the
// threshold key T and the number of values equal to T that are kept are
// known; a last pass in index order emits key > T and the first ties.
// After the first digit, the keys of its threshold bin are gathered, and
// the later digits count those only: three passes over all values in all
// (histogram, gather, emit), or two when the first digit's bin is kept
// whole. The key and the order are plain integers, so every ISA and every
// host selects the same values; the code is portable (no ISA table) since a
// histogram does not vectorise (the block test uses SSE2, which every
// x86-64 has).
#include <cmath>
#include <cstring>

#include "daemon/reduce/codec.h"
#include "daemon/reduce/codec_wire.h"

namespace gsync::reduce {
namespace {

using wire::bits_of;
using wire::kHeaderBytes;

constexpr uint32_t kNanKey = 0x80000000u;
constexpr size_t kDigitBins = 2048;

struct Level {
  int shift;  // digit = (key >> shift) & (2^bits - 1)
  int bits;
};
constexpr Level kLevels[] = {{21, 11}, {10, 11}, {0, 10}};

uint32_t key_of(float f) {
  const uint32_t a = bits_of(f) & 0x7fffffffu;
  return a > 0x7f800000u ? kNanKey : a;
}

// The passes after the first test kScan values at a time for any key that
// can matter (usually none: the kept values are a few percent) with a
// branch-free vector test, and look at each value only in the blocks that
// have one (with the gather, 16 M gradients went from 90 to 60 ms).
constexpr size_t kScan = 16;

// Clamps a key bound to [0, 0x7f800001], where the magnitude bits a =
// bits & 0x7fffffff compare with it as signed integers exactly as the key
// does: below the NaN key, key >= lo iff a >= lo (a NaN's a is above Inf's,
// so above lo too); for the NaN key, key >= lo iff a > Inf's bits.
int32_t scan_bound(int64_t lo) {
  return static_cast<int32_t>(lo <= 0 ? 0 : (lo > 0x7f800001 ? 0x7f800001 : lo));
}

// Whether any of the kScan values at v has key >= the bound's key: a >=
// bound iff bound - 1 - a is negative (no overflow for both in [0, 2^31)),
// so the test is a subtraction and an OR of sign bits. Written with GCC's
// vector extension (SSE2, which every x86-64 has): inlined into the scans,
// the plain loop is unrolled before the vectoriser sees it.
bool any_at_least(const float* v, int32_t bound) {
  using V4 = int32_t __attribute__((vector_size(16)));
  const V4 below = V4{} + (bound - 1);
  V4 any = {};
  for (size_t j = 0; j < kScan; j += 4) {
    V4 w;
    std::memcpy(&w, v + j, sizeof w);
    any |= below - (w & 0x7fffffff);
  }
  return (any[0] | any[1] | any[2] | any[3]) < 0;
}

// Keep key > threshold, and the first `ties` values (in index order) whose
// key equals it.
struct Cut {
  int64_t threshold = -1;
  size_t ties = 0;
};

size_t topk_count(double fraction, size_t count) {
  const double k = std::ceil(fraction * static_cast<double>(count));
  const size_t kept = k >= static_cast<double>(count) ? count : static_cast<size_t>(k);
  if (kept >= 1 || count == 0) return kept;
  return 1;
}

// The first digit's histogram over every value. With a residual it also
// turns r into v = x + r, in place, in the same pass: r holds v until the
// emission pass settles it. Four interleaved histograms keep runs of equal
// digits (common: gradients cluster in a few binades) from serialising on
// one counter.
template <bool kRes>
void first_histogram_of(const float* x, float* r, size_t n, uint32_t* hist) {
  uint32_t sub[4][kDigitBins] = {};
  const int shift = kLevels[0].shift;
  auto value = [&](size_t i) {
    if constexpr (kRes) {
      r[i] = x[i] + r[i];
      return r[i];
    } else {
      return x[i];
    }
  };
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    sub[0][key_of(value(i)) >> shift]++;
    sub[1][key_of(value(i + 1)) >> shift]++;
    sub[2][key_of(value(i + 2)) >> shift]++;
    sub[3][key_of(value(i + 3)) >> shift]++;
  }
  for (; i < n; ++i) sub[0][key_of(value(i)) >> shift]++;
  for (size_t d = 0; d < kDigitBins; ++d) hist[d] = sub[0][d] + sub[1][d] + sub[2][d] + sub[3][d];
}

// Returns where v is: r (turned into v) or x.
const float* first_histogram(const float* x, float* r, size_t n, uint32_t* hist) {
  if (r == nullptr) {
    first_histogram_of<false>(x, r, n, hist);
    return x;
  }
  first_histogram_of<true>(x, r, n, hist);
  return r;
}

// The keys of the values whose first digit is `digit` (the bin the
// threshold is in: usually under 1% of them), gathered once so that the
// later digits look at those keys only. scratch is the output buffer past
// the header, free until emit() writes the entries: room for 4 bytes per
// value, the dense size it has (max_encoded_bytes).
size_t gather(const float* v, size_t n, uint32_t digit, uint8_t* scratch) {
  const int32_t bound = scan_bound(int64_t{digit} << kLevels[0].shift);
  size_t m = 0;
  for (size_t i0 = 0; i0 < n; i0 += kScan) {
    const size_t end = n - i0 < kScan ? n : i0 + kScan;
    if (end - i0 == kScan && !any_at_least(v + i0, bound)) continue;
    for (size_t i = i0; i < end; ++i) {
      const uint32_t key = key_of(v[i]);
      if ((key >> kLevels[0].shift) != digit) continue;
      std::memcpy(scratch + 4 * m, &key, sizeof key);
      ++m;
    }
  }
  return m;
}

// A later digit's histogram, over the gathered keys whose higher digits are
// prefix.
void digit_histogram(const uint8_t* keys, size_t m, const Level& l, uint32_t prefix,
                     uint32_t* hist) {
  std::memset(hist, 0, kDigitBins * sizeof(uint32_t));
  const int above = l.shift + l.bits;
  const uint32_t mask = (1u << l.bits) - 1;
  for (size_t i = 0; i < m; ++i) {
    uint32_t key;
    std::memcpy(&key, keys + 4 * i, sizeof key);
    if ((key >> above) == prefix) hist[(key >> l.shift) & mask]++;
  }
}

// v's k largest keys (1 <= k <= n).
Cut select(const float* v, size_t n, size_t k, const uint32_t* first_hist, uint8_t* scratch) {
  uint32_t hist[kDigitBins];
  std::memcpy(hist, first_hist, sizeof hist);
  uint32_t prefix = 0;
  size_t need = k;  // values still to keep among the keys with this prefix
  size_t gathered = 0;
  for (size_t level = 0;; ++level) {
    const Level& l = kLevels[level];
    if (level > 0) digit_histogram(scratch, gathered, l, prefix, hist);
    size_t above = 0;
    uint32_t d = (1u << l.bits) - 1;
    for (; above + hist[d] < need; --d) above += hist[d];
    need -= above;
    prefix = (prefix << l.bits) | d;
    if (need == hist[d]) {
      // The whole bin is kept: every key from its lowest up.
      return {static_cast<int64_t>(prefix) * (int64_t{1} << l.shift) - 1, 0};
    }
    if (level + 1 == sizeof kLevels / sizeof kLevels[0]) return {prefix, need};
    if (level == 0) gathered = gather(v, n, d, scratch);
  }
}

// One value of the pass in index order: its entry if kept, its residual
// and write-back either way. Returns the entry cursor.
uint8_t* emit_one(const float* v, float* x, float* r, size_t i, int64_t threshold, size_t* ties,
                  bool write_back, uint8_t* e) {
  const int64_t key = key_of(v[i]);
  bool keep = key > threshold;
  if (!keep && key == threshold && *ties > 0) {
    keep = true;  // a tie, and the lowest indices go first
    --*ties;
  }
  if (!keep) {
    if (write_back) x[i] = 0.0f;  // r[i] keeps v: all of it was dropped
    return e;
  }
  const uint32_t index = static_cast<uint32_t>(i);
  std::memcpy(e, &index, sizeof index);
  std::memcpy(e + 4, v + i, sizeof(float));
  if (r) {
    if (write_back) x[i] = v[i];  // before r[i], which v is
    r[i] = 0.0f;                  // v - v; also for a kept NaN or Inf (codec.h)
  }
  return e + 8;
}

// The pass in index order: entries for the kept values, the residual and
// write-back for all. A block with nothing to keep is dropped whole.
size_t emit(const float* v, float* x, float* r, size_t n, Cut cut, bool write_back, uint8_t* out) {
  uint8_t* e = out + kHeaderBytes;
  size_t ties = cut.ties;
  const int32_t bound = scan_bound(cut.ties > 0 ? cut.threshold : cut.threshold + 1);
  for (size_t i0 = 0; i0 < n; i0 += kScan) {
    const size_t end = n - i0 < kScan ? n : i0 + kScan;
    if (end - i0 == kScan && !any_at_least(v + i0, bound)) {
      if (write_back) std::memset(x + i0, 0, kScan * sizeof(float));
      continue;
    }
    for (size_t i = i0; i < end; ++i) e = emit_one(v, x, r, i, cut.threshold, &ties, write_back, e);
  }
  return static_cast<size_t>(e - out);
}

}  // namespace

namespace wire {

size_t encode_topk(const CodecParams& p, float* x, float* r, size_t count, bool write_back,
                   uint8_t* out) {
  const size_t k = topk_count(p.topk_fraction, count);
  // SparCML's rule: sparse only when it is smaller than dense; and a u32
  // index cannot reach past 2^32 values.
  if (count > (uint64_t{1} << 32) || kHeaderBytes + 8 * k >= kHeaderBytes + 4 * count) {
    return encode_dense(x, r, count, write_back, out);
  }
  uint32_t hist[kDigitBins];
  const float* v = first_histogram(x, r, count, hist);
  const Cut cut = select(v, count, k, hist, out + kHeaderBytes);
  const size_t length = emit(v, x, r, count, cut, write_back, out);
  put_header(out, {Format::kSparse, 0, count, k, length});
  return length;
}

}  // namespace wire
}  // namespace gsync::reduce
