// The exact f32 GEMM as an outer-product kernel (issue 28): every output summed exactly as the
// GEMV sums it (gemv_avx512.cpp's header), with no horizontal reduction.
//
// The GEMV's order for output (m, n): 32 chains a_j, j < 32, each a fused multiply-add chain from
// +0 over the elements k = 32 s + j, s ascending (elements past K count as 0 * 0); then
// t_j = a_j + a_{j+16} (the two halves), and the 16 lanes reduced as _mm512_reduce_add_ps pairs
// them: j with j + 8, then j + 4, j + 2, j + 1. That is a fixed binary tree over the 32 chains
// whose leaves, read left to right, are j in 5-bit bit-reversed order (0, 16, 8, 24, 4, ...). So:
//  - a chain is a "leaf pass": K / 32 steps over the elements j, j + 32, ... of a row; with the
//    outputs of 48 W rows in the lanes of 3 vectors and 8 x rows broadcast, a step is 3 W loads and
//    8 broadcasts for 24 FMAs into 24 independent accumulators, the classic outer-product register
//    tile (the FMA units set the pace; no horizontal work at all);
//  - the leaves run in bit-reversed j order and fold into the tree as a binary counter does (after
//    leaf i, one add per trailing 1 bit of i, each with a partial sum kept in scratch): the same
//    pairs, added lane-wise across outputs, so every output's bits are the GEMV's (IEEE addition is
//    commutative: the pairing decides the result, not the operand order);
//  - both operands are packed so that a leaf pass reads them as two sequential streams: x as
//    [8-row block][j][s][8 rows], W as [48-row block][j][s][48 rows] (zero past K and past the last
//    row: a padded step is the GEMV's masked 0 * 0 step, bits included: fma(0, 0, -0) = +0).
// Blocking: per chunk of kMcBlocks x blocks and per 48-row W block, leaf i runs over every x block
// of the chunk, so the W block's leaf slice (K / 32 x 48 floats: 5 KB at K = 896, 111 KB at
// 18,944) is reused from L1/L2 and the partial sums of the chunk (kMcBlocks x 7.5 KB) stay in L2.
#include "kernels.h"

#include <immintrin.h>

#include <array>
#include <utility>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

constexpr int kXr = kGemmXRows;  // x rows per register tile (broadcast)
constexpr int kWv = 3;           // W vectors of 16 outputs per register tile
constexpr int kWr = kGemmWRows;  // = 16 kWv
constexpr int kLevels = 5;       // log2 of the 32 leaves: partial sums kept at most
constexpr i64 kStackFloats = kLevels * kXr * kWv * 16;
static_assert(kWr == 16 * kWv);

inline __mmask16 gemm_lanes(i64 n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u); }

constexpr i64 steps_of(i64 K) { return (K + 31) / 32; }

constexpr int bitrev5(int i) {
  return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}

// One leaf pass of a tile (MT x rows, NV vectors of W rows) and its fold into the tree.
// xs: the x block's leaf slice (S steps of kXr floats); ws: the W block's (S steps of wr floats).
// stack: the tile's partial sums, level l at stack + l * kXr * kWv * 16. After leaf 31 the tree is
// complete: its sums (+ bias) go to y, lanes < nvalid of the last vector.
template <int MT, int NV>
void leaf(const float* xs, const float* ws, i64 wr, i64 S, int i, float* stack, float* y, i64 ldy, const float* bias,
          i64 nvalid) {
  __m512 acc[MT][NV];
  for (int m = 0; m < MT; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  for (i64 s = 0; s < S; ++s, xs += kXr, ws += wr) {
    __m512 w[NV];
    for (int v = 0; v < NV; ++v) w[v] = _mm512_loadu_ps(ws + 16 * v);
    for (int m = 0; m < MT; ++m) {
      const __m512 xb = _mm512_set1_ps(xs[m]);
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(w[v], xb, acc[m][v]);
    }
  }
  int level = 0;
  for (unsigned c = static_cast<unsigned>(i); c & 1u; c >>= 1, ++level) {
    const float* p = stack + level * (kXr * kWv * 16);
    for (int m = 0; m < MT; ++m)
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_add_ps(acc[m][v], _mm512_loadu_ps(p + (m * kWv + v) * 16));
  }
  if (level < kLevels) {
    float* p = stack + level * (kXr * kWv * 16);
    for (int m = 0; m < MT; ++m)
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(p + (m * kWv + v) * 16, acc[m][v]);
    return;
  }
  // The bias as its own f32 add after the sum, as a separate pass over y would add it.
  for (int v = 0; v < NV; ++v) {
    const __mmask16 mask = gemm_lanes(nvalid - 16 * v);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + 16 * v) : _mm512_setzero_ps();
    for (int m = 0; m < MT; ++m)
      _mm512_mask_storeu_ps(y + m * ldy + 16 * v, mask, bias ? _mm512_add_ps(acc[m][v], b) : acc[m][v]);
  }
}

