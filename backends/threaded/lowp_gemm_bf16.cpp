// The bf16 mode's GEMM for many x rows (issue 28) as an outer-product kernel on packed operands,
// every output bit-identical to lowp.h's order (and so to every other bf16 table but AMX's).
//
// lowp.h's order for output (m, n): 16 lane chains a_l, l < 16; chain l adds, step s by step s,
// the products of elements 32 s + 2 l + 1 and then 32 s + 2 l (x and W as bf16, zero past K); then
// the tree (a_i + a_{i+8}), (i, i+4), (i, i+2), the last two. VDPBF16PS does exactly one chain
// step per lane on whatever 32-bit pairs it is given (acc += a[2i+1] b[2i+1], then + a[2i] b[2i],
// each product exact), so a chain can run with the 16 lanes of a vector being 16 different W rows
// and x's pair of the same (s, l) broadcast: a "leaf pass" over the S steps of chain l. The tree
// is a binary tree whose leaves, left to right, are l in 4-bit bit-reversed order (0, 8, 4, 12,
// ...): the leaves run in that order and fold as a binary counter does (after leaf i, one add per
// trailing 1 bit of i with a partial sum kept in scratch), the same pairs added lane-wise across
// outputs (IEEE addition is commutative: the pairing decides the bits). gemm_avx512.cpp does the
// same with the f32 GEMV's 32 chains.
//
// Register tile: 8 x rows by 48 W rows (3 vectors of 16 outputs): per step 3 W loads and 8 x
// pairs as {1to16} broadcast operands of 24 VDPBF16PS into 24 independent accumulators; no
// horizontal work. Packs (dwords: one bf16 pair each):
//  - x (once per call, lowp_pack_x_bf16): [8-row block][l][s][8 rows];
//  - W (per panel of a task, here): [48-row tile][l][s][wr rows], wr = 48 or the last tile's
//    rows rounded up to 16 (zero rows and zero past K: their lanes are never stored).
// Blocking, from the caches (not from a shape): a panel of tiles whose pack fits half of L2 (it is
// re-read by every chunk of x blocks), one tile's leaf slice (S x 192 bytes: 21 KB at K = 3584,
// in L1; 114 KB at 18,944, in L2) reused by every x block of a chunk, and chunks of x blocks
// whose partial sums (6 KB a block) take at most a quarter of L2. x streams past each tile once
// per chunk: 2 bytes per 96 multiply-adds, ~20 GB/s from L3 at the 2 cores' peak.
#include "lowp.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <utility>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

constexpr int kBxr = kLowpGemmXRows;  // x rows per register tile (broadcast)
constexpr int kBwv = 3;               // W vectors of 16 outputs per register tile
constexpr int kBwr = kLowpGemmWRows;  // = 16 kBwv
constexpr int kBLevels = 4;           // log2 of the 16 leaves: partial sums kept at most
constexpr i64 kBLevelFloats = kBxr * kBwv * 16;
constexpr i64 kBStackFloats = kBLevels * kBLevelFloats;  // per x block
constexpr int kBSegFirst = 1, kBSegLast = 2;              // a chain's first and last segment of steps
static_assert(kBwr == 16 * kBwv && kBxr == 8);

constexpr i64 bsteps(i64 K) { return (K + 31) / 32; }

constexpr int bitrev4(int i) { return ((i & 1) << 3) | ((i & 2) << 1) | ((i & 4) >> 1) | ((i & 8) >> 3); }

inline __mmask16 blanes(i64 n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u); }

// The host's L1 data and L2 cache sizes (32 KB and 512 KB when the system does not say).
i64 bcache_bytes(int name, i64 fallback) {
  const long b = sysconf(name);
  return b > 0 ? static_cast<i64>(b) : fallback;
}
i64 bl1_bytes() {
  static const i64 bytes = bcache_bytes(_SC_LEVEL1_DCACHE_SIZE, i64{32} << 10);
  return bytes;
}
i64 bl2_bytes() {
  static const i64 bytes = bcache_bytes(_SC_LEVEL2_CACHE_SIZE, i64{512} << 10);
  return bytes;
}

