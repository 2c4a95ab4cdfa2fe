// Portable kernels (no ISA flags): the fallback on any x86-64 and the model the SIMD TUs follow.
#include "kernels.h"

#include <sonde/dtype.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sonde::threaded {
namespace {

// Element k of row n of a [N, K] weight (any alignment: safetensors data may be unaligned).
float load_w(const void* W, WType wt, std::int64_t K, std::int64_t n, std::int64_t k) {
  const auto* p = static_cast<const unsigned char*>(W);
  if (wt == WType::q8) {  // w = float(q) * s (kernels.h)
    const unsigned char* blk = p + n * q8_row_bytes(K) + k / kQ8Block * kQ8BlockBytes;
    float s;
    std::memcpy(&s, blk, 4);
    return static_cast<float>(static_cast<std::int8_t>(blk[4 + k % kQ8Block])) * s;
  }
  if (wt == WType::f32) {
    float f;
    std::memcpy(&f, p + (n * K + k) * 4, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, p + (n * K + k) * 2, 2);
  return wt == WType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void gemv(const float* x, std::int64_t M, std::int64_t ldx, const void* W, WType wt, std::int64_t K, std::int64_t n0,
          std::int64_t n1, float* y, std::int64_t ldy) {
  for (std::int64_t n = n0; n < n1; ++n)
    for (std::int64_t m = 0; m < M; ++m) {
      float acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += x[m * ldx + k] * load_w(W, wt, K, n, k);
      y[m * ldy + n] = acc;
    }
}

float dot(const float* a, const float* b, std::int64_t n) {
  float acc = 0;
  for (std::int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void axpy(float a, const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float dots(const float* q, const float* k, std::int64_t ks, std::int64_t n, std::int64_t d, float* s) {
  float top = -__builtin_inff();
  for (std::int64_t u = 0; u < n; ++u) top = std::max(top, s[u] = dot(q, k + u * ks, d));
  return top;
}

void axpys(const float* p, const float* v, std::int64_t vs, std::int64_t n, std::int64_t d, float* acc) {
  for (std::int64_t u = 0; u < n; ++u) axpy(p[u], v + u * vs, acc, d);
}

float exp_block(float* s, std::int64_t n, float m) {
  float sum = 0;
  for (std::int64_t u = 0; u < n; ++u) {
    s[u] = s[u] == -__builtin_inff() ? 0.0f : __builtin_expf(s[u] - m);
    sum += s[u];
  }
  return sum;
}

void scale(float a, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] *= a;
}

void silu_mul(const float* g, const float* u, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void add(const float* a, const float* b, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace

const Kernels& kernels_scalar() {
  static const Kernels k{"scalar", gemv, nullptr, nullptr, nullptr, dot, axpy, dots, axpys, nullptr, nullptr, nullptr, nullptr, exp_block, scale, silu_mul, add};
  return k;
}

}  // namespace sonde::threaded
