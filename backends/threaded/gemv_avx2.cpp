// AVX2 GEMV for decode: y[m, n] = sum_k x[m, k] W[n, k], the same scheme as gemv_avx512.cpp with
// 16 elements of K per step: rows [n0, n1) read as R long streams (block i takes row i of each of
// R equal runs), R rows share the x vectors, two accumulators per (row, x row), bf16 widened by
// zero-extending to 32-bit lanes and shifting up, rows prefetched kAhead bytes ahead (on into the
// stream's next row). q8 rows (kernels.h) are widened as w = float(q) * s, a step being half a block.
// Summation order of one output: lane-wise over the K steps in ascending order, then the two
// accumulators added and the 8 lanes reduced; it depends only on K.
#include "kernels.h"

#include <immintrin.h>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

constexpr i64 kStep = 16;     // K elements per step
constexpr i64 kAhead = 1024;  // prefetch distance per row stream, bytes
constexpr i64 kChunkBytes = 256 << 10;  // W bytes per row chunk when M > 3 (half an L2)

template <WType T> constexpr i64 esize() { return T == WType::f32 ? 4 : 2; }
// Bytes from a row's start to the step at element k (a multiple of kStep): a q8 step is half a
// block, which load_w finds from k.
template <WType T> constexpr i64 woff(i64 k) { return T == WType::q8 ? k / kQ8Block * kQ8BlockBytes : k * esize<T>(); }
template <WType T> constexpr i64 row_bytes(i64 K) {
  return T == WType::q8 ? q8_row_bytes(K) : K * esize<T>();
}

// The first `valid` elements of p (< kStep), zero beyond, in a buffer: AVX2 has no masked 16-bit
// load, and reading past the end of a mapped weight is not allowed.
template <typename E> struct Tail {
  alignas(32) E v[kStep] = {};
  void fill(const void* p, i64 valid) {
    for (i64 j = 0; j < valid; ++j) v[j] = static_cast<const E*>(p)[j];
  }
};
template <WType T> struct ElemOf { using type = std::uint16_t; };
template <> struct ElemOf<WType::f32> { using type = float; };

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// 16 weights of a full step at element k from p (base + woff(k)), widened to f32.
template <WType T> inline void load_w(const void* p, i64 k, __m256& a, __m256& b) {
  if constexpr (T == WType::q8) {  // w = float(q) * s (kernels.h); p is the block, k says which half
    const auto* blk = static_cast<const unsigned char*>(p);
    const __m256 s = _mm256_castsi256_ps(_mm256_set1_epi32(_mm_cvtsi128_si32(_mm_loadu_si32(blk))));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4 + k % kQ8Block));
    a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s);
    b = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(q, q))), s);
  } else if constexpr (T == WType::bf16) {
    const auto* h = static_cast<const __m128i*>(p);
    a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(h)), 16));
    b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(h + 1)), 16));
  } else if constexpr (T == WType::f16) {
    const auto* h = static_cast<const __m128i*>(p);
    a = _mm256_cvtph_ps(_mm_loadu_si128(h));
    b = _mm256_cvtph_ps(_mm_loadu_si128(h + 1));
  } else {
    a = _mm256_loadu_ps(static_cast<const float*>(p));
    b = _mm256_loadu_ps(static_cast<const float*>(p) + 8);
  }
}