// One leaf pass of a tile (MT x rows, NV vectors of W rows) over S steps, and its fold into the tree.
// xs: the x block's leaf slice (S steps of kBxr pairs); ws: the W tile's (S steps of wr pairs).
// A chain longer than a segment of steps runs as several calls: the first starts from zero, each
// other one from the chain's lanes in part (kBLevelFloats), and all but the last store them there
// (the same chain, so the same bits); the last folds.
// stack: the tile's partial sums, level v at stack + v kBLevelFloats. After leaf 15 the tree is
// complete and its sums go to y (lanes < nvalid of the last vector).
template <int MT, int NV>
void bleaf(const std::uint32_t* xs, const std::uint32_t* ws, i64 wr, i64 S, int i, float* stack, float* part, int seg,
           float* y, i64 ldy, i64 nvalid) {
  __m512 acc[MT][NV];
  for (int m = 0; m < MT; ++m)
    for (int v = 0; v < NV; ++v)
      acc[m][v] = seg & kBSegFirst ? _mm512_setzero_ps() : _mm512_loadu_ps(part + (m * kBwv + v) * 16);
  for (i64 s = 0; s < S; ++s, xs += kBxr, ws += wr) {
    __m512bh w[NV];
    for (int v = 0; v < NV; ++v) w[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(ws + 16 * v));
    for (int m = 0; m < MT; ++m) {
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xs[m])));
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], w[v], xb);
    }
  }
  if (!(seg & kBSegLast)) {
    for (int m = 0; m < MT; ++m)
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(part + (m * kBwv + v) * 16, acc[m][v]);
    return;
  }
  int level = 0;
  for (unsigned c = static_cast<unsigned>(i); c & 1u; c >>= 1, ++level) {
    const float* p = stack + level * kBLevelFloats;
    for (int m = 0; m < MT; ++m)
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_add_ps(acc[m][v], _mm512_loadu_ps(p + (m * kBwv + v) * 16));
  }
  if (level < kBLevels) {
    float* p = stack + level * kBLevelFloats;
    for (int m = 0; m < MT; ++m)
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(p + (m * kBwv + v) * 16, acc[m][v]);
    return;
  }
  for (int v = 0; v < NV; ++v) {
    const __mmask16 mask = blanes(nvalid - 16 * v);
    for (int m = 0; m < MT; ++m) _mm512_mask_storeu_ps(y + m * ldy + 16 * v, mask, acc[m][v]);
  }
}

using BLeafFn = void (*)(const std::uint32_t*, const std::uint32_t*, i64, i64, int, float*, float*, int, float*, i64, i64);

template <int MT, int... V> constexpr std::array<BLeafFn, sizeof...(V)> bleaf_row(std::integer_sequence<int, V...>) {
  return {bleaf<MT, V + 1>...};
}
template <int... M>
constexpr std::array<std::array<BLeafFn, kBwv>, sizeof...(M)> bleaf_table(std::integer_sequence<int, M...>) {
  return {bleaf_row<M + 1>(std::make_integer_sequence<int, kBwv>{})...};
}
// kBLeaves[mt - 1][nv - 1]: the edge tiles run the same order as the full one.
constexpr auto kBLeaves = bleaf_table(std::make_integer_sequence<int, kBxr>{});

// The 16 x 16 dwords of r transposed in place (r[i] lane c becomes r[c] lane i): gemm_avx512.cpp's
// shuffles on 32-bit lanes, which move bits and never look at them (a bf16 pair is no float). A
// copy of this TU's own: an inline function shared with a TU of other ISA flags could be linked
// to either's code.
inline void btranspose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // r[4 i + q], 128-bit block L: column 4 L + q of rows 4 i .. 4 i + 3.
  for (int q = 0; q < 4; ++q) {
    const __m512i ab02 = _mm512_shuffle_i32x4(r[q], r[4 + q], 0x88), ab13 = _mm512_shuffle_i32x4(r[q], r[4 + q], 0xDD);
    const __m512i cd02 = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0x88), cd13 = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0xDD);
    t[q] = _mm512_shuffle_i32x4(ab02, cd02, 0x88);
    t[8 + q] = _mm512_shuffle_i32x4(ab02, cd02, 0xDD);
    t[4 + q] = _mm512_shuffle_i32x4(ab13, cd13, 0x88);
    t[12 + q] = _mm512_shuffle_i32x4(ab13, cd13, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// W rows [0, rows) of K bf16 each (row-major, unpadded) into tiles of kBwr rows at wp (layout above).
void bpack_w(const std::uint16_t* W, i64 rows, i64 K, std::uint32_t* wp) {
  const i64 S = bsteps(K);
  for (i64 t = 0; t * kBwr < rows; ++t) {
    const i64 left = rows - t * kBwr, wr = left >= kBwr ? kBwr : (left + 15) / 16 * 16;
    std::uint32_t* out = wp + t * kBwr * 16 * S;
    for (i64 g = 0; g * 16 < wr; ++g) {
      const i64 have = left - 16 * g;  // W rows of this group that exist (may exceed 16)
      const std::uint16_t* base = W + (t * kBwr + 16 * g) * K;
      for (i64 s = 0; s < S; ++s) {
        const i64 k0 = 32 * s;
        const __mmask32 mask = K - k0 >= 32 ? ~__mmask32(0) : (__mmask32(1) << (K - k0)) - 1;
        __m512i r[16];
        for (int o = 0; o < 16; ++o) r[o] = o < have ? _mm512_maskz_loadu_epi16(mask, base + o * K + k0) : _mm512_setzero_si512();
        btranspose16(r);
        for (int l = 0; l < 16; ++l) _mm512_storeu_si512(out + (l * S + s) * wr + 16 * g, r[l]);
      }
    }
  }
}

// A buffer per thread that grows and is kept, never zero-filled (each call writes what it reads).
template <typename T> struct BKept {
  std::unique_ptr<T[]> mem;
  i64 size = 0;
  T* get(i64 n) {
    if (n > size) {
      mem.reset(new T[static_cast<std::size_t>(n)]);
      size = n;
    }
    return mem.get();
  }
};

}  // namespace

