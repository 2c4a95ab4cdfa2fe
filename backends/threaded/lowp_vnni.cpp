// The int8 mode with AVX512_VNNI: VPDPBUSD multiplies unsigned by signed bytes, so x goes in as
// qx + 128 (its sign bit flipped) and the extra 128 * sum(qw) of each lane of four is taken off
// by starting the sum from -128 * sum(qw), itself one VPDPBUSD of 0x80 bytes by W per W vector
// (shared by every x row of a tile). Integer sums mod 2^32, exact in the end: the lanes' values
// are those lowp.h defines. A batch's decode (lowp_drive) in tiles of 6 x rows by 3 W rows (swept
// against 4x3, 4x4, 8x2, 6x2 and 4x2 at 4-64 rows: best or within 2%); each output costs four
// instructions per 64 products here (VPDPBUSD, the conversion, the scales' product, the FMA).
#include "lowp.h"
#include "lowp_tiles.h"

namespace sonde::threaded {
namespace {

inline __m512i vnni_correction(__m512i w) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, w));
}

inline __m512i vnni_dot(__m512i x, __m512i w, __m512i correction) {
  const __m512i xu = _mm512_xor_si512(x, _mm512_set1_epi8(static_cast<char>(0x80)));
  return _mm512_dpbusd_epi32(correction, xu, w);
}

void gemm_i8_vnni(const std::int8_t* xq, const float* xs, i64 M, i64 ldq, i64 lds, const unsigned char* W, i64 K,
                  i64 n0, i64 n1, float* y, i64 ldy) {
  lowp_i8<4, 3, 6, 3>(xq, xs, M, ldq, lds, W, K, n0, n1, y, ldy, [](__m512i wv) { return vnni_correction(wv); },
                [](__m512i xv, __m512i wv, __m512i c) { return vnni_dot(xv, wv, c); });
}

}  // namespace

const LowpKernels& lowp_vnni() {
  static const LowpKernels k{"avx512vnni", nullptr, gemm_i8_vnni, nullptr, nullptr};
  return k;
}

}  // namespace sonde::threaded
