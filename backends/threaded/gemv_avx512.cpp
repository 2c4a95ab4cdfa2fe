// AVX-512 GEMV for decode (few x rows, W streamed from memory once): y[m, n] = sum_k x[m, k] W[n, k].
// It is memory-bound, so the loop is shaped for the load path:
//  - rows [n0, n1) are read as R long streams: the range is cut into R equal runs of rows, and a
//    block takes the next row of each run. The hardware prefetcher follows R streams that last
//    the whole call instead of R rows of a few hundred bytes each (the next R rows in memory order
//    start R new streams). Measured on the 169 GEMVs of a qwen2.5-0.5b decode step beside a
//    streaming read: 91% of the read at 60-78 GB/s, against 78% for R consecutive rows;
//  - R rows of W at a time share the x vectors (x is small and stays in L1);
//  - one step covers 32 elements of K per row (one 64-byte line of bf16/f16, two of f32) with two
//    independent accumulators per (row, x row), so 2*R*M FMA chains are in flight;
//  - bf16 is widened by zero-extending 16 elements to 32-bit lanes and shifting them up (bf16 is
//    the top half of an f32): more instructions than the shift/and split of one 64-byte load, but
//    no shuffle of x, and it ran 30% faster from L1 and 3-5 points closer to the read from memory;
//  - every row stream is prefetched kAhead bytes ahead; past the end of its row the prefetch runs
//    on into the stream's next row, which is the next row in memory. The hint is non-temporal
//    (each weight line is used once per token): 1-3% less time per qwen2.5-0.5b decode token than
//    with T0 in 7 of 7 in-process A/B runs at 40-63 GB/s. The distance needed grows with the
//    bandwidth (more lines must be in flight): against 1 KB, 1.5 KB took 2.7-5.4% less time per
//    token in 7 of 7 A/B runs at 70-78 GB/s and up to 2.7% more (1.2% on average) in 7 at
//    42-52 GB/s; 2 KB gained as much at the high end but lost 2-3% at the low one.
// Summation order of one output: lane-wise over the steps of K in ascending order, then the two
// accumulators added and the 16 lanes reduced. It depends only on K (not on R, M, n or threads).
#include "kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

constexpr i64 kStep = 32;     // K elements per step
constexpr i64 kAhead = 1536;  // prefetch distance per row stream, bytes
constexpr i64 kChunkBytes = 256 << 10;  // W bytes per row chunk when M > 3 (half an L2)
// x bytes per panel of rows when M > 3: every chunk of W visits a panel's rows before the next panel,
// so x is read from L3, not from memory, once per chunk (see gemv_t).
constexpr i64 kPanelBytes = 1 << 20;

inline __mmask16 lanes(i64 n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u); }

template <WType T> constexpr i64 esize() { return T == WType::f32 ? 4 : T == WType::q8 ? 1 : 2; }
// Bytes from a row's start to element k (k a multiple of kStep, or K for a row's length); a q8
// step is one block (kStep == kQ8Block).
template <WType T> constexpr i64 wbytes(i64 k) {
  return T == WType::q8 ? q8_row_bytes(k) : k * esize<T>();
}

// x[k .. k+valid) (valid <= 32, zero beyond) as two vectors.
inline void load_x(const float* x, i64 valid, __m512& a, __m512& b) {
  a = _mm512_maskz_loadu_ps(lanes(valid), x);
  b = _mm512_maskz_loadu_ps(lanes(valid - 16), x + 16);
}

// 32 weights of a row from element pointer p (valid <= 32, zero beyond), widened to f32.
template <WType T, bool Full> inline void load_w(const void* p, i64 valid, __m512& a, __m512& b) {
  if constexpr (T == WType::bf16) {
    const auto* h = static_cast<const std::uint16_t*>(p);
    const __m256i lo = Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)) : _mm256_maskz_loadu_epi16(lanes(valid), h);
    const __m256i hi = Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 16))
                            : _mm256_maskz_loadu_epi16(lanes(valid - 16), h + 16);
    a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(lo), 16));
    b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
  } else if constexpr (T == WType::f16) {
    const auto* h = static_cast<const std::uint16_t*>(p);
    a = _mm512_cvtph_ps(Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)) : _mm256_maskz_loadu_epi16(lanes(valid), h));
    b = _mm512_cvtph_ps(Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 16))
                             : _mm256_maskz_loadu_epi16(lanes(valid - 16), h + 16));
  } else if constexpr (T == WType::q8) {
    // w = float(q) * s as kernels.h defines it; past `valid` zero, as the other types' masked loads
    // give (the block's padding is there to read).
    static_assert(kStep == kQ8Block);
    const auto* blk = static_cast<const unsigned char*>(p);
    const __m512 s = _mm512_castsi512_ps(_mm512_broadcastd_epi32(_mm_loadu_si32(blk)));
    const __m512 qa = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4))));
    const __m512 qb = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 20))));
    a = Full ? _mm512_mul_ps(qa, s) : _mm512_maskz_mul_ps(lanes(valid), qa, s);
    b = Full ? _mm512_mul_ps(qb, s) : _mm512_maskz_mul_ps(lanes(valid - 16), qb, s);
  } else {
    const auto* f = static_cast<const float*>(p);
    a = Full ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps(lanes(valid), f);
    b = Full ? _mm512_loadu_ps(f + 16) : _mm512_maskz_loadu_ps(lanes(valid - 16), f + 16);
  }
}

