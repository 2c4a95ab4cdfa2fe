#pragma once
// The AVX-512 skeleton of the bf16/int8 kernels (lowp.h), shared by the ISA TUs lowp_avx512.cpp,
// lowp_avx512bf16.cpp and lowp_vnni.cpp. Everything is in an unnamed namespace: each TU gets its
// own copy built with its own flags, and the linker can never hand one TU's code to another.
#include "kernels.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

// W bytes per chunk of rows: a chunk stays in L2 while every tile of x rows passes over it.
constexpr i64 kLowpChunkBytes = 128 << 10;

// The L1 data cache's size (the host's, 32 KB when the system does not say).
inline i64 lowp_l1_bytes() {
  static const i64 bytes = [] {
    const long b = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return b > 0 ? static_cast<i64>(b) : i64{32} << 10;
  }();
  return bytes;
}

// compute_bf16_bits (<sonde/compute.h>) 16 floats at a time: a zero or subnormal becomes a zero
// of its sign, a NaN keeps its top bits with the quiet bit set, the rest round to nearest, ties
// to even. A 16-row decode step rounds ~4M floats (24 layers' x rows of 7 Linears and the LM
// head's), 1-2% of the step with the scalar loop (bench/README.md, issue 27/28 decode step).
inline void lowp_round_bf16(const float* x, i64 n, std::uint16_t* out) {
  const __m512i exp = _mm512_set1_epi32(0x7f800000), sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512i v = _mm512_maskz_loadu_epi32(m, x + i);
    v = _mm512_mask_and_epi32(v, _mm512_testn_epi32_mask(v, exp), v, sign);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, abs), exp);
    const __m512i top = _mm512_srli_epi32(v, 16);
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(v, _mm512_add_epi32(half, _mm512_and_si512(top, one))), 16);
    const __m512i q = _mm512_mask_or_epi32(r, nan, top, _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(q));
  }
}

// The 16 lanes summed in lowp.h's tree order: (i, i+8), then (i, i+4), (i, i+2), the last two.
inline float lowp_reduce16(__m512 a) {
  const __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
}

// f.template operator()<mt, RT, Stream>(m, r, rstep) with mt (1..MT) known at compile time: the
// tile of x rows [m, m + mt) by W rows r + j * rstep (j < RT).
template <int MT, int RT, bool Stream, typename F> inline void lowp_dispatch(i64 mt, i64 m, i64 r, i64 rstep, const F& f) {
  if (mt == MT) return f.template operator()<MT, RT, Stream>(m, r, rstep);
  if constexpr (MT > 1) lowp_dispatch<MT - 1, RT, Stream>(mt, m, r, rstep, f);
}

// Up to this many x rows (decode) W is streamed from memory once per call: the kernels are bound
// by the load path, not by the dot products, so W is read as the f32 GEMV reads it
// (gemv_avx512.cpp, whose header has the measurements): kLowpStreams long streams, the range
// [n0, n1) cut into that many runs of rows and a tile taking the next row of each run (the
// hardware prefetcher follows 4 streams that last the whole call, where the next 4 rows in memory
// order start new short ones), each stream prefetched kLowpAhead bytes ahead with a non-temporal
// hint (a weight line is used once per token). Before this, one decode row went through the
// GEMM's tiles (adjacent rows, no prefetch) at 0.6-0.7x the f32 GEMV's speed per weight
// although it reads the same bytes or fewer (bench/README.md, 2026-11-28 decode).
constexpr i64 kLowpStreamRows = 3;
constexpr int kLowpStreams = 4;
constexpr i64 kLowpAhead = 1536;

// Prefetches the lines of [p + kLowpAhead, p + kLowpAhead + bytes) (bytes <= 65: one or two lines).
inline void lowp_prefetch(const void* p, i64 bytes) {
  const char* a = static_cast<const char*>(p) + kLowpAhead;
  _mm_prefetch(a, _MM_HINT_NTA);
  if (bytes > 1) _mm_prefetch(a + bytes - 1, _MM_HINT_NTA);
}

// From kLowpStreamRows + 1 up to this many x rows (a batch's decode step, an engine step) W is
// still streamed once per call, each group of W rows (one from each of the streams' runs) against
// every tile of x rows while it sits in L1. At 16 rows the tiles' dot products take about as long
// as W's read from memory (bench/README.md, "Batched decode"), so that read has to overlap them:
// the prefill tiling below passes each 128 KB chunk of W from memory into L2 with its first tile
// of x rows and then computes from L2, the two one after the other. Past this many rows the x
// rows no longer stay in L2 beside the stream and the chunks win.
constexpr i64 kLowpBatchRows = 64;