template <WType T, int M, int R> struct Block {
  __m256 acc[M][R][2];

  // One full step at element k; xs[m] points at x row m's step (a buffer for the tail).
  inline void step(const float* const* xs, const void* const* ws, i64 k) {
    __m256 xa[M], xb[M];
    for (int m = 0; m < M; ++m) xa[m] = _mm256_loadu_ps(xs[m]), xb[m] = _mm256_loadu_ps(xs[m] + 8);
    for (int r = 0; r < R; ++r) {
      __m256 wa, wb;
      load_w<T>(ws[r], k, wa, wb);
      for (int m = 0; m < M; ++m) {
        acc[m][r][0] = _mm256_fmadd_ps(wa, xa[m], acc[m][r][0]);
        acc[m][r][1] = _mm256_fmadd_ps(wb, xb[m], acc[m][r][1]);
      }
    }
  }

  // The last K % kStep elements, through zero-padded copies (q8 rows are padded with zeros to a
  // whole block already: w = 0 * s = 0 there).
  inline void tail(const float* x, i64 ldx, const char* base, i64 stride, i64 k, i64 valid) {
    Tail<float> xt[M];
    const float* xs[M];
    for (int m = 0; m < M; ++m) xt[m].fill(x + m * ldx + k, valid), xs[m] = xt[m].v;
    for (int r = 0; r < R; ++r) {
      Tail<typename ElemOf<T>::type> wt;
      const void* ws[1] = {base + r * stride + woff<T>(k)};
      if constexpr (T != WType::q8) wt.fill(ws[0], valid), ws[0] = wt.v;
      Block<T, M, 1> one;
      for (int m = 0; m < M; ++m) one.acc[m][0][0] = acc[m][r][0], one.acc[m][0][1] = acc[m][r][1];
      one.step(xs, ws, k);
      for (int m = 0; m < M; ++m) acc[m][r][0] = one.acc[m][0][0], acc[m][r][1] = one.acc[m][0][1];
    }
  }

  // y[m * ldy + r * ystride] for rows base + r * stride, K elements each.
  void run(const float* x, i64 ldx, const char* base, i64 stride, i64 K, float* y, i64 ldy, i64 ystride) {
    for (int m = 0; m < M; ++m)
      for (int r = 0; r < R; ++r) acc[m][r][0] = acc[m][r][1] = _mm256_setzero_ps();
    i64 k = 0;
    for (; k + kStep <= K; k += kStep) {
      const i64 off = woff<T>(k);
      const float* xs[M];
      const void* ws[R];
      for (int m = 0; m < M; ++m) xs[m] = x + m * ldx + k;
      for (int r = 0; r < R; ++r) {
        ws[r] = base + r * stride + off;
        _mm_prefetch(base + r * stride + off + kAhead, _MM_HINT_T0);
      }
      step(xs, ws, k);
    }
    if (k < K) tail(x, ldx, base, stride, k, K - k);
    for (int m = 0; m < M; ++m)
      for (int r = 0; r < R; ++r) y[m * ldy + r * ystride] = hsum(_mm256_add_ps(acc[m][r][0], acc[m][r][1]));
  }
};

// 16 ymm registers: 2*M*R accumulators, 2*M x vectors and two weight vectors. R streams of `run`
// rows each (block i takes row i of every stream), then the rows left over one at a time.
template <WType T, int M> void gemv_m(const float* x, i64 ldx, const void* W, i64 K, i64 n0, i64 n1, float* y, i64 ldy) {
  constexpr int R = M == 1 ? 4 : M == 2 ? 2 : 1;
  const auto* w = static_cast<const char*>(W);
  const i64 rowbytes = row_bytes<T>(K), run = (n1 - n0) / R;
  for (i64 i = 0; i < run; ++i) Block<T, M, R>{}.run(x, ldx, w + (n0 + i) * rowbytes, run * rowbytes, K, y + n0 + i, ldy, run);
  for (i64 n = n0 + R * run; n < n1; ++n) Block<T, M, 1>{}.run(x, ldx, w + n * rowbytes, rowbytes, K, y + n, ldy, 1);
}

// Rows in chunks of about kChunkBytes of W (they stay in L2), each chunk against every group of
// up to 3 x rows: W comes from memory once whatever M is.
template <WType T> void gemv_t(const float* x, i64 M, i64 ldx, const void* W, i64 K, i64 n0, i64 n1, float* y, i64 ldy) {
  const i64 chunk = M <= 3 ? n1 - n0 : (kChunkBytes / row_bytes<T>(K) / 8 + 1) * 8;
  for (i64 r0 = n0; r0 < n1; r0 += chunk) {
    const i64 r1 = r0 + chunk < n1 ? r0 + chunk : n1;
    for (i64 m = 0; m < M;) {
      const i64 left = M - m;
      if (left >= 3) gemv_m<T, 3>(x + m * ldx, ldx, W, K, r0, r1, y + m * ldy, ldy), m += 3;
      else if (left == 2) gemv_m<T, 2>(x + m * ldx, ldx, W, K, r0, r1, y + m * ldy, ldy), m += 2;
      else gemv_m<T, 1>(x + m * ldx, ldx, W, K, r0, r1, y + m * ldy, ldy), m += 1;
    }
  }
}

}  // namespace

void gemv_avx2(const float* x, i64 M, i64 ldx, const void* W, WType wt, i64 K, i64 n0, i64 n1, float* y, i64 ldy) {
  switch (wt) {
    case WType::f32: return gemv_t<WType::f32>(x, M, ldx, W, K, n0, n1, y, ldy);
    case WType::f16: return gemv_t<WType::f16>(x, M, ldx, W, K, n0, n1, y, ldy);
    case WType::bf16: return gemv_t<WType::bf16>(x, M, ldx, W, K, n0, n1, y, ldy);
    case WType::q8: return gemv_t<WType::q8>(x, M, ldx, W, K, n0, n1, y, ldy);
  }
}

}  // namespace sonde::threaded
