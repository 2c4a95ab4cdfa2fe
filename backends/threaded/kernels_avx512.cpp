// AVX-512 kernels (F, BW, VL, VNNI, FMA; compile flags set per file in CMakeLists.txt). Only
// called after isa.cpp has checked the CPU. No sonde or standard-library inline code here (see
// kernels.h): everything is intrinsics and functions with internal linkage.
#include "kernels.h"

#include <immintrin.h>

#include <algorithm>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

// Mask of the first n (0..16) lanes.
inline __mmask16 lanes(i64 n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// q8 dot products with VNNI. vpdpbusd multiplies unsigned bytes by signed bytes, so x is offset
// to x + 128 (xor 0x80); the offset adds 128 * wsum_b to block b's sum, which is taken off at the
// end as 128 * sum_b s_b wsum_b (s_b = xs_b ws_b; exact in int32 per block, then in f32 like the
// rest). One step is two blocks (64 bytes of a row, one cache line): vpdpbusd leaves block b's
// partial sums in lanes 0-7 and block b+1's in lanes 8-15, which are converted to f32 and scaled
// by s_b / s_b+1 in the matching halves.
// Rows are read as kQ8Streams runs, a block of rows taking the next row of each (see
// gemv_avx512.cpp: long streams keep the hardware prefetcher going), for up to 3 x rows at once.
// Each row has three streams (int8 values, scales, block sums), all prefetched: without it the
// block sums, read once at a row's end, cost a memory round trip per row (46% of the kernel's
// time), and decode ran at 29 tok/s instead of 57-76 (qwen2.5-0.5b, 2 threads).
constexpr int kQ8Streams = 4;

// [v[0] x 8, v[1] x 8] from two adjacent floats (one of them masked off when `two` is false).
inline __m512 pair_halves(const float* v, bool two) {
  const __m128 p = two ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v))) : _mm_load_ss(v);
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(p));
}

// Rows n_r = n + r * run (r < R) against x rows m < M; y[m * ldy + n_r].
template <int M, int R> void q8_rows(const Q8Act& x, const Q8Rows& w, i64 n, i64 run, float* y, i64 ldy) {
  const i64 nb = w.kp / kQ8Block;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[M][R];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) acc[m][r] = _mm512_setzero_ps();
  const std::int8_t* wq[R];
  const float* wsc[R];
  const std::int32_t* wsm[R];
  for (int r = 0; r < R; ++r)
    wq[r] = w.q + (n + r * run) * w.kp, wsc[r] = w.scale + (n + r * run) * nb, wsm[r] = w.wsum + (n + r * run) * nb;
  for (i64 b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    const __mmask64 bytes = two ? ~__mmask64(0) : __mmask64(0xFFFFFFFFu);
    __m512i xu[M];
    __m512 xs[M];
    for (int m = 0; m < M; ++m) {
      xu[m] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, x.q + m * x.kp + b * kQ8Block), flip);
      xs[m] = pair_halves(x.scale + m * nb + b, two);
    }
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(wq[r] + b * kQ8Block) + 1024, _MM_HINT_T0);
      if (b % 16 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(wsc[r] + b) + 256, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wsm[r] + b) + 256, _MM_HINT_T0);
      }
      const __m512i q = _mm512_maskz_loadu_epi8(bytes, wq[r] + b * kQ8Block);
      const __m512 ws = pair_halves(wsc[r] + b, two);
      for (int m = 0; m < M; ++m) {
        const __m512 d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xu[m], q));
        acc[m][r] = _mm512_fmadd_ps(d, _mm512_mul_ps(xs[m], ws), acc[m][r]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) {
      __m512 c = _mm512_setzero_ps();  // sum_b s_b wsum_b
      for (i64 b = 0; b < nb; b += 16) {
        const __mmask16 k = lanes(nb - b);
        const __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x.scale + m * nb + b), _mm512_maskz_loadu_ps(k, wsc[r] + b));
        c = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k, wsm[r] + b)), c);
      }
      y[m * ldy + n + r * run] = _mm512_reduce_add_ps(acc[m][r]) - 128.0f * _mm512_reduce_add_ps(c);
    }
}

