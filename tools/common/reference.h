// SPDX-License-Identifier: Apache-2.0
//
// Deterministic data for allreduce checks and the result each element must
// have, written from the documented semantics (docs/reduce.md) and not from
// the daemon's kernels: accumulate in fp32 (fp16/bf16/fp32), fp64, int32 or uint8,
// fold ranks in order, round once to the dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gsync/gsync.h"

namespace gsync::tools {

// Small integers: every sum, min, max of up to 8 ranks is exact in every dtype.
inline int test_value(int rank, size_t i) {
  return static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3 + i / 1000) % 11) - 5;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// What gsync.h defines: no weighted average of integers, and bytes are
// summed (wrapping), not averaged.
inline bool defined_op(int dtype, int op) {
  if (dtype == GSYNC_UINT8) return op == GSYNC_SUM || op == GSYNC_MIN || op == GSYNC_MAX;
  return !(dtype == GSYNC_INT32 && op == GSYNC_WEIGHTED_AVG);
}

inline size_t elem_size(int dtype) {
  switch (dtype) {
    case GSYNC_FLOAT16:
    case GSYNC_BFLOAT16: return 2;
    case GSYNC_FLOAT64: return 8;
    case GSYNC_UINT8: return 1;
    default: return 4;
  }
}

// Writes v as dtype at element i of buf.
inline void store(void* buf, int dtype, size_t i, double v) {
  switch (dtype) {
    case GSYNC_FLOAT32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case GSYNC_FLOAT64: static_cast<double*>(buf)[i] = v; break;
    case GSYNC_INT32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    // A negative value wraps (-5 is 251): min and max see both ends.
    case GSYNC_UINT8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(static_cast<int>(v)); break;
    case GSYNC_FLOAT16: static_cast<_Float16*>(buf)[i] = static_cast<_Float16>(static_cast<float>(v)); break;
    case GSYNC_BFLOAT16: static_cast<uint16_t*>(buf)[i] = float_to_bf16(static_cast<float>(v)); break;
  }
}

inline double load(const void* buf, int dtype, size_t i) {
  switch (dtype) {
    case GSYNC_FLOAT32: return static_cast<const float*>(buf)[i];
    case GSYNC_FLOAT64: return static_cast<const double*>(buf)[i];
    case GSYNC_INT32: return static_cast<const int32_t*>(buf)[i];
    case GSYNC_UINT8: return static_cast<const uint8_t*>(buf)[i];
    case GSYNC_FLOAT16: return static_cast<float>(static_cast<const _Float16*>(buf)[i]);
    case GSYNC_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(buf)[i]);
  }
  return NAN;
}

// The expected result at element i, following the documented semantics:
// accumulate in fp32 (fp16/bf16/fp32), fp64 or int32, in rank order, round
// once to the dtype.
inline double expected(int dtype, int op, int world, size_t i) {
  if (dtype == GSYNC_FLOAT64) {
    double acc = test_value(0, i);
    double wsum = 0;
    for (int r = 0; r < world; r++) wsum += r + 1;
    if (op == GSYNC_WEIGHTED_AVG) acc = acc * (1.0 / wsum);
    for (int r = 1; r < world; r++) {
      double x = test_value(r, i);
      if (op == GSYNC_SUM || op == GSYNC_AVG) acc += x;
      if (op == GSYNC_MIN) acc = x < acc ? x : acc;
      if (op == GSYNC_MAX) acc = x > acc ? x : acc;
      if (op == GSYNC_WEIGHTED_AVG) acc += x * ((r + 1) / wsum);
    }
    if (op == GSYNC_AVG) acc /= world;
    return acc;
  }
  if (dtype == GSYNC_INT32) {
    int32_t acc = test_value(0, i);
    for (int r = 1; r < world; r++) {
      int32_t x = test_value(r, i);
      if (op == GSYNC_SUM || op == GSYNC_AVG) acc += x;
      if (op == GSYNC_MIN) acc = x < acc ? x : acc;
      if (op == GSYNC_MAX) acc = x > acc ? x : acc;
    }
    if (op == GSYNC_AVG) acc /= world;
    return acc;
  }
  if (dtype == GSYNC_UINT8) {  // sum wraps mod 256; min and max unsigned
    auto byte = [&](int r) { return static_cast<uint8_t>(test_value(r, i)); };
    uint8_t acc = byte(0);
    for (int r = 1; r < world; r++) {
      const uint8_t x = byte(r);
      if (op == GSYNC_SUM) acc = static_cast<uint8_t>(acc + x);
      if (op == GSYNC_MIN) acc = x < acc ? x : acc;
      if (op == GSYNC_MAX) acc = x > acc ? x : acc;
    }
    return acc;
  }
  double wsum = 0;
  for (int r = 0; r < world; r++) wsum += r + 1;
  float acc = static_cast<float>(test_value(0, i));
  if (op == GSYNC_WEIGHTED_AVG) acc = acc * static_cast<float>(1.0 / wsum);
  for (int r = 1; r < world; r++) {
    float x = static_cast<float>(test_value(r, i));
    if (op == GSYNC_SUM || op == GSYNC_AVG) acc += x;
    if (op == GSYNC_MIN) acc = x < acc ? x : acc;
    if (op == GSYNC_MAX) acc = x > acc ? x : acc;
    if (op == GSYNC_WEIGHTED_AVG) acc += x * static_cast<float>((r + 1) / wsum);
  }
  if (op == GSYNC_AVG) acc /= static_cast<float>(world);
  // Round once to the dtype, as the daemon does on store.
  char tmp[8];
  store(tmp, dtype, 0, acc);
  return load(tmp, dtype, 0);
}

}  // namespace gsync::tools