// Outputs [0, M) x [n0, n1). Few x rows: the streams above, all x rows in each tile. A batch:
// the streams in groups of BR W rows, each against tiles of up to BM x rows. Otherwise tiles of
// up to MT x rows by RT W rows (the rows left over one by one): W in chunks of kLowpChunkBytes,
// each chunk against every tile of x rows. Each output is one tile call's, whatever the tiling:
// its sum depends on K alone.
template <int MT, int RT, int BM, int BR, typename F> void lowp_drive(i64 M, i64 n0, i64 n1, i64 rowbytes, const F& f) {
  static_assert(MT >= kLowpStreamRows && BM >= 1 && BR >= 1);
  if (M <= kLowpStreamRows) {
    const i64 run = (n1 - n0) / kLowpStreams;
    for (i64 i = 0; i < run; ++i) lowp_dispatch<kLowpStreamRows, kLowpStreams, true>(M, 0, n0 + i, run, f);
    for (i64 r = n0 + kLowpStreams * run; r < n1; ++r) lowp_dispatch<kLowpStreamRows, 1, true>(M, 0, r, 1, f);
    return;
  }
  if (M <= kLowpBatchRows) {
    const i64 run = (n1 - n0) / BR;
    for (i64 i = 0; i < run; ++i)
      for (i64 m = 0; m < M; m += BM) lowp_dispatch<BM, BR, true>(std::min<i64>(BM, M - m), m, n0 + i, run, f);
    for (i64 r = n0 + BR * run; r < n1; ++r)
      for (i64 m = 0; m < M; m += BM) lowp_dispatch<BM, 1, true>(std::min<i64>(BM, M - m), m, r, 1, f);
    return;
  }
  const i64 chunk = std::max<i64>(RT, kLowpChunkBytes / std::max<i64>(1, rowbytes) / RT * RT);
  for (i64 r0 = n0; r0 < n1; r0 += chunk) {
    const i64 r1 = std::min(n1, r0 + chunk);
    i64 r = r0;
    if (RT * rowbytes <= lowp_l1_bytes()) {
      // The tile's W rows stay in L1 while the x rows pass (x from L2): of a step's loads, the
      // MT x vectors come from L2 instead of the RT W vectors.
      for (; r + RT <= r1; r += RT)
        for (i64 m = 0; m < M; m += MT) lowp_dispatch<MT, RT, false>(std::min<i64>(MT, M - m), m, r, 1, f);
      for (; r < r1; ++r)
        for (i64 m = 0; m < M; m += MT) lowp_dispatch<MT, 1, false>(std::min<i64>(MT, M - m), m, r, 1, f);
      continue;
    }
    for (i64 m = 0; m < M; m += MT) {
      const i64 mt = std::min<i64>(MT, M - m);
      for (r = r0; r + RT <= r1; r += RT) lowp_dispatch<MT, RT, false>(mt, m, r, 1, f);
      for (; r < r1; ++r) lowp_dispatch<MT, 1, false>(mt, m, r, 1, f);
    }
  }
}

// Madd, Prep and Dot are lambdas (function pointers would not inline into the loops).
// One bf16 tile: x rows xr[0..mt), W rows wr[0..rt), K elements; the full steps unmasked, the
// last one's W masked (x is zero-padded). Row pointers are local so the loop keeps its
// accumulators and addresses in registers.
// Output (i, j) goes to y[i * ldy + j * ys]; Stream: W rows prefetched (lowp_drive).
template <int mt, int rt, bool Stream, typename Madd>
inline void lowp_bf16_tile(const std::uint16_t* const* xr, const std::uint16_t* const* wr, i64 K, float* y, i64 ldy,
                           i64 ys, Madd madd) {
  __m512 acc[mt][rt];
  for (int i = 0; i < mt; ++i)
    for (int j = 0; j < rt; ++j) acc[i][j] = _mm512_setzero_ps();
  i64 k = 0;
  if constexpr (Stream) {
    // The rt W vectors in registers and each x row loaded once against them: mt x rt
    // accumulators, rt W and 1 x register (the x rows come from L1/L2, W from the stream).
    for (; k + 32 <= K; k += 32) {
      __m512i wv[rt];
      for (int j = 0; j < rt; ++j) {
        lowp_prefetch(wr[j] + k, 1);
        wv[j] = _mm512_loadu_si512(wr[j] + k);
      }
      for (int i = 0; i < mt; ++i) {
        const __m512i xv = _mm512_loadu_si512(xr[i] + k);
        for (int j = 0; j < rt; ++j) madd(acc[i][j], xv, wv[j]);
      }
    }
  } else {
    for (; k + 32 <= K; k += 32) {
      __m512i xv[mt];
      for (int i = 0; i < mt; ++i) xv[i] = _mm512_loadu_si512(xr[i] + k);
      for (int j = 0; j < rt; ++j) {
        const __m512i wv = _mm512_loadu_si512(wr[j] + k);
        for (int i = 0; i < mt; ++i) madd(acc[i][j], xv[i], wv);
      }
    }
  }
  if (k < K) {
    const __mmask32 wmask = (__mmask32(1) << (K - k)) - 1;
    __m512i wv[rt];
    for (int j = 0; j < rt; ++j) wv[j] = _mm512_maskz_loadu_epi16(wmask, wr[j] + k);
    for (int i = 0; i < mt; ++i) {
      const __m512i xv = _mm512_loadu_si512(xr[i] + k);
      for (int j = 0; j < rt; ++j) madd(acc[i][j], xv, wv[j]);
    }
  }
  for (int i = 0; i < mt; ++i)
    for (int j = 0; j < rt; ++j) y[i * ldy + j * ys] = lowp_reduce16(acc[i][j]);
}

