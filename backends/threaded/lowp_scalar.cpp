// The bf16 and int8 modes' kernels in portable C++ (any host), lane by lane in the order lowp.h
// defines, so their outputs are bit-identical to the SIMD kernels'. Slow: the fallback of a host
// without AVX-512, and the oracle of the others' bits in the tests.
#include "kernels.h"
#include "lowp.h"

#include <cmath>
#include <cstring>
#include <initializer_list>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

// The 16 accumulator lanes summed in the tree order of lowp.h.
float reduce16_scalar(const float* a) {
  float t8[8], t4[4], t2[2];
  for (int i = 0; i < 8; ++i) t8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) t4[i] = t8[i] + t8[i + 4];
  for (int i = 0; i < 2; ++i) t2[i] = t4[i] + t4[i + 2];
  return t2[0] + t2[1];
}

float bf16_value(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void gemm_bf16_scalar(const std::uint16_t* x, i64 M, i64 ldx, const std::uint16_t* W, i64 K, i64 n0, i64 n1, float* y,
                      i64 ldy) {
  for (i64 m = 0; m < M; ++m)
    for (i64 n = n0; n < n1; ++n) {
      const std::uint16_t* xr = x + m * ldx;
      const std::uint16_t* wr = W + n * K;
      float acc[16] = {};
      for (i64 k = 0; k < K; k += 32)
        for (int l = 0; l < 16; ++l)
          for (const i64 e : {k + 2 * l + 1, k + 2 * l}) {
            if (e >= K) continue;  // zero times zero: the lane unchanged
            const float p = bf16_value(xr[e]) * bf16_value(wr[e]);  // exact
            acc[l] = acc[l] + p;
          }
      y[m * ldy + n] = reduce16_scalar(acc);
    }
}

void gemm_i8_scalar(const std::int8_t* xq, const float* xs, i64 M, i64 ldq, i64 lds, const unsigned char* W, i64 K,
                    i64 n0, i64 n1, float* y, i64 ldy) {
  const i64 blocks = (K + kQ8Block - 1) / kQ8Block, rb = q8_row_bytes(K);
  for (i64 m = 0; m < M; ++m)
    for (i64 n = n0; n < n1; ++n) {
      float acc[16] = {};
      for (i64 b = 0; b < blocks; ++b) {
        const unsigned char* blk = W + n * rb + b * kQ8BlockBytes;
        float sw;
        std::memcpy(&sw, blk, 4);
        const auto* qw = reinterpret_cast<const std::int8_t*>(blk + 4);
        const std::int8_t* qx = xq + m * ldq + b * kQ8Block;
        const float s = xs[m * lds + b] * sw;
        for (int j = 0; j < 8; ++j) {
          std::int32_t p = 0;
          for (int i = 0; i < 4; ++i) p += std::int32_t{qx[4 * j + i]} * qw[4 * j + i];
          float& a = acc[8 * (b % 2) + j];
          a = std::fma(static_cast<float>(p), s, a);
        }
      }
      y[m * ldy + n] = reduce16_scalar(acc);
    }
}

}  // namespace

const LowpKernels& lowp_scalar() {
  static const LowpKernels k{"scalar", gemm_bf16_scalar, gemm_i8_scalar, nullptr, nullptr};
  return k;
}

}  // namespace sonde::threaded
