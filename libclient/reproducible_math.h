// SPDX-License-Identifier: Apache-2.0
//
// The arithmetic of a reproducible allreduce (docs/reproducibility.md). Each
// element's contributions are put on one fixed-point grid before anything is
// added, so the sum is of integers, which add the same in any order and any
// grouping - whatever the hosts, racks, algorithm, chunking or transport.
//
//   code(x)  the biased exponent field of x as fp32: 0 for zero and
//            subnormals, 255 for Inf and NaN, so |x| < 2^(code - 126).
//   C        the largest code over every rank's x (an allreduce max of
//            bytes), E = C - 126: every |x| < 2^E.
//   q        round-half-even(x * 2^(P - E)) as int32, P = precision_bits(n):
//            |q| <= 2^P and n of them sum without overflow.
//   S        the sum of every rank's q (an allreduce sum of int32).
//   result   S * 2^(E - P), rounded once to fp32 (an average divides by n
//            first, in double; fp16/bf16 round that fp32 once more).
//
// Where some rank's x is Inf or NaN (C == 255), q counts the kinds instead
// (NaN 1, +Inf 1 << 10, -Inf 1 << 20) and the result is what IEEE addition
// gives: NaN if any NaN or both infinities, else the infinity.
//
// Nothing here knows the session: the unit test runs it against a float64
// reference, and the slot path below proves it gives the two-phase bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/ops.h"

namespace gsync::client::repro {

// The kinds of a non-finite element are counted in 10-bit fields.
inline constexpr int kMaxWorld = 1023;
inline constexpr uint8_t kNonFinite = 255;

// Bits below an element's largest contribution each contribution keeps:
// 30 - ceil(log2(world)) (28 for 4 ranks, 24 for 64, 20 for 1023).
int precision_bits(int world);

// Whether the reproducible mode covers this dtype and op: sums and
// averages of fp32, fp16 and bf16 (min, max and int32 are already
// order-free; fp64 is not covered).
bool covered(proto::DType dtype, proto::RedOp op);

// One rank's contributions as fp32: the tensor's values (a weighted
// average's x * weight, rounded once, then the weight itself last), read
// where they lie.
struct Source {
  const void* buf = nullptr;
  size_t count = 0;
  proto::DType dtype = proto::DType::kF32;
  proto::RedOp op = proto::RedOp::kSum;
  double weight = 0;
  size_t n_values() const { return count + (op == proto::RedOp::kWeightedAvg ? 1 : 0); }
};
size_t n_values(size_t count, proto::RedOp op);
// Every value of src, as fp32, into out (n_values of them).
void contributions(const Source& src, float* out);

void exponent_codes(const Source& src, uint8_t* codes);
// q for every value, against the codes every rank agreed on.
void quantise(const Source& src, const uint8_t* max_codes, int world, int32_t* q);
// The same for values [begin, begin + n) of src: codes, max_codes and q
// hold that range's n (a large tensor goes segment by segment).
void exponent_codes(const Source& src, size_t begin, size_t n, uint8_t* codes);
void quantise(const Source& src, size_t begin, size_t n, const uint8_t* max_codes, int world,
              int32_t* q);
// The same over values already in fp32 (the slot path, the tests).
void contributions(const void* buf, size_t count, proto::DType dtype, proto::RedOp op,
                   double weight, float* out);
void exponent_codes(const float* x, size_t n, uint8_t* codes);
void quantise(const float* x, const uint8_t* max_codes, size_t n, int world, int32_t* q);
// The result into the user's buffer from the summed q and the codes.
void finish(const int32_t* sums, const uint8_t* max_codes, size_t count, int world,
            proto::DType dtype, proto::RedOp op, void* out);
// One summed value, decoded (a weighted average's total weight).
double decode_value(int32_t sum, uint8_t max_code, int world);
// Elements [begin, begin + n) of out from that range's sums and codes,
// each divided by divisor (1 for a sum, the world for an average, the
// decoded total weight for a weighted average) before it is rounded.
void finish_range(const int32_t* sums, const uint8_t* max_codes, size_t begin, size_t n,
                  int world, proto::DType dtype, double divisor, void* out);

// The slot path for small tensors: every rank's contributions side by side
// (rank r's n values at slots + r * n, gathered by an int32 sum in which
// each rank fills its own slot and zeros elsewhere) folded locally into the
// same codes and sums the two-phase path gets from the daemons.
void fold_slots(const float* slots, size_t n, int world, uint8_t* max_codes, int32_t* sums);

}  // namespace gsync::client::repro
