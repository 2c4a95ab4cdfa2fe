// The bf16 mode with AVX512_BF16: one VDPBF16PS per 32 products (two per lane, in lowp.h's
// order by definition), twice the multiply-adds per instruction of an f32 FMA. Tiles of 4 x rows
// by 6 W rows: 24 accumulators, 10 loads per 24 dot products, for prefill and for a batch's decode
// (lowp_drive; swept on the Zen 5 host of bench/README.md "Batched decode" against 8x3, 6x4, 10x2,
// 12x2 and 16x1 at 4-64 rows: 4x6 best or within 5% everywhere, 16x1 the slowest: 35-50%).
#include "lowp.h"
#include "lowp_tiles.h"

namespace sonde::threaded {
namespace {

inline void madd_bf16_dp(__m512& acc, __m512i x, __m512i w) {
  acc = _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh&>(x), reinterpret_cast<__m512bh&>(w));
}

void gemm_bf16_dp(const std::uint16_t* x, i64 M, i64 ldx, const std::uint16_t* W, i64 K, i64 n0, i64 n1, float* y,
                  i64 ldy) {
  // A lambda, not the function's pointer: the call must inline into the tile's loop.
  lowp_bf16<4, 6, 4, 6>(x, M, ldx, W, K, n0, n1, y, ldy, [](__m512& a, __m512i xv, __m512i wv) { madd_bf16_dp(a, xv, wv); });
}

}  // namespace

const LowpKernels& lowp_avx512bf16() {
  static const LowpKernels k{"avx512bf16", gemm_bf16_dp,         nullptr,           nullptr, nullptr,
                              lowp_round_bf16,    lowp_pack_x_bf16, lowp_gemm_bf16_packed};
  return k;
}

}  // namespace sonde::threaded