using LeafFn = void (*)(const float*, const float*, i64, i64, int, float*, float*, i64, const float*, i64);

template <int MT, int... V> constexpr std::array<LeafFn, sizeof...(V)> leaf_row(std::integer_sequence<int, V...>) {
  return {leaf<MT, V + 1>...};
}
template <int... M> constexpr std::array<std::array<LeafFn, kWv>, sizeof...(M)> leaf_table(std::integer_sequence<int, M...>) {
  return {leaf_row<M + 1>(std::make_integer_sequence<int, kWv>{})...};
}
// kLeaves[mt - 1][nv - 1]: the edge tiles run the same order as the full one.
constexpr auto kLeaves = leaf_table(std::make_integer_sequence<int, kXr>{});

constexpr i64 kMcBlocks = kGemmScratchFloats / kStackFloats;  // x blocks per chunk: their partial sums stay in L2
// How many leaf passes ahead W is prefetched: 1, 2 and 4 ran alike at 128 x 896 x 16,384 packed once
// (bench/README.md); one slice ahead keeps the least extra in L2.
constexpr i64 kAhead = 1;
static_assert(kMcBlocks >= 1);

// The 16 x 16 floats of r transposed in place (r[i] lane c becomes r[c] lane i).
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // r[4 i + q], 128-bit block L: column 4 L + q of rows 4 i .. 4 i + 3.
  for (int q = 0; q < 4; ++q) {
    const __m512 ab02 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88), ab13 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xDD);
    const __m512 cd02 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88), cd13 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xDD);
    t[q] = _mm512_shuffle_f32x4(ab02, cd02, 0x88);
    t[8 + q] = _mm512_shuffle_f32x4(ab02, cd02, 0xDD);
    t[4 + q] = _mm512_shuffle_f32x4(ab13, cd13, 0x88);
    t[12 + q] = _mm512_shuffle_f32x4(ab13, cd13, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

}  // namespace

// x rows [0, M) at stride ldx into blocks of kXr rows: block b, leaf j, step s holds
// x[b kXr + r][32 s + j] for r < kXr at xp + ((b * 32 + j) * S + s) * kXr (zero past M and K).
// Two blocks at a time: 16 rows x 16 elements transposed, each result vector one leaf's 8 + 8 rows.
void gemm_pack_x_avx512(const float* x, i64 M, i64 ldx, i64 K, float* xp) {
  static_assert(kXr == 8);
  const i64 S = steps_of(K), blocks = (M + kXr - 1) / kXr;
  for (i64 b = 0; b < blocks; b += 2) {
    float* lo = xp + b * 32 * S * kXr;
    float* hi = b + 1 < blocks ? lo + 32 * S * kXr : nullptr;
    for (i64 s = 0; s < S; ++s)
      for (int h = 0; h < 2; ++h) {
        const i64 k0 = 32 * s + 16 * h;
        const __mmask16 mask = gemm_lanes(K - k0);
        __m512 r[16];
        for (int o = 0; o < 16; ++o)
          r[o] = b * kXr + o < M ? _mm512_maskz_loadu_ps(mask, x + (b * kXr + o) * ldx + k0) : _mm512_setzero_ps();
        transpose16(r);
        for (int jj = 0; jj < 16; ++jj) {
          const i64 at = ((16 * h + jj) * S + s) * kXr;
          _mm256_storeu_ps(lo + at, _mm512_castps512_ps256(r[jj]));
          if (hi) _mm256_storeu_ps(hi + at, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r[jj]), 1)));
        }
      }
  }
}

// 16 W elements from k0 of a row (f32 or bf16; zero past the mask), as f32: bf16 is the top half of
// an f32, widened exactly as the GEMV's load_w widens it.
inline __m512 load_w16(const void* W, bool bf16, i64 row, i64 K, i64 k0, __mmask16 mask) {
  if (!bf16) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(W) + row * K + k0);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const std::uint16_t*>(W) + row * K + k0);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// W rows [0, N) (f32 or bf16, row-major, K each) into blocks of kWr rows: block c, leaf j, step s
