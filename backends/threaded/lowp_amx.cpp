// The bf16 mode with AMX-BF16: TDPBF16PS multiplies a 16 x 32 bf16 tile of x rows by a 32 x 16
// tile of W (in pairs: row kk of the B tile holds elements 2kk and 2kk + 1 of 16 W rows) into a
// 16 x 16 f32 tile, 16 x 16 x 32 multiply-adds per instruction. A step takes 32 x rows (two A
// tiles) by 32 W rows (two B tiles) into four accumulator tiles over all of K, then stores them.
// Each output is one accumulator element summed over K's steps in order, so it depends on K alone
// (batch-invariant), but in TDPBF16PS's order, not lowp.h's lanes: equal to the other kernels'
// outputs to f32 rounding, not bit for bit. W is packed once per weight (pack_bf16_amx): per block
// of 32 rows and step of 32 elements, the two B tiles, each a 16 x 16 transpose of W's pairs.
// The tile data needs the kernel's permission (arch_prctl, lowp_select.cpp) and a tile
// configuration per thread, loaded at every call.
#include "lowp.h"

#include <immintrin.h>

#include <cstring>

namespace sonde::threaded {
namespace {

using i64 = std::int64_t;

struct alignas(64) AmxTileConfig {
  std::uint8_t palette_id = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

i64 amx_steps(i64 K) { return (K + 31) / 32; }

// Elements of a packed weight: per block of 32 rows, steps x 2 tiles x 16 x 32 bf16.
i64 packed_elems_amx(i64 N, i64 K) { return (N + 31) / 32 * amx_steps(K) * 1024; }

// Block b, step s, tile h (rows 32b + 16h ..): dword (kk, n) = W[row n][2kk, 2kk + 1] of the step,
// zero past N and K.
void pack_bf16_amx(const std::uint16_t* W, i64 N, i64 K, std::uint16_t* out) {
  const i64 steps = amx_steps(K);
  for (i64 b = 0; b < (N + 31) / 32; ++b)
    for (i64 s = 0; s < steps; ++s)
      for (int h = 0; h < 2; ++h) {
        std::uint16_t* tile = out + ((b * steps + s) * 2 + h) * 512;
        for (int n = 0; n < 16; ++n) {
          const i64 row = 32 * b + 16 * h + n;
          for (int kk = 0; kk < 16; ++kk)
            for (int e = 0; e < 2; ++e) {
              const i64 k = 32 * s + 2 * kk + e;
              tile[(kk * 16 + n) * 2 + e] = row < N && k < K ? W[row * K + k] : std::uint16_t{0};
            }
        }
      }
}

void gemm_bf16_amx(const std::uint16_t* x, i64 M, i64 ldx, const std::uint16_t* Wp, i64 K, i64 n0, i64 n1, float* y,
                   i64 ldy) {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  const i64 steps = amx_steps(K);
  alignas(64) float c[4][256];
  for (i64 nb = n0; nb < n1; nb += 32) {
    const std::uint16_t* pk = Wp + nb / 32 * steps * 1024;
    for (i64 m = 0; m < M; m += 32) {
      const bool two = m + 16 < M;  // the second A tile (x rows m + 16 ..) has rows to compute
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (i64 s = 0; s < steps; ++s) {
        _tile_loadd(4, x + m * ldx + 32 * s, ldx * 2);
        _tile_loadd(6, pk + (s * 2 + 0) * 512, 64);
        _tile_loadd(7, pk + (s * 2 + 1) * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
          _tile_loadd(5, x + (m + 16) * ldx + 32 * s, ldx * 2);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      _tile_stored(2, c[2], 64);
      _tile_stored(3, c[3], 64);
      for (int t = 0; t < (two ? 4 : 2); ++t)
        for (int i = 0; i < 16; ++i) {
          const i64 row = m + 16 * (t / 2) + i;
          const i64 col = nb + 16 * (t % 2);
          if (row >= M) break;
          const i64 count = col + 16 <= n1 ? 16 : n1 - col;
          if (count > 0) std::memcpy(y + row * ldy + col, c[t] + i * 16, static_cast<std::size_t>(count) * sizeof(float));
        }
    }
  }
  _tile_release();
}

}  // namespace

const LowpKernels& lowp_amx() {
  static const LowpKernels k{"amx", gemm_bf16_amx, nullptr, packed_elems_amx, pack_bf16_amx};
  return k;
}

}  // namespace sonde::threaded
