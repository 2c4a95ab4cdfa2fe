// AVX2 + FMA + F16C kernels (flags set per file in CMakeLists.txt); the path for x86-64 CPUs
// without AVX-512 VNNI. Same contracts as kernels.h; no sonde or standard-library inline code.
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

// Products with vpmaddubsw, which needs an unsigned operand: |x| times sign(x)*w (|x|, |w| <=
// 127, so a pair sum <= 2*127*127 fits int16), then pairs to int32; per block, scaled by xs*ws.
// Rows n_r = n + r * run (r < R) against x rows m < M; y[m * ldy + n_r]. Each (x row, W row)
// pair sums its blocks in order into its own accumulator. Rows are read as runs with their int8
// values and scales prefetched, as in the AVX-512 kernel (kernels_avx512.cpp explains why).
template <int M, int R> void q8_rows(const Q8Act& x, const Q8Rows& w, i64 n, i64 run, float* y, i64 ldy) {
  const i64 nb = w.kp / kQ8Block;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[M][R];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) acc[m][r] = _mm256_setzero_ps();
  const std::int8_t* wq[R];
  const float* wsc[R];
  for (int r = 0; r < R; ++r) wq[r] = w.q + (n + r * run) * w.kp, wsc[r] = w.scale + (n + r * run) * nb;
  for (i64 b = 0; b < nb; ++b) {
    __m256i xv[M], xa[M];
    for (int m = 0; m < M; ++m) {
      xv[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + m * x.kp + b * kQ8Block));
      xa[m] = _mm256_abs_epi8(xv[m]);
    }
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(wq[r] + b * kQ8Block) + 1024, _MM_HINT_T0);
      if (b % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(wsc[r] + b) + 256, _MM_HINT_T0);
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq[r] + b * kQ8Block));
      const float ws = wsc[r][b];
      for (int m = 0; m < M; ++m) {
        const __m256i p32 = _mm256_madd_epi16(_mm256_maddubs_epi16(xa[m], _mm256_sign_epi8(wv, xv[m])), ones);
        acc[m][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_set1_ps(x.scale[m * nb + b] * ws), acc[m][r]);
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) y[m * ldy + n + r * run] = hsum(acc[m][r]);
}

constexpr int kQ8Streams = 4;

template <int M> void q8_gemv_m(const Q8Act& x, const Q8Rows& w, i64 n0, i64 n1, float* y, i64 ldy) {
  const i64 run = (n1 - n0) / kQ8Streams;
  for (i64 i = 0; i < run; ++i) q8_rows<M, kQ8Streams>(x, w, n0 + i, run, y, ldy);
  for (i64 n = n0 + kQ8Streams * run; n < n1; ++n) q8_rows<M, 1>(x, w, n, 0, y, ldy);
}

// x rows in pairs: 2 x 4 accumulators and the x registers fill the 16 ymm registers.
void q8_gemv(const Q8Act& x, i64 M, const Q8Rows& w, i64 n0, i64 n1, float* y, i64 ldy) {
  for (i64 m = 0; m < M;) {
    const Q8Act xm{x.q + m * x.kp, x.scale + m * (x.kp / kQ8Block), x.kp};
    if (M - m >= 2) q8_gemv_m<2>(xm, w, n0, n1, y + m * ldy, ldy), m += 2;
    else q8_gemv_m<1>(xm, w, n0, n1, y + m * ldy, ldy), m += 1;
  }
}

void q8_quantize(const float* x, i64 K, i64 kp, std::int8_t* q, float* scale) {
  for (i64 b = 0; b * kQ8Block < kp; ++b) {
    const i64 lo = b * kQ8Block, hi = lo + kQ8Block;
    float amax = 0;
    for (i64 i = lo; i < hi && i < K; ++i) amax = __builtin_fmaxf(amax, __builtin_fabsf(x[i]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    scale[b] = amax / 127.0f;
    for (i64 i = lo; i < hi; ++i) q[i] = i < K ? static_cast<std::int8_t>(__builtin_nearbyintf(x[i] * inv)) : 0;
  }
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
  static const Kernels k{"avx2", gemv_avx2, nullptr, q8_gemv, q8_quantize, dot, axpy, dots, axpys, exp_block, scale, silu_mul, add};
  return k;
}

}  // namespace sonde::threaded