// bf16 tiles: Madd(acc, x, w) adds one step's 32 products to the 16 lanes in lowp.h's order.
// x rows are zero-padded to a multiple of 32 (full loads); the last W step is masked.
template <int MT, int RT, int BM, int BR, typename Madd>
void lowp_bf16(const std::uint16_t* x, i64 M, i64 ldx, const std::uint16_t* W, i64 K, i64 n0, i64 n1, float* y, i64 ldy,
               Madd madd) {
  lowp_drive<MT, RT, BM, BR>(M, n0, n1, 2 * K, [&]<int mt, int rt, bool Stream>(i64 m, i64 r, i64 rstep) {
    const std::uint16_t* xr[mt];
    const std::uint16_t* wr[rt];
    for (int i = 0; i < mt; ++i) xr[i] = x + (m + i) * ldx;
    for (int j = 0; j < rt; ++j) wr[j] = W + (r + j * rstep) * K;
    lowp_bf16_tile<mt, rt, Stream>(xr, wr, K, y + m * ldy + r, ldy, rstep, madd);
  });
}

// The scale of block b of a q8 row (0 past the row's last block).
inline float lowp_q8_scale(const unsigned char* row, i64 b, i64 blocks) {
  if (b >= blocks) return 0.0f;
  float s;
  __builtin_memcpy(&s, row + b * kQ8BlockBytes, 4);
  return s;
}

// int8 tiles: per step, blocks b and b + 1 (64 elements). Dot(xq, w) gives the 16 lanes' exact
// integer sums (lowp.h: lanes 8h + j, block b + h); then acc = fma(float(p), sx * sw, acc).
// Prep(w) is computed once per W vector and handed to Dot (VNNI: the unsigned offset's correction).
template <int MT, int RT, int BM, int BR, typename Prep, typename Dot>
void lowp_i8(const std::int8_t* xq, const float* xs, i64 M, i64 ldq, i64 lds, const unsigned char* W, i64 K, i64 n0,
             i64 n1, float* y, i64 ldy, Prep prep, Dot dot) {
  const i64 blocks = (K + kQ8Block - 1) / kQ8Block, rb = q8_row_bytes(K);
  lowp_drive<MT, RT, BM, BR>(M, n0, n1, rb, [&]<int mt, int rt, bool Stream>(i64 m, i64 r, i64 rstep) {
    __m512 acc[mt][rt];
    for (int i = 0; i < mt; ++i)
      for (int j = 0; j < rt; ++j) acc[i][j] = _mm512_setzero_ps();
    // Per step the rt W vectors (with their scales and Prep) in registers, then each x row
    // once against them (mt x rt accumulators beside 3 rt W registers).
    using PrepT = decltype(prep(_mm512_setzero_si512()));
    for (i64 b = 0; b < blocks; b += 2) {
      __m512i wv[rt];
      __m512 sw[rt];
      PrepT pw[rt];
      for (int j = 0; j < rt; ++j) {
        const unsigned char* row = W + (r + j * rstep) * rb;
        const unsigned char* blk = row + b * kQ8BlockBytes;
        if constexpr (Stream) lowp_prefetch(blk, 2 * kQ8BlockBytes);
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 4));
        const __m256i hi = b + 1 < blocks ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ8BlockBytes + 4))
                                          : _mm256_setzero_si256();
        wv[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        sw[j] = _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(lowp_q8_scale(row, b, blocks)),
                                     _mm512_set1_ps(lowp_q8_scale(row, b + 1, blocks)));
        pw[j] = prep(wv[j]);
      }
      for (int i = 0; i < mt; ++i) {
        const __m512i xv = _mm512_loadu_si512(xq + (m + i) * ldq + b * kQ8Block);
        const float* s = xs + (m + i) * lds + b;
        const __m512 sx = _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(s[0]), _mm512_set1_ps(s[1]));
        for (int j = 0; j < rt; ++j) {
          const __m512 p = _mm512_cvtepi32_ps(dot(xv, wv[j], pw[j]));
          acc[i][j] = _mm512_fmadd_ps(p, _mm512_mul_ps(sx, sw[j]), acc[i][j]);
        }
      }
    }
    for (int i = 0; i < mt; ++i)
      for (int j = 0; j < rt; ++j) y[(m + i) * ldy + r + j * rstep] = lowp_reduce16(acc[i][j]);
  });
}

}  // namespace
}  // namespace sonde::threaded