// A sweep of prefetches over a byte range, a share of it per step: it brings the task's next
// chunk of W into L2 while the passes over the current one run from L2. Without it a chunk's
// first pass waits on memory and the later ones leave memory idle; with it an 8-row decode step
// of qwen2.5-0.5b took 11-14% less time on one thread (bench/README.md).
struct Ahead {
  const char* p = nullptr;
  const char* end = nullptr;
  i64 per_step = 0, budget = 0;  // bytes a step may prefetch; bytes owed so far
  inline void step() {
    for (budget += per_step; budget >= 64 && p < end; budget -= 64, p += 64) _mm_prefetch(p, _MM_HINT_T0);
  }
};

template <WType T, int M, int R> struct Block {
  __m512 acc[M][R][2];

  // One step: elements [k, k + valid) of rows base + r * stride.
  template <bool Full> inline void step(const float* x, i64 ldx, const char* base, i64 stride, i64 k, i64 valid) {
    __m512 xa[M], xb[M];
    for (int m = 0; m < M; ++m) load_x(x + m * ldx + k, valid, xa[m], xb[m]);
    for (int r = 0; r < R; ++r) {
      __m512 wa, wb;
      load_w<T, Full>(base + r * stride + wbytes<T>(k), valid, wa, wb);
      for (int m = 0; m < M; ++m) {
        acc[m][r][0] = _mm512_fmadd_ps(wa, xa[m], acc[m][r][0]);
        acc[m][r][1] = _mm512_fmadd_ps(wb, xb[m], acc[m][r][1]);
      }
    }
  }

  // Prefetches the lines kAhead bytes past offset `off` of every row (on into its stream's next row).
  inline void prefetch(const char* base, i64 stride, i64 off) const {
    for (int r = 0; r < R; ++r) {
      const char* p = base + r * stride + off + kAhead;
      _mm_prefetch(p, _MM_HINT_NTA);
      if constexpr (esize<T>() == 4) _mm_prefetch(p + 64, _MM_HINT_NTA);
    }
  }

  // y[m * ldy + r * ystride] for rows base + r * stride, K elements each.
  template <bool WithAhead = false>
  void run(const float* x, i64 ldx, const char* base, i64 stride, i64 K, float* y, i64 ldy, i64 ystride,
           Ahead* ahead = nullptr) {
    zero();
    i64 k = 0;
    for (; k + kStep <= K; k += kStep) {
      prefetch(base, stride, wbytes<T>(k));
      if constexpr (WithAhead) ahead->step();
      step<true>(x, ldx, base, stride, k, kStep);
    }
    if (k < K) step<false>(x, ldx, base, stride, k, K - k);
    finish(y, ldy, ystride);
  }

  void zero() {
    for (int m = 0; m < M; ++m)
      for (int r = 0; r < R; ++r) acc[m][r][0] = acc[m][r][1] = _mm512_setzero_ps();
  }
  void finish(float* y, i64 ldy, i64 ystride) const {
    for (int m = 0; m < M; ++m)
      for (int r = 0; r < R; ++r) y[m * ldy + r * ystride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][r][0], acc[m][r][1]));
  }
};

// M x rows of x against W rows [n0, n1): R streams of `run` rows each (block i takes row i of
// every stream), then the rows left over one at a time.
// `ahead`, if given, runs its sweep over the call's steps.
template <WType T, int M>
void gemv_m(const float* x, i64 ldx, const void* W, i64 K, i64 n0, i64 n1, float* y, i64 ldy, Ahead* ahead = nullptr) {
  constexpr int R = 4;
  const auto* w = static_cast<const char*>(W);
  const i64 rowbytes = wbytes<T>(K), run = (n1 - n0) / R;
  const auto blocks = [&]<bool A>() {
    for (i64 i = 0; i < run; ++i)
      Block<T, M, R>{}.template run<A>(x, ldx, w + (n0 + i) * rowbytes, run * rowbytes, K, y + n0 + i, ldy, run, ahead);
    for (i64 n = n0 + R * run; n < n1; ++n)
      Block<T, M, 1>{}.template run<A>(x, ldx, w + n * rowbytes, rowbytes, K, y + n, ldy, 1, ahead);
  };
  if (ahead) blocks.template operator()<true>();
  else blocks.template operator()<false>();
}

