// SPDX-License-Identifier: Apache-2.0
//
// A cluster of hosts in one process that runs compressed schedules
// (compress_schedule.h) through the phase pack/unpack the engine uses
// (pack.h), over the schedule tests' driver (schedule_sim.h). Each host
// keeps its own buffers from step to step, as the engine would: the data,
// its error buffers (Schedule::residuals per chunk, zero at the start), a
// send buffer (max_encoded_bytes), the block maxima and the copy slot
// where an encoded final value lands and stays to be forwarded. Phases
// that are not packed run as the engine runs them today: raw bytes, the
// fold in fold order in fp32. Used by tests/unit/test_compress_schedule.cc.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/collective/compress_schedule.h"
#include "daemon/collective/pack.h"
#include "daemon/reduce/codec.h"
#include "tests/util/schedule_sim.h"

namespace gsync::collective::sim {

// One op's shape: the algorithm, the racks' sizes, the codec and where it
// applies, the tensor's elements and how many go in a chunk.
struct Op {
  Algo algo = Algo::kRing;
  std::vector<int> racks;
  reduce::CodecParams params;
  proto::Hops hops = proto::Hops::kCrossHost;
  size_t count = 0, per_chunk = 0;
  int root = 0;  // kTree
};

// A write of the last step, as the wire would count it.
struct Wire {
  int from, to;
  size_t chunk;
  bool packed;
  Xfer kind;
  uint64_t bytes;
};

class Cluster {
 public:
  explicit Cluster(const Op& k) : k_(k), parts_(racks(k.racks)) {
    chunks_ = (k.count + k.per_chunk - 1) / k.per_chunk;
    int n = static_cast<int>(parts_.size());
    hosts_.resize(size_t(n));
    for (int h = 0; h < n; h++) {
      Host& x = hosts_[size_t(h)];
      x.sched = build_schedule(k.algo, parts_, h, chunks_, k.root);
      compress_schedule(parts_, k.params.codec, k.hops, &x.sched);
      x.data.assign(k.count, 0.0f);
      x.residuals.resize(chunks_);
      x.send.resize(chunks_);
      x.copy.resize(chunks_);
      x.maxima.resize(chunks_);
      x.views.resize(chunks_);
      for (size_t c = 0; c < chunks_; c++) {
        size_t m = elems(c);
        x.residuals[c].assign(size_t(x.sched.residuals) * m, 0.0f);
        x.send[c].assign(reduce::max_encoded_bytes(k.params, m), 0);
        x.maxima[c].assign((m + k.params.block - 1) / k.params.block, 0.0f);
        PackView& v = x.views[c];
        v.params = k.params;
        v.data = x.data.data() + c * k.per_chunk;
        v.count = m;
        v.residuals = x.residuals[c].data();
        v.residual_stride = m;
        v.send = x.send[c].data();
        v.maxima = x.maxima[c].data();
      }
    }
  }

  const std::vector<Participant>& parts() const { return parts_; }
  int hosts() const { return static_cast<int>(hosts_.size()); }
  size_t chunks() const { return chunks_; }
  size_t elems(size_t c) const { return std::min(k_.per_chunk, k_.count - c * k_.per_chunk); }
  const Schedule& schedule(int h) const { return hosts_[size_t(h)].sched; }
  const std::vector<float>& data(int h) const { return hosts_[size_t(h)].data; }
  // Element i of error buffer e on host h.
  float residual(int h, int e, size_t i) const {
    size_t c = i / k_.per_chunk;
    return hosts_[size_t(h)].residuals[c][size_t(e) * elems(c) + i % k_.per_chunk];
  }
  const std::vector<Wire>& wire() const { return wire_; }
  // Host h starts over, as after a restart: its error buffers all zero.
  void forget(int h) {
    for (auto& r : hosts_[size_t(h)].residuals) std::fill(r.begin(), r.end(), 0.0f);
  }

