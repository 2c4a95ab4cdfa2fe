// AVX-512 kernels (F, BW, VL, FMA; compile flags set per file in CMakeLists.txt). Only
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

// The 16 x 16 block r (row i: 16 floats) transposed in registers: unpacks pair rows within
// 128-bit lanes (two levels), then 128-bit lanes are gathered across the four row quads.
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // lane L: r_i[4L], r_i+1[4L], r_i[4L+1], r_i+1[4L+1]
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  // lane L: the same of elements 4L+2, 4L+3
  }
  __m512 u[16];  // u[4q + j], lane L: element 4L + j of rows 4q .. 4q+3
  for (int q = 0; q < 16; q += 4) {
    const __m512d a = _mm512_castps_pd(t[q]), b = _mm512_castps_pd(t[q + 1]);
    const __m512d c = _mm512_castps_pd(t[q + 2]), e = _mm512_castps_pd(t[q + 3]);
    u[q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    u[q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
  }
  for (int j = 0; j < 4; ++j) {  // element 4L + j of every row: lane L of u[j], u[4 + j], u[8 + j], u[12 + j]
    const __m512 lo01 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 lo23 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi01 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 hi23 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
    r[j] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(2, 0, 2, 0));
    r[4 + j] = _mm512_shuffle_f32x4(lo01, lo23, _MM_SHUFFLE(3, 1, 3, 1));
    r[8 + j] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + j] = _mm512_shuffle_f32x4(hi01, hi23, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

void keys_t(const float* k, i64 ks, i64 n, i64 d, float* kt) {
  for (i64 u = 0; u < n; u += 16)
    for (i64 e = 0; e < d; e += 16) {
      const __mmask16 m = lanes(d - e);
      __m512 r[16];
      for (int j = 0; j < 16; ++j) r[j] = u + j < n ? _mm512_maskz_loadu_ps(m, k + (u + j) * ks + e) : _mm512_setzero_ps();
      transpose16(r);
      for (i64 j = 0; j < 16 && e + j < d; ++j) _mm512_storeu_ps(kt + (e + j) * kKeysT + u, r[j]);
    }
}

// dots' order with keys in lanes, for R query rows at once: P_l holds, for 16 keys, the lane-l
// partial sum of dots' per-key accumulator (elements l, 16 + l, 32 + l, ... in turn, one FMA
// each; one load of a key block's element vector serves the R rows); the fold is sum16's tree on
// those registers, Y_l = (P_l + P_l+8) + (P_l+4 + P_l+12), then (Y_0 + Y_2) + (Y_1 + Y_3), built
// quarter by quarter so that four rows' partial sums fit the registers. The elements past d,
// which dots adds as 0 * 0 to a sum that is never -0, are skipped.
template <int R>
void dots_tr(const float* const* q, const float* kt, i64 n, i64 d, float* const* s, float* top) {
  __m512 top16[R];
  for (int r = 0; r < R; ++r) top16[r] = _mm512_set1_ps(-__builtin_inff());
  for (i64 u = 0; u < n; u += 16) {
    const float* k = kt + u;
    const auto lane = [&](int l, __m512 (&o)[R]) {  // P_l of the R rows
      for (int r = 0; r < R; ++r) o[r] = _mm512_setzero_ps();
      for (i64 e = l; e < d; e += 16) {
        const __m512 kv = _mm512_loadu_ps(k + e * kKeysT);
        for (int r = 0; r < R; ++r) o[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][e]), kv, o[r]);
      }
    };
    const auto quarter = [&](int l, __m512 (&o)[R]) {  // Y_l
      __m512 a[R], b[R];
      lane(l, a);
      lane(l + 8, b);
      for (int r = 0; r < R; ++r) a[r] = _mm512_add_ps(a[r], b[r]);
      lane(l + 4, o);
      lane(l + 12, b);
      for (int r = 0; r < R; ++r) o[r] = _mm512_add_ps(a[r], _mm512_add_ps(o[r], b[r]));
    };
    __m512 z0[R], z1[R], y[R];
    quarter(0, z0);
    quarter(2, y);
    for (int r = 0; r < R; ++r) z0[r] = _mm512_add_ps(z0[r], y[r]);
    quarter(1, z1);
    quarter(3, y);
    const __mmask16 valid = lanes(n - u);
    for (int r = 0; r < R; ++r) {
      const __m512 block = _mm512_add_ps(z0[r], _mm512_add_ps(z1[r], y[r]));
      _mm512_mask_storeu_ps(s[r] + u, valid, block);
      top16[r] = _mm512_mask_max_ps(top16[r], valid, top16[r], block);
    }
  }
  for (int r = 0; r < R; ++r) top[r] = _mm512_reduce_max_ps(top16[r]);
}

float dots_t(const float* q, const float* kt, i64 n, i64 d, float* s) {
  float top;
  dots_tr<1>(&q, kt, n, d, &s, &top);
  return top;
}

void dots_t4(const float* const* q, const float* kt, i64 n, i64 d, float* const* s, float* top) {
  dots_tr<4>(q, kt, n, d, s, top);
}

// axpys for four rows, 64 columns at a time: each accumulator element takes the same FMAs in the
// same key order as axpys (and axpy, past 64 columns) gives it.
void axpys4(const float* const* p, const float* v, i64 vs, i64 n, i64 d, float* const* acc) {
  const auto upto = [](i64 c) { return c <= 0 ? __mmask16(0) : lanes(c); };
  for (i64 c0 = 0; c0 < d; c0 += 64) {
    const __mmask16 m[4] = {upto(d - c0), upto(d - c0 - 16), upto(d - c0 - 32), upto(d - c0 - 48)};
    __m512 a[4][4];
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 4; ++j) a[r][j] = _mm512_maskz_loadu_ps(m[j], acc[r] + c0 + 16 * j);
    for (i64 u = 0; u < n; ++u) {
      const float* x = v + u * vs + c0;
      __m512 xv[4];
      for (int j = 0; j < 4; ++j) xv[j] = _mm512_maskz_loadu_ps(m[j], x + 16 * j);
      for (int r = 0; r < 4; ++r) {
        const __m512 pu = _mm512_set1_ps(p[r][u]);
        for (int j = 0; j < 4; ++j) a[r][j] = _mm512_fmadd_ps(pu, xv[j], a[r][j]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 4; ++j) _mm512_mask_storeu_ps(acc[r] + c0 + 16 * j, m[j], a[r][j]);
  }
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
  static const Kernels k{"avx512", gemv_avx512, gemm_pack_x_avx512, gemm_pack_w_avx512, gemm_packed_avx512, dot, axpy, dots, axpys, keys_t, dots_t, dots_t4, axpys4, exp_block, scale, silu_mul, add};
  return k;
}

}  // namespace sonde::threaded