template <int M> void q8_gemv_m(const Q8Act& x, const Q8Rows& w, i64 n0, i64 n1, float* y, i64 ldy) {
  const i64 run = (n1 - n0) / kQ8Streams;
  for (i64 i = 0; i < run; ++i) q8_rows<M, kQ8Streams>(x, w, n0 + i, run, y, ldy);
  for (i64 n = n0 + kQ8Streams * run; n < n1; ++n) q8_rows<M, 1>(x, w, n, 0, y, ldy);
}

void q8_gemv(const Q8Act& x, i64 M, const Q8Rows& w, i64 n0, i64 n1, float* y, i64 ldy) {
  for (i64 m = 0; m < M;) {
    const Q8Act xm{x.q + m * x.kp, x.scale + m * (x.kp / kQ8Block), x.kp};
    const i64 left = M - m;
    if (left >= 4) q8_gemv_m<4>(xm, w, n0, n1, y + m * ldy, ldy), m += 4;  // 16 accumulators: 28 zmm live
    else if (left == 3) q8_gemv_m<3>(xm, w, n0, n1, y + m * ldy, ldy), m += 3;
    else if (left == 2) q8_gemv_m<2>(xm, w, n0, n1, y + m * ldy, ldy), m += 2;
    else q8_gemv_m<1>(xm, w, n0, n1, y + m * ldy, ldy), m += 1;
  }
}

// scale = max|x_b| / 127 and q = round-to-nearest-even(x * 127 / max|x_b|), as the scalar kernel.
void q8_quantize(const float* x, i64 K, i64 kp, std::int8_t* q, float* scale) {
  for (i64 b = 0; b * kQ8Block < kp; ++b) {
    const i64 lo = b * kQ8Block;
    const i64 n0 = K - lo, n1 = K - lo - 16;
    const __m512 v0 = _mm512_maskz_loadu_ps(lanes(n0 > 0 ? n0 : 0), x + lo);
    const __m512 v1 = _mm512_maskz_loadu_ps(lanes(n1 > 0 ? n1 : 0), x + lo + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    scale[b] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + lo), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + lo + 16), _mm512_cvtepi32_epi8(q1));
  }
}

float dot(const float* a, const float* b, i64 n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  i64 i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

void axpy(float a, const float* x, float* y, i64 n) {
  const __m512 av = _mm512_set1_ps(a);
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// 16 vectors of partial sums, one per key, folded into one vector holding each key's total in
// its lane: halves of every pair are added (512 -> 256 -> 128 bits per key), then the four
// floats left per key; the last permute puts key j in lane j. Three shuffles and an add per
// key instead of _mm512_reduce_add_ps's eight dependent steps.
inline __m512 sum16(const __m512 (&a)[16]) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i)  // key 2i in 128-bit lanes 0-1, key 2i+1 in 2-3
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; ++i)  // keys 4i .. 4i+3, one per 128-bit lane
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // 128-bit lane L: two floats each of keys L and 4 + L, then of 8 + L and 12 + L.
  const __m512 v01 = _mm512_add_ps(_mm512_unpacklo_ps(u[0], u[1]), _mm512_unpackhi_ps(u[0], u[1]));
  const __m512 v23 = _mm512_add_ps(_mm512_unpacklo_ps(u[2], u[3]), _mm512_unpackhi_ps(u[2], u[3]));
  // Lane 4L + j: key 4j + L.
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v01, v23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(v01, v23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i key_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(key_order, w);
}

// Keys in groups of 16: each key's products summed lane-wise over d, then the group's 16 sums
// folded at once (sum16). A last group of fewer keys is folded the same way with zero sums in
// the unused slots, so a key's score does not depend on n or on its place in the block (a
// prompt's scores are the same alone and in a padded batch).
float dots(const float* q, const float* k, i64 ks, i64 n, i64 d, float* s) {
  __m512 top16 = _mm512_set1_ps(-__builtin_inff());
  for (i64 u = 0; u < n; u += 16) {
    const int keys = n - u < 16 ? static_cast<int>(n - u) : 16;
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    for (i64 i = 0; i < d; i += 16) {
      const __mmask16 m = lanes(d - i);
      const __m512 qi = _mm512_maskz_loadu_ps(m, q + i);
      for (int j = 0; j < keys; ++j) acc[j] = _mm512_fmadd_ps(qi, _mm512_maskz_loadu_ps(m, k + (u + j) * ks + i), acc[j]);
    }
    const __m512 block = sum16(acc);
    const __mmask16 valid = lanes(keys);
    _mm512_mask_storeu_ps(s + u, valid, block);
    top16 = _mm512_mask_max_ps(top16, valid, top16, block);
  }
  return _mm512_reduce_max_ps(top16);
}

