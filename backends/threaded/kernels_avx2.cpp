// AVX2 + FMA + F16C kernels (flags set per file in CMakeLists.txt); the path for x86-64 CPUs
// without AVX-512. Same contracts as kernels.h; no sonde or standard-library inline code.
#include "kernels.h"

#include <immintrin.h>

#include <algorithm>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

float dot(const float* a, const float* b, i64 n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  i64 i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  float r = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

void axpy(float a, const float* x, float* y, i64 n) {
  i64 i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

float dots(const float* q, const float* k, i64 ks, i64 n, i64 d, float* s) {
  float top = -__builtin_inff();
  for (i64 u = 0; u < n; ++u) top = std::max(top, s[u] = dot(q, k + u * ks, d));
  return top;
}

void axpys(const float* p, const float* v, i64 vs, i64 n, i64 d, float* acc) {
  for (i64 u = 0; u < n; ++u) axpy(p[u], v + u * vs, acc, d);
}

float exp_block(float* s, i64 n, float m) {
  float sum = 0;
  for (i64 u = 0; u < n; ++u) {
    s[u] = s[u] == -__builtin_inff() ? 0.0f : __builtin_expf(s[u] - m);
    sum += s[u];
  }
  return sum;
}

void scale(float a, float* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] *= a;
}

void silu_mul(const float* g, const float* u, float* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = g[i] / (1.0f + __builtin_expf(-g[i])) * u[i];
}

void add(const float* a, const float* b, float* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace

const Kernels& kernels_avx2() {
  static const Kernels k{"avx2", gemv_avx2, nullptr, nullptr, nullptr, dot, axpy, dots, axpys, nullptr, nullptr, nullptr, nullptr, exp_block, scale, silu_mul, add};
  return k;
}

}  // namespace sonde::threaded