// holds the wr = min(kWr, N - c kWr rounded up to 16) floats W[c kWr + o][32 s + j] at
// wp + c kWr 32 S + (j S + s) wr (zero past N and K). 16 x 16 transposes of whole vectors; bf16
// is widened on the way (one pass over W, no f32 copy between).
void gemm_pack_w_avx512(const void* W, bool bf16, i64 N, i64 K, float* wp) {
  const i64 S = steps_of(K);
  for (i64 c = 0; c * kWr < N; ++c) {
    const i64 left = N - c * kWr, wr = left >= kWr ? kWr : (left + 15) / 16 * 16;
    float* out = wp + c * kWr * 32 * S;
    for (i64 g = 0; g * 16 < wr; ++g) {
      const i64 rows = left - 16 * g;  // W rows of this group that exist (may exceed 16)
      for (i64 s = 0; s < S; ++s)
        for (int h = 0; h < 2; ++h) {
          const i64 k0 = 32 * s + 16 * h;
          const __mmask16 mask = gemm_lanes(K - k0);
          __m512 r[16];
          for (int o = 0; o < 16; ++o) r[o] = o < rows ? load_w16(W, bf16, c * kWr + 16 * g + o, K, k0, mask) : _mm512_setzero_ps();
          transpose16(r);
          for (int jj = 0; jj < 16; ++jj) _mm512_storeu_ps(out + ((16 * h + jj) * S + s) * wr + 16 * g, r[jj]);
        }
    }
  }
}

namespace {
// Prefetches (into L2) part q of nq of the `floats` floats at p: the next leaf slice of W, spread
// over the x blocks of the current leaf so that no call issues them all at once.
inline void prefetch_part(const float* p, i64 floats, i64 q, i64 nq) {
  const i64 lines = (floats + 15) / 16, per = (lines + nq - 1) / nq;
  const char* c = reinterpret_cast<const char*>(p);
  for (i64 l = q * per, end = l + per < lines ? l + per : lines; l < end; ++l) _mm_prefetch(c + 64 * l, _MM_HINT_T1);
}
}  // namespace

// y[m ldy + n] = the exact sum of x row m and W row n (+ bias[n]) for m < M, n < N, from the packs
// above (xp of M rows, wp of N rows, both over K). scratch: kGemmScratchFloats.
// While a leaf runs over the chunk's x blocks, the W slice that the leaf kAhead passes later reads
// (in this block, or in the next) is prefetched into L2, a share per x block; the first kAhead
// slices at the start. W packed once (a hinted weight, ops.h PackedW) comes from memory, and a
// leaf's first reads would otherwise wait for it. W packed per call is in L2 already: the hints
// then cost a few instructions a leaf.
void gemm_packed_avx512(const float* xp, i64 M, const float* wp, i64 N, i64 K, const float* bias, float* y, i64 ldy,
                        float* scratch) {
  const i64 S = steps_of(K), xblocks = (M + kXr - 1) / kXr, wblocks = (N + kWr - 1) / kWr;
  const auto block_rows = [&](i64 c) {  // floats a step of block c holds (its wr)
    const i64 left = N - c * kWr;
    return left >= kWr ? kWr : (left + 15) / 16 * 16;
  };
  // Leaf pass g = 32 c + i over the W blocks in turn: its slice, and its size (0 past the last).
  const auto slice = [&](i64 g, i64& floats) {
    const i64 c = g / 32;
    floats = c < wblocks ? S * block_rows(c) : 0;
    return floats ? wp + c * kWr * 32 * S + bitrev5(static_cast<int>(g % 32)) * floats : wp;
  };
  for (i64 g = 0; g < kAhead; ++g) {
    i64 floats;
    const float* p = slice(g, floats);
    prefetch_part(p, floats, 0, 1);
  }
  for (i64 b0 = 0; b0 < xblocks; b0 += kMcBlocks) {
    const i64 b1 = b0 + kMcBlocks < xblocks ? b0 + kMcBlocks : xblocks;
    for (i64 c = 0; c < wblocks; ++c) {
      const i64 left = N - c * kWr, nvalid = left < kWr ? left : kWr, wr = block_rows(c);
      const float* wblock = wp + c * kWr * 32 * S;
      for (int i = 0; i < 32; ++i) {
        const int j = bitrev5(i);
        i64 ahead_floats;
        const float* ahead = slice(32 * c + i + kAhead, ahead_floats);
        for (i64 b = b0; b < b1; ++b) {
          prefetch_part(ahead, ahead_floats, b - b0, b1 - b0);
          const i64 mt = M - b * kXr < kXr ? M - b * kXr : kXr;
          kLeaves[static_cast<std::size_t>(mt - 1)][static_cast<std::size_t>(wr / 16 - 1)](
              xp + (b * 32 + j) * S * kXr, wblock + j * S * wr, wr, S, i, scratch + (b - b0) * kStackFloats,
              y + b * kXr * ldy + c * kWr, ldy, bias ? bias + c * kWr : nullptr, nvalid);
        }
      }
    }
  }
}

}  // namespace sonde::threaded
