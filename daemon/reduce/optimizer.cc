// SPDX-License-Identifier: Apache-2.0
#include "daemon/reduce/optimizer.h"

#include <cmath>
#include <cstring>

#include "daemon/reduce/half.h"

namespace gsync::reduce {

void to_f32(const void* src, proto::DType dtype, size_t n, float* dst) {
  // An empty shard's arrays have no data pointer, and memcpy may not be
  // given a null one even for 0 bytes.
  if (n == 0) return;
  switch (dtype) {
    case proto::DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case proto::DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; i++) dst[i] = half::f16_to_f32(s[i]);
      return;
    }
    case proto::DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; i++) dst[i] = half::bf16_to_f32(s[i]);
      return;
    }
    default:
      return;  // the parameter server takes the three float types only
  }
}

void from_f32(const float* src, size_t n, proto::DType dtype, void* dst) {
  if (n == 0) return;  // as to_f32
  switch (dtype) {
    case proto::DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case proto::DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; i++) d[i] = half::f32_to_f16(src[i]);
      return;
    }
    case proto::DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; i++) d[i] = half::f32_to_bf16(src[i]);
      return;
    }
    default:
      return;
  }
}

void add_f32(const void* src, proto::DType dtype, size_t n, float* acc) {
  switch (dtype) {
    case proto::DType::kF32: {
      const auto* s = static_cast<const float*>(src);
      for (size_t i = 0; i < n; i++) acc[i] += s[i];
      return;
    }
    case proto::DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; i++) acc[i] += half::f16_to_f32(s[i]);
      return;
    }
    case proto::DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; i++) acc[i] += half::bf16_to_f32(s[i]);
      return;
    }
    default:
      return;
  }
}

void sgd_step(float* p, float* m, const float* grad, float scale, size_t n, const SgdArgs& a) {
  const float lr = a.lr, mu = a.momentum, wd = a.weight_decay;
  if (mu == 0) {
    for (size_t i = 0; i < n; i++) {
      float d = grad[i] * scale + wd * p[i];
      p[i] = p[i] - lr * d;
    }
    return;
  }
  if (a.first) {
    for (size_t i = 0; i < n; i++) {
      float d = grad[i] * scale + wd * p[i];
      m[i] = d;
      p[i] = p[i] - lr * d;
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    float d = grad[i] * scale + wd * p[i];
    float b = mu * m[i] + d;
    m[i] = b;
    p[i] = p[i] - lr * b;
  }
}

void adam_step(float* p, float* m, float* v, const float* grad, float scale, size_t n,
               const AdamArgs& a) {
  const float b1 = a.beta1, b2 = a.beta2, eps = a.eps, wd = a.weight_decay;
  // The step's constants in double, rounded once to float: the same on
  // every host and in a reference.
  const double t = static_cast<double>(a.t);
  const float step = static_cast<float>(a.lr / (1.0 - std::pow(double(b1), t)));
  const float root2 = static_cast<float>(std::sqrt(1.0 - std::pow(double(b2), t)));
  const float keep = a.decoupled ? 1.0f - a.lr * wd : 1.0f;
  const float gwd = a.decoupled ? 0.0f : wd;
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  for (size_t i = 0; i < n; i++) {
    float pi = p[i] * keep;
    float g = grad[i] * scale + gwd * pi;
    float mi = b1 * m[i] + c1 * g;
    float vi = b2 * v[i] + c2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) / root2 + eps;
    p[i] = pi - step * (mi / denom);
  }
}

}  // namespace gsync::reduce
