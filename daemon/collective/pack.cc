// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/pack.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "daemon/reduce/reduce.h"

namespace gsync::collective {
namespace {

const Arrival* from(const std::vector<Arrival>& in, int peer) {
  for (const auto& a : in)
    if (a.peer == peer) return &a;
  return nullptr;
}

std::string named(int peer, const std::string& why) {
  return why.empty() ? why : fmt::format("participant {}: {}", peer, why);
}

// The agreed maxima: NaN wins (a flagged block on any host is flagged on
// all), then the larger; the same on every host whatever the order.
std::string fold_maxima(PackView& v, const std::vector<Arrival>& in) {
  const size_t n = v.blocks();
  for (const auto& a : in) {
    if (a.len != n * sizeof(float))
      return named(a.peer, fmt::format("{} bytes of block maxima, expected {}", a.len,
                                       n * sizeof(float)));
    for (size_t b = 0; b < n; b++) {
      float m;
      std::memcpy(&m, a.bytes + b * sizeof(float), sizeof m);
      if (!std::isnan(m) && std::signbit(m))
        return named(a.peer, fmt::format("block {} has a negative maximum {}", b, m));
      float& mine = v.maxima[b];
      if (std::isnan(mine)) continue;
      if (std::isnan(m) || m > mine) mine = m;
    }
  }
  return "";
}

// Every host of a symmetric phase folds the same encodings (its own is in
// its send buffer) in the phase's fold order.
std::string fold_symmetric(const Phase& ph, int self, PackView& v, const std::vector<Arrival>& in) {
  std::vector<const uint8_t*> bytes;
  std::vector<size_t> lens;
  std::vector<int> who;
  for (int j : ph.fold) {
    if (j == self) {
      bytes.push_back(v.send);
      lens.push_back(v.send_len);
    } else {
      const Arrival* a = from(in, j);
      if (!a) return named(j, "nothing arrived");
      bytes.push_back(a->bytes);
      lens.push_back(a->len);
    }
    who.push_back(j);
  }
  if (ph.shared_scale)
    return reduce::int8_sum(bytes.data(), lens.data(), bytes.size(), v.count, v.data);
  if (bytes.empty()) return "";
  std::string err = named(who[0], reduce::decode(bytes[0], lens[0], v.count, v.data));
  for (size_t i = 1; err.empty() && i < bytes.size(); i++)
    err = named(who[i], reduce::decode_add(bytes[i], lens[i], v.count, v.data));
  return err;
}

// Error buffer e, or none (-1).
float* error_buffer(const PackView& v, int e) { return e < 0 ? nullptr : v.residual(e); }

// After the encoding of a shared value (Phase::shared): the lead keeps what
// it dropped for its own contribution of the next step; every holder leaves
// the scratch error buffer zero for the next shared encoding.
void settle_shared(const Phase& ph, PackView& v) {
  float* scratch = v.residual(ph.residual);
  if (ph.feedback >= 0) {
    float* keep = v.residual(ph.feedback);
    const void* in[] = {keep, scratch};
    void* out[] = {keep};
    reduce::ReduceArgs a;
    a.inputs = in;
    a.n_inputs = 2;
    a.outputs = out;
    a.n_outputs = 1;
    a.count = v.count;
    reduce::reduce(a);
  }
  std::memset(scratch, 0, v.count * sizeof(float));
}

}  // namespace

Outgoing begin_phase(const Phase& ph, PackView& v, const Arrival& copy_in) {
  if (ph.select) {
    // The encoding itself is not sent: this phase's sends (if any) carry the
    // merged sum, exactly.
    reduce::encode(v.params, v.data, error_buffer(v, ph.residual), v.count, nullptr, true, v.send);
  }
  switch (ph.send) {
    case SendMode::kRaw:
      return {reinterpret_cast<const uint8_t*>(v.data), v.count * sizeof(float)};
    case SendMode::kEncode:
      v.send_len = reduce::encode(v.params, v.data, error_buffer(v, ph.residual), v.count,
                                  ph.shared_scale ? v.maxima : nullptr, ph.write_back, v.send);
      if (ph.shared) settle_shared(ph, v);
      return {v.send, v.send_len};
    case SendMode::kExact:
      // Exact but for a -0.0, which decodes as +0.0: none can be here. Every
      // value entered through an encoding with an error buffer (v = x + r,
      // r from +0.0: v is never -0.0), and a sum is -0.0 only if all its
      // terms are.
      v.send_len = reduce::encode_exact_sparse(v.data, v.count, v.send);
      return {v.send, v.send_len};
    case SendMode::kForward:
      return {copy_in.bytes, copy_in.len};
    case SendMode::kMaxima:
      reduce::block_absmax(v.params, v.data, error_buffer(v, ph.residual), v.count, v.maxima);
      return {reinterpret_cast<const uint8_t*>(v.maxima), v.blocks() * sizeof(float)};
  }
  return {};
}

std::string end_phase(const Phase& ph, int self, PackView& v, const std::vector<Arrival>& in) {
  if (ph.send == SendMode::kMaxima) return fold_maxima(v, in);
  bool copy = false, reduces = false;
  for (const auto& r : ph.recvs) {
    copy |= r.kind == Xfer::kCopy;
    reduces |= r.kind == Xfer::kReduce;
  }
  if (copy) {
    if (in.size() != 1) return "a final value needs exactly one arrival";
    return named(in[0].peer, reduce::decode(in[0].bytes, in[0].len, v.count, v.data));
  }
  if (!reduces) return "";
  if (ph.symmetric) return fold_symmetric(ph, self, v, in);
  // Asymmetric: one host folds what its peers sent into its own value, in
  // fold order; nobody else computes this sum, so only the order matters.
  for (int j : ph.fold) {
    if (j == self) continue;
    const Arrival* a = from(in, j);
    if (!a) return named(j, "nothing arrived");
    std::string err = reduce::decode_add(a->bytes, a->len, v.count, v.data);
    if (!err.empty()) return named(j, err);
  }
  return "";
}

}  // namespace gsync::collective