// Up to 64 columns of acc stay in four registers across the keys (the FMAs are axpy's, in the
// same order); wider heads go through axpy key by key.
void axpys(const float* p, const float* v, i64 vs, i64 n, i64 d, float* acc) {
  if (d > 64) {
    for (i64 u = 0; u < n; ++u) axpy(p[u], v + u * vs, acc, d);
    return;
  }
  const auto upto = [](i64 c) { return c <= 0 ? __mmask16(0) : lanes(c); };  // lanes() needs c > 0
  const __mmask16 m0 = upto(d), m1 = upto(d - 16), m2 = upto(d - 32), m3 = upto(d - 48);
  __m512 a0 = _mm512_maskz_loadu_ps(m0, acc), a1 = _mm512_maskz_loadu_ps(m1, acc + 16);
  __m512 a2 = _mm512_maskz_loadu_ps(m2, acc + 32), a3 = _mm512_maskz_loadu_ps(m3, acc + 48);
  for (i64 u = 0; u < n; ++u) {
    const __m512 pu = _mm512_set1_ps(p[u]);
    const float* x = v + u * vs;
    a0 = _mm512_fmadd_ps(pu, _mm512_maskz_loadu_ps(m0, x), a0);
    a1 = _mm512_fmadd_ps(pu, _mm512_maskz_loadu_ps(m1, x + 16), a1);
    a2 = _mm512_fmadd_ps(pu, _mm512_maskz_loadu_ps(m2, x + 32), a2);
    a3 = _mm512_fmadd_ps(pu, _mm512_maskz_loadu_ps(m3, x + 48), a3);
  }
  _mm512_mask_storeu_ps(acc, m0, a0);
  _mm512_mask_storeu_ps(acc + 16, m1, a1);
  _mm512_mask_storeu_ps(acc + 32, m2, a2);
  _mm512_mask_storeu_ps(acc + 48, m3, a3);
}

void scale(float a, float* y, i64 n) {
  const __m512 av = _mm512_set1_ps(a);
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// e^v = 2^t with t = v log2(e) = n + f, |f| <= 1/2: 2^f = e^(f ln 2) by its degree-7 Taylor
// polynomial (relative error < 2e-9 on |f ln 2| <= 0.35), then scaled by 2^n (vscalefps, which
// saturates to 0 and inf).
inline __m512 exp512(__m512 v) {
  const __m512 t = _mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 y = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147180559945309f));
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// exp512 (above) on 16 keys at a time; forbidden keys (-inf) give 0 without being evaluated.
float exp_block(float* s, i64 n, float m) {
  const __m512 mv = _mm512_set1_ps(m), none = _mm512_set1_ps(-__builtin_inff());
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(k, s + i);
    const __mmask16 ok = _mm512_mask_cmp_ps_mask(k, v, none, _CMP_NEQ_OQ);
    _mm512_mask_storeu_ps(s + i, k, _mm512_maskz_mov_ps(ok, exp512(_mm512_sub_ps(v, mv))));
  }
  float sum = 0;
  for (i64 u = 0; u < n; ++u) sum += s[u];
  return sum;
}

void silu_mul(const float* g, const float* u, float* y, i64 n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
  }
}

void add(const float* a, const float* b, float* y, i64 n) {
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace

const Kernels& kernels_avx512() {
  static const Kernels k{"avx512", gemv_avx512, gemm_panel_avx512, q8_gemv, q8_quantize, dot, axpy, dots, axpys, exp_block, scale, silu_mul, add};
  return k;
}

}  // namespace sonde::threaded
