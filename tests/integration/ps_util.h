// SPDX-License-Identifier: Apache-2.0
//
// What the parameter server's integration tests share: deterministic
// gradients, weights and initial values, and the reference the servers'
// results are checked against bit for bit (docs/parameter-server.md).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gsync/gsync.h"
#include "tests/integration/bed_util.h"

namespace gsync::test {

// Worker r's gradient at clock c, element i; its weight (the samples it
// stands for) differs per rank, so the average is a weighted one.
inline float grad(int r, uint64_t c, size_t i) {
  return std::sin(0.001f * float(i) + 0.37f * float(r) + 0.11f * float(c)) * (1.0f + 0.25f * r);
}
inline double weight_of(int r) { return 1.0 + r; }
inline float init(size_t i) { return 0.01f * float(i % 97) - 0.3f; }

struct PsRun {
  gsync_ps_opts_t opts;
  int sync = GSYNC_SYNC_BSP;
  uint32_t staleness = 0;
  bool reproducible = false;  // the session's (docs/reproducibility.md)
};

// The reproducible mode's sum of one element's values, as its definition
// gives it (docs/reproducibility.md), apart from libgsync's code: exact,
// as a long double (it fits a double too).
inline long double repro_grid_sum(const std::vector<float>& x) {
  int bits = 0;
  while ((1 << bits) < static_cast<int>(x.size())) bits++;
  const int p = 30 - bits;
  uint32_t code = 0;
  for (float v : x) code = std::max(code, (std::bit_cast<uint32_t>(v) >> 23) & 0xffu);
  const int e = static_cast<int>(code) - 126;
  int64_t sum = 0;
  for (float v : x) sum += static_cast<int64_t>(std::nearbyintl(std::ldexp(static_cast<long double>(v), p - e)));
  return std::ldexp(static_cast<long double>(sum), e - p);
}

// Its weighted average: each rank's x * w rounded to fp32, the weights
// summed the same way, the quotient in double, rounded to fp32.
inline float repro_weighted_avg(const std::vector<float>& x, const std::vector<double>& w) {
  std::vector<float> y(x.size()), wf(x.size());
  for (size_t r = 0; r < x.size(); r++) {
    y[r] = static_cast<float>(static_cast<double>(x[r]) * w[r]);
    wf[r] = static_cast<float>(w[r]);
  }
  return static_cast<float>(static_cast<double>(repro_grid_sum(y)) /
                            static_cast<double>(repro_grid_sum(wf)));
}

// The servers' arithmetic, as docs/parameter-server.md gives it, a clock
// at a time: each host folds its ranks' gradients weighed (fp32: acc = g0 *
// w0, then acc + g * w in local-rank order), the server sums the hosts'
// folds in host order and scales by float(1 / sum of weights), then one
// optimizer step. In a reproducible job the gradient is the workers'
// reproducible weighted average, which rank 0 alone pushes with weight 1.
class Reference {
 public:
  Reference(const PsRun& s, const std::vector<int>& per_host, size_t n)
      : o_(s.opts), per_host_(per_host), p_(n), m_(n, 0.0f), v_(n, 0.0f), g_(n),
        reproducible_(s.reproducible) {
    for (size_t i = 0; i < n; i++) p_[i] = init(i);
    double total = 0;
    int world = 0;
    for (int k : per_host) world += k;
    for (int r = 0; r < world; r++) total += weight_of(r);
    scale_ = reproducible_ ? 1.0f : static_cast<float>(1.0 / total);
  }
  const std::vector<float>& values() const { return p_; }
  const std::vector<float>& momentum() const { return m_; }
  uint64_t clock() const { return clock_; }
  // Steps through clock - 1; `applied` (when not empty) says which clocks
  // update (the anomaly guard's rollback makes a clock as if it never was).
  void run_to(uint64_t clock, const std::vector<bool>& applied = {}) {
    for (; clock_ < clock; clock_++)
      if (applied.empty() || applied[clock_]) step(clock_);
  }

 private:
  void step(uint64_t c) {
    const size_t n = p_.size();
    int world = 0;
    for (int k : per_host_) world += k;
    for (size_t i = 0; i < n && reproducible_; i++) {
      std::vector<float> x(static_cast<size_t>(world));
      std::vector<double> w(static_cast<size_t>(world));
      for (int r = 0; r < world; r++) x[size_t(r)] = grad(r, c, i), w[size_t(r)] = weight_of(r);
      g_[i] = repro_weighted_avg(x, w);
    }
    for (size_t i = 0; i < n && !reproducible_; i++) {
      int r = 0;
      float sum = 0;
      for (size_t h = 0; h < per_host_.size(); h++) {
        float acc = grad(r, c, i) * static_cast<float>(weight_of(r));
        r++;
        for (int k = 1; k < per_host_[h]; k++, r++)
          acc = acc + grad(r, c, i) * static_cast<float>(weight_of(r));
        sum = h == 0 ? acc : sum + acc;
      }
      g_[i] = sum;
    }
    const gsync_ps_opts_t& o = o_;
    const uint64_t t = ++t_;
    if (o.optimizer == GSYNC_OPT_SGD) {
      for (size_t i = 0; i < n; i++) {
        float d = g_[i] * scale_ + o.weight_decay * p_[i];
        if (o.momentum != 0) {
          m_[i] = t == 1 ? d : o.momentum * m_[i] + d;
          d = m_[i];
        }
        p_[i] = p_[i] - o.lr * d;
      }
      return;
    }
    const bool decoupled = o.optimizer == GSYNC_OPT_ADAMW;
    const float step = static_cast<float>(o.lr / (1.0 - std::pow(double(o.beta1), double(t))));
    const float root2 = static_cast<float>(std::sqrt(1.0 - std::pow(double(o.beta2), double(t))));
    const float keep = decoupled ? 1.0f - o.lr * o.weight_decay : 1.0f;
    const float gwd = decoupled ? 0.0f : o.weight_decay;
    for (size_t i = 0; i < n; i++) {
      float pi = p_[i] * keep;
      float gi = g_[i] * scale_ + gwd * pi;
      float mi = o.beta1 * m_[i] + (1.0f - o.beta1) * gi;
      float vi = o.beta2 * v_[i] + (1.0f - o.beta2) * (gi * gi);
      m_[i] = mi;
      v_[i] = vi;
      float denom = std::sqrt(vi) / root2 + o.eps;
      p_[i] = pi - step * (mi / denom);
    }
  }

  gsync_ps_opts_t o_;
  std::vector<int> per_host_;
  std::vector<float> p_, m_, v_, g_;
  float scale_ = 1;
  bool reproducible_ = false;
  uint64_t clock_ = 0, t_ = 0;  // clocks gone through; optimizer steps taken
};

// The parameters after `clocks` clocks (those `applied` says).
inline std::vector<float> reference(const PsRun& s, const std::vector<int>& per_host, size_t n,
                                    uint64_t clocks, const std::vector<bool>& applied = {}) {
  Reference ref(s, per_host, n);
  ref.run_to(clocks, applied);
  return ref.values();
}

inline int connect_ps(const testbed::Testbed& bed, const std::string& job, const std::vector<Place>& p,
               int rank, const PsRun& s, gsync_comm_t** comm) {
  return connect_place(bed, job, p, rank, comm, 0, 60000, s.sync, s.staleness);
}

inline uint64_t bits_of(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    h = (h ^ b) * 1099511628211ull;
  }
  return h;
}



}  // namespace gsync::test
