// The bf16 and int8 modes on AVX-512 F/BW/VL/DQ without their dot-product instructions: each
// emulated lane by lane in lowp.h's order, so the outputs are bit-identical to VDPBF16PS's and
// VPDPBUSD's kernels (lowp_avx512bf16.cpp, lowp_vnni.cpp) and to the scalar ones.
//  - bf16: a lane's pair (2l, 2l + 1) of a step as two f32 vectors (the odd element: the dword's
//    top half; the even one: shifted up), then fma(odd) and fma(even): each product is exact, so
//    each fma rounds exactly as VDPBF16PS's two additions do.
//  - int8: int8 widened to int16, pairs by VPMADDWD, adjacent pairs joined into the lanes' sums
//    of four (exact integers: the order does not matter).
#include "lowp.h"
#include "lowp_tiles.h"

namespace sonde::threaded {
namespace {

inline void madd_bf16_emulated(__m512& acc, __m512i x, __m512i w) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(x, hi)), _mm512_castsi512_ps(_mm512_and_si512(w, hi)), acc);
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), acc);
}

void gemm_bf16_avx512(const std::uint16_t* x, i64 M, i64 ldx, const std::uint16_t* W, i64 K, i64 n0, i64 n1, float* y,
                      i64 ldy) {
  lowp_bf16<4, 4, 4, 4>(x, M, ldx, W, K, n0, n1, y, ldy, [](__m512& a, __m512i xv, __m512i wv) { madd_bf16_emulated(a, xv, wv); });
}

struct Wide16 {
  __m512i a, b;  // blocks b and b + 1 as int16
};

inline __m512i dot_i8_emulated(__m512i x, __m512i, const Wide16& w) {
  const __m512i xa = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(x));
  const __m512i xb = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(x, 1));
  const __m512i pa = _mm512_madd_epi16(xa, w.a), pb = _mm512_madd_epi16(xb, w.b);  // 16 pair sums per block
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(pa, even, pb), _mm512_permutex2var_epi32(pa, odd, pb));
}

void gemm_i8_avx512(const std::int8_t* xq, const float* xs, i64 M, i64 ldq, i64 lds, const unsigned char* W, i64 K,
                    i64 n0, i64 n1, float* y, i64 ldy) {
  const auto prep = [](__m512i w) {
    return Wide16{_mm512_cvtepi8_epi16(_mm512_castsi512_si256(w)), _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(w, 1))};
  };
  lowp_i8<3, 4, 3, 4>(xq, xs, M, ldq, lds, W, K, n0, n1, y, ldy, prep,
                [](__m512i xv, __m512i wv, const Wide16& w16) { return dot_i8_emulated(xv, wv, w16); });
}

}  // namespace

const LowpKernels& lowp_avx512() {
  static const LowpKernels k{"avx512", gemm_bf16_avx512, gemm_i8_avx512, nullptr, nullptr, lowp_round_bf16};
  return k;
}

}  // namespace sonde::threaded