// x rows in groups of up to 3 (the register budget of a 4-row block).
// Rows in chunks of about kChunkBytes of W (they stay in L2), each chunk against every group of
// up to 3 x rows: W comes from memory once whatever M is. The next chunk's bytes (contiguous:
// rows are) are prefetched meanwhile by the first (up to) kAheadGroups groups, a share each
// spread over its steps, so the memory streams while the groups compute (see Ahead). Later
// groups run without it: at 43 groups (128 rows) carrying it in every group cost 3.5% of a
// prefill, and the chunk is in L2 long before.
constexpr i64 kAheadGroups = 3;
template <WType T> void gemv_t(const float* x, i64 M, i64 ldx, const void* W, i64 K, i64 n0, i64 n1, float* y, i64 ldy) {
  const i64 chunk = M <= 3 ? n1 - n0 : (kChunkBytes / wbytes<T>(K) / 8 + 1) * 8;
  const i64 rowbytes = wbytes<T>(K), steps_per_row = (K + kStep - 1) / kStep;
  const auto* w = static_cast<const char*>(W);
  // Panels of x rows that stay in L3 (whole groups of 3): a 1024 x 4864 x 896 Linear read its 20 MB
  // of x from memory once per chunk of bf16 W (34 chunks) and ran at 150 GFLOP/s against 200 at 256 rows.
  const i64 panel = M <= 3 ? M : std::max<i64>(3, kPanelBytes / (K * 4) / 3 * 3);
  for (i64 p0 = 0; p0 < M; p0 += panel) {
    const i64 p1 = p0 + panel < M ? p0 + panel : M;
    // The x rows of the groups that carry the prefetch: each takes a share in proportion to its
    // rows (its time), so a 1-row group is not asked for as many bytes as a 3-row one.
    const i64 carriers = std::min<i64>(p1 - p0, 3 * kAheadGroups);
    for (i64 r0 = n0; r0 < n1; r0 += chunk) {
      const i64 r1 = r0 + chunk < n1 ? r0 + chunk : n1, r2 = r1 + chunk < n1 ? r1 + chunk : n1;
      const i64 next = M > 3 ? (r2 - r1) * rowbytes : 0;
      const i64 steps = ((r1 - r0 + 3) / 4) * steps_per_row;  // a group's block steps over this chunk
      for (i64 m = p0; m < p1;) {
        const i64 rows = std::min<i64>(3, p1 - m), at = m - p0;
        Ahead ahead;
        if (next > 0 && at < carriers) {
          const char* start = w + r1 * rowbytes;
          ahead.p = start + next * at / carriers;
          ahead.end = start + next * (at + rows) / carriers;
          ahead.per_step = (ahead.end - ahead.p + steps - 1) / steps;
        }
        Ahead* a = ahead.p ? &ahead : nullptr;
        if (rows == 3) gemv_m<T, 3>(x + m * ldx, ldx, W, K, r0, r1, y + m * ldy, ldy, a);
        else if (rows == 2) gemv_m<T, 2>(x + m * ldx, ldx, W, K, r0, r1, y + m * ldy, ldy, a);
        else gemv_m<T, 1>(x + m * ldx, ldx, W, K, r0, r1, y + m * ldy, ldy, a);
        m += rows;
      }
    }
  }
}

}  // namespace

void gemv_avx512(const float* x, i64 M, i64 ldx, const void* W, WType wt, i64 K, i64 n0, i64 n1, float* y, i64 ldy) {
  switch (wt) {
    case WType::f32: return gemv_t<WType::f32>(x, M, ldx, W, K, n0, n1, y, ldy);
    case WType::f16: return gemv_t<WType::f16>(x, M, ldx, W, K, n0, n1, y, ldy);
    case WType::bf16: return gemv_t<WType::bf16>(x, M, ldx, W, K, n0, n1, y, ldy);
    case WType::q8: return gemv_t<WType::q8>(x, M, ldx, W, K, n0, n1, y, ldy);
  }
}

}  // namespace sonde::threaded
