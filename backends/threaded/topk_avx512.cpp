// The TopK's streaming passes (topk.h) on AVX-512 F (flags per file in CMakeLists.txt). Only
// called after isa.cpp has checked the CPU; intrinsics and plain loops only (see kernels.h).
#include "topk.h"

#include <immintrin.h>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

// float_order on 16 lanes: a float's bits, its magnitude bits flipped when negative.
inline __m512i order16(__m512i s) {
  return _mm512_xor_si512(s, _mm512_and_si512(_mm512_srai_epi32(s, 31), _mm512_set1_epi32(0x7FFFFFFF)));
}

inline std::int32_t order1(const float* p) {
  std::int32_t s;
  __builtin_memcpy(&s, p, 4);
  return s ^ ((s >> 31) & 0x7FFFFFFF);
}

inline i64 count_at_least(const __m512i* m, std::int32_t t) {
  const __m512i b = _mm512_set1_epi32(t);
  i64 n = 0;
  for (int g = 0; g < 16; ++g) n += __builtin_popcount(_mm512_cmpge_epi32_mask(m[g], b));
  return n;
}

}  // namespace

// The 16 running maxima stay in registers, and so does the bisection over them: counting the
// maxima at or above a t is 16 compares (nth_element over the 256 cost more than both passes).
std::int32_t topk_bar_avx512(const float* row, i64 N, i64 k, int steps) {
  __m512i m[16];
  for (auto& v : m) v = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  i64 j0 = 0;
  for (; j0 + kTopKGroups <= N; j0 += kTopKGroups) {
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) m[g] = _mm512_max_epi32(m[g], order16(_mm512_loadu_si512(row + j0 + 16 * g)));
  }
  if (j0 < N) {  // the ragged tail: lanes past N stay out of their groups
    for (int g = 0; g < 16 && j0 + 16 * g < N; ++g) {
      const i64 left = N - j0 - 16 * g;
      const __mmask16 in = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
      m[g] = _mm512_mask_max_epi32(m[g], in, m[g], order16(_mm512_maskz_loadu_epi32(in, row + j0 + 16 * g)));
    }
  }
  __m512i lo_v = m[0], hi_v = m[0];
  for (int g = 1; g < 16; ++g) {
    lo_v = _mm512_min_epi32(lo_v, m[g]);
    hi_v = _mm512_max_epi32(hi_v, m[g]);
  }
  // Invariant: at least k maxima >= lo; fewer than k >= hi + 1 ... (hi only bounds the search).
  i64 lo = _mm512_reduce_min_epi32(lo_v), hi = _mm512_reduce_max_epi32(hi_v);
  for (int s = 0; s < steps && lo < hi; ++s) {
    const i64 mid = lo + (hi - lo + 1) / 2;
    if (count_at_least(m, static_cast<std::int32_t>(mid)) >= k) lo = mid;
    else hi = mid - 1;
  }
  return static_cast<std::int32_t>(lo);
}

// A compare, a compress of the lane indices and a masked store of the kept values a vector; most
// vectors have no candidate and store zeros.
i64 topk_candidates_avx512(const float* row, i64 N, std::int32_t bar, float* out, std::int32_t* cand) {
  const __m512i b = _mm512_set1_epi32(bar);
  const __m512i step = _mm512_set1_epi32(16);
  const __m512 zero = _mm512_setzero_ps();
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  i64 n = 0, j = 0;
  for (; j + 16 <= N; j += 16) {
    const __m512i s = _mm512_loadu_si512(row + j);
    const __mmask16 pass = _mm512_cmpge_epi32_mask(order16(s), b);
    // max(v, 0) where passing: +0 for v <= 0 and for NaN (as v > 0 ? v : 0 gives), v above 0.
    const __mmask16 pos = _mm512_mask_cmp_ps_mask(pass, _mm512_castsi512_ps(s), zero, _CMP_GT_OQ);
    _mm512_storeu_ps(out + j, _mm512_maskz_mov_ps(pos, _mm512_castsi512_ps(s)));
    if (pass) {
      _mm512_storeu_si512(cand + n, _mm512_maskz_compress_epi32(pass, idx));
      n += __builtin_popcount(pass);
    }
    idx = _mm512_add_epi32(idx, step);
  }
  for (; j < N; ++j) {
    const bool keep = order1(row + j) >= bar;
    out[j] = keep && row[j] > 0.0f ? row[j] : 0.0f;
    if (keep) cand[n++] = static_cast<std::int32_t>(j);
  }
  return n;
}

}  // namespace sonde::threaded