// x rows [0, M) (bf16, ldx elements apart, zero from K to a multiple of 32) into blocks of kBxr
// rows: block b, leaf l, step s holds the pairs x[b kBxr + r][32 s + 2l, + 1] for r < kBxr at
// xp + ((b 16 + l) S + s) kBxr (zero past M). Two blocks at a time: 16 rows x 16 pairs transposed.
void lowp_pack_x_bf16(const std::uint16_t* x, i64 M, i64 ldx, i64 K, std::uint32_t* xp) {
  const i64 S = bsteps(K), blocks = (M + kBxr - 1) / kBxr;
  for (i64 b = 0; b < blocks; b += 2) {
    std::uint32_t* lo = xp + b * 16 * S * kBxr;
    std::uint32_t* hi = b + 1 < blocks ? lo + 16 * S * kBxr : nullptr;
    for (i64 s = 0; s < S; ++s) {
      __m512i r[16];
      for (int o = 0; o < 16; ++o)
        r[o] = b * kBxr + o < M ? _mm512_loadu_si512(x + (b * kBxr + o) * ldx + 32 * s) : _mm512_setzero_si512();
      btranspose16(r);
      for (int l = 0; l < 16; ++l) {
        const i64 at = (l * S + s) * kBxr;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + at), _mm512_castsi512_si256(r[l]));
        if (hi) _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + at), _mm512_extracti64x4_epi64(r[l], 1));
      }
    }
  }
}

// y[m ldy + n] for m < M, n0 <= n < n1 from the x pack of M rows and bf16 W rows (row n at W + n K).
// A leaf pass runs in segments of steps whose W slice (192 bytes a step) takes half of L1, so the
// slice stays there while every x block of the chunk passes (from L2 past 128 steps: at K = 18,944
// the whole slice is 114 KB, and the packed GEMM ran at 0.75x its K = 3584 rate).
void lowp_gemm_bf16_packed(const std::uint32_t* xp, i64 M, const std::uint16_t* W, i64 K, i64 n0, i64 n1, float* y,
                           i64 ldy) {
  const i64 S = bsteps(K), tile_bytes = kBwr * S * 64, l2 = bl2_bytes();
  const i64 panel = kBwr * std::max<i64>(1, l2 / 2 / tile_bytes);
  const i64 xblocks = (M + kBxr - 1) / kBxr;
  const i64 chunk = std::clamp<i64>(l2 / 4 / ((kBStackFloats + kBLevelFloats) * 4), 1, xblocks);
  const i64 seg = std::max<i64>(1, bl1_bytes() / 2 / (kBwr * 4));
  thread_local BKept<std::uint32_t> t_wpack;
  thread_local BKept<float> t_stack;
  std::uint32_t* wp = t_wpack.get(std::min(panel, (n1 - n0 + kBwr - 1) / kBwr * kBwr) * 16 * S);
  float* stack = t_stack.get(chunk * (kBStackFloats + kBLevelFloats));
  float* part = stack + chunk * kBStackFloats;  // the chains' lanes between segments, per x block
  for (i64 p0 = n0; p0 < n1; p0 += panel) {
    const i64 p1 = std::min(n1, p0 + panel);
    bpack_w(W + p0 * K, p1 - p0, K, wp);
    for (i64 b0 = 0; b0 < xblocks; b0 += chunk) {
      const i64 b1 = std::min(xblocks, b0 + chunk);
      for (i64 t = 0; p0 + t * kBwr < p1; ++t) {
        const i64 left = p1 - p0 - t * kBwr, nvalid = std::min<i64>(left, kBwr);
        const i64 wr = left >= kBwr ? kBwr : (left + 15) / 16 * 16;
        const std::uint32_t* wtile = wp + t * kBwr * 16 * S;
        for (int i = 0; i < 16; ++i) {
          const int l = bitrev4(i);
          for (i64 s0 = 0; s0 < S; s0 += seg) {
            const i64 steps = std::min(seg, S - s0);
            const int where = (s0 == 0 ? kBSegFirst : 0) | (s0 + steps == S ? kBSegLast : 0);
            for (i64 b = b0; b < b1; ++b) {
              const i64 mt = std::min<i64>(kBxr, M - b * kBxr);
              kBLeaves[static_cast<std::size_t>(mt - 1)][static_cast<std::size_t>(wr / 16 - 1)](
                  xp + ((b * 16 + l) * S + s0) * kBxr, wtile + (l * S + s0) * wr, wr, steps, i,
                  stack + (b - b0) * kBStackFloats, part + (b - b0) * kBLevelFloats, where,
                  y + b * kBxr * ldy + p0 + t * kBwr, ldy, nvalid);
            }
          }
        }
      }
    }
  }
}

}  // namespace sonde::threaded