  // One allreduce of in[h] (count floats per host), deliveries in an order
  // drawn from seed. False, with a test failure saying why, on a deadlock
  // or bytes that did not decode.
  bool step(const std::vector<std::vector<float>>& in, unsigned seed) {
    wire_.clear();
    // Into the same storage: the views point into it.
    for (int h = 0; h < hosts(); h++)
      std::copy(in[size_t(h)].begin(), in[size_t(h)].end(), hosts_[size_t(h)].data.begin());
    std::vector<Schedule> s;
    for (const auto& x : hosts_) s.push_back(x.sched);
    bool ok = true;
    Hooks hooks;
    hooks.begin = [&](int h, size_t c, const Phase& ph) { return begin(h, c, ph); };
    hooks.end = [&](int h, size_t c, const Phase& ph, std::vector<Delivery>& d) {
      ok &= end(h, c, ph, d);
    };
    if (!run(s, seed, hooks)) {
      ADD_FAILURE() << "deadlock";
      return false;
    }
    return ok;
  }

 private:
  struct Host {
    Schedule sched;
    std::vector<float> data;
    std::vector<std::vector<float>> residuals, maxima;  // per chunk
    std::vector<std::vector<uint8_t>> send, copy;       // per chunk
    std::vector<PackView> views;                        // per chunk
  };

  std::vector<uint8_t> begin(int h, size_t c, const Phase& ph) {
    Host& x = hosts_[size_t(h)];
    PackView& v = x.views[c];
    Outgoing o{reinterpret_cast<const uint8_t*>(v.data), v.count * sizeof(float)};
    if (ph.packed) o = begin_phase(ph, v, Arrival{-1, x.copy[c].data(), x.copy[c].size()});
    for (const auto& t : ph.sends) wire_.push_back({h, t.peer, c, ph.packed, t.kind, o.len});
    return std::vector<uint8_t>(o.bytes, o.bytes + o.len);
  }

  // A phase that is not packed, as the engine runs it: a final value lands
  // in the data; contributions fold in fold order, in fp32.
  void end_raw(int h, const Phase& ph, PackView& v, std::vector<Delivery>& in) {
    bool reduces = false;
    for (const auto& d : in) {
      if (d.kind == Xfer::kCopy) std::memcpy(v.data, d.bytes.data(), v.count * sizeof(float));
      reduces |= d.kind == Xfer::kReduce;
    }
    if (!reduces) return;
    std::vector<float> acc;
    for (int j : ph.fold) {
      const float* src = v.data;
      for (const auto& d : in)
        if (j != h && d.from == j && d.kind == Xfer::kReduce)
          src = reinterpret_cast<const float*>(d.bytes.data());
      if (acc.empty()) {
        acc.assign(src, src + v.count);
      } else {
        for (size_t i = 0; i < v.count; i++) acc[i] += src[i];
      }
    }
    std::memcpy(v.data, acc.data(), v.count * sizeof(float));
  }

  bool end(int h, size_t c, const Phase& ph, std::vector<Delivery>& in) {
    Host& x = hosts_[size_t(h)];
    PackView& v = x.views[c];
    if (!ph.packed) {
      end_raw(h, ph, v, in);
      return true;
    }
    std::vector<Arrival> arrived;
    for (auto& d : in) {
      // What lands must fit the landing area the receiver sized.
      size_t room = d.kind == Xfer::kMaxima ? v.blocks() * sizeof(float) : x.send[c].size();
      EXPECT_LE(d.bytes.size(), room) << "host " << h << " chunk " << c << " from " << d.from;
      if (d.kind == Xfer::kCopy) {
        x.copy[c] = d.bytes;
        arrived.push_back({d.from, x.copy[c].data(), x.copy[c].size()});
      } else {
        arrived.push_back({d.from, d.bytes.data(), d.bytes.size()});
      }
    }
    std::string err = end_phase(ph, h, v, arrived);
    EXPECT_EQ(err, "") << "host " << h << " chunk " << c;
    return err.empty();
  }

  Op k_;
  std::vector<Participant> parts_;
  size_t chunks_ = 0;
  std::vector<Host> hosts_;
  std::vector<Wire> wire_;
};

}  // namespace gsync::collective::sim
