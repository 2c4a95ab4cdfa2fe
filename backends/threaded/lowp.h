#pragma once
// The threaded backend's kernels of the --compute bf16 and int8 modes (<sonde/compute.h>), one
// table per instruction set, each in its own TU with its own flags (lowp_*.cpp), chosen at run
// time (lowp_select.cpp). As kernels.h, no sonde header here: plain C types and intrinsics only.
//
// Every kernel of a mode computes bit-identical outputs: the order of the f32 sums is part of
// the mode's definition here, the one VDPBF16PS and VPDPBUSD impose, and the emulations follow it.
// An output's accumulator is 16 f32 lanes, zero at the start:
//  - bf16: per step of 32 elements of K (x and W as bf16; past K zero), lane l adds the product
//    of elements 2l + 1, then (a second rounding) that of element 2l (VDPBF16PS's order; each
//    product is exact in f32).
//  - int8: per pair of blocks (b even, b + 1; a missing b + 1 counts as zero), lane l = 8h + j
//    takes block b + h: p = sum_{i<4} qx[4j + i] qw[4j + i] over that block (an exact integer),
//    then acc = fma(float(p), sx_b * sw_b, acc) (the scales' product rounded to f32 first).
// Then y = ((a_i + a_{i+8}) for i < 8, pairs (i, i+4), pairs (i, i+2), the last two) added as a
// tree in that order; the bias is added afterwards by the caller. So an output depends on K
// alone, never on M, on the W rows or on the split into tasks: each mode is batch-invariant.
// The exception is AMX (lowp_amx.cpp): TDPBF16PS sums each output in one chain in its own order,
// so its bf16 outputs equal the others' to f32 rounding, not bit for bit; it is still
// batch-invariant (every row goes through the same tile operations whatever M is).
#include <cstdint>

namespace sonde::threaded {

struct LowpKernels {
  const char* name;
  // bf16: y[m*ldy + n] for m < M, n0 <= n < n1, from x rows of bf16 bits (ldx elements apart,
  // zero from K up to a multiple of 32) and bf16 W rows of K elements (row n at W + n * K).
  void (*gemm_bf16)(const std::uint16_t* x, std::int64_t M, std::int64_t ldx, const std::uint16_t* W, std::int64_t K,
                    std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);
  // int8: x rows as int8 blocks of 32 (ldq bytes apart, zero past K up to an even number of
  // blocks) with their scales (lds floats apart, zero past the last block), W in the q8 layout
  // of kernels.h (row n at W + n * q8_row_bytes(K)).
  void (*gemm_i8)(const std::int8_t* xq, const float* xs, std::int64_t M, std::int64_t ldq, std::int64_t lds,
                  const unsigned char* W, std::int64_t K, std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);
  // Non-null (AMX): gemm_bf16 reads W in this table's packed layout, made once per weight by
  // pack_bf16 into bf16_packed_elems(N, K) elements; x rows are zero-padded to a multiple of 16
  // rows too, and n0 is a multiple of 32.
  std::int64_t (*bf16_packed_elems)(std::int64_t N, std::int64_t K) = nullptr;
  void (*pack_bf16)(const std::uint16_t* W, std::int64_t N, std::int64_t K, std::uint16_t* out) = nullptr;
  // Non-null: out[i] = compute_bf16_bits(x[i]) for i < n (<sonde/compute.h>'s rounding, bit for
  // bit), the x rows' rounding of every bf16 call; null: ops_lowp.cpp's scalar loop.
  void (*round_bf16)(const float* x, std::int64_t n, std::uint16_t* out) = nullptr;
  // Non-null: the bf16 GEMM for many x rows on packed operands (lowp_gemm_bf16.cpp), the same
  // bits as gemm_bf16. pack_x_bf16 packs x rows (as gemm_bf16 takes them) once per call into
  // lowp_gemm_x_elems(M, K) dwords; gemm_bf16_packed takes that pack and plain bf16 W rows
  // (it packs W rows itself, per task).
  void (*pack_x_bf16)(const std::uint16_t* x, std::int64_t M, std::int64_t ldx, std::int64_t K, std::uint32_t* xp) = nullptr;
  void (*gemm_bf16_packed)(const std::uint32_t* xp, std::int64_t M, const std::uint16_t* W, std::int64_t K,
                           std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy) = nullptr;
};

// The packed bf16 GEMM's register tile: x rows (broadcast) by W rows (3 vectors of 16 outputs).
constexpr std::int64_t kLowpGemmXRows = 8, kLowpGemmWRows = 48;
// Dwords of the x pack of M rows over K: whole blocks of kLowpGemmXRows rows, K up to a multiple of 32.
constexpr std::int64_t lowp_gemm_x_elems(std::int64_t M, std::int64_t K) {
  return (M + kLowpGemmXRows - 1) / kLowpGemmXRows * kLowpGemmXRows * ((K + 31) / 32) * 16;
}
// lowp_gemm_bf16.cpp (AVX512_BF16): the entries above of lowp_avx512bf16().
void lowp_pack_x_bf16(const std::uint16_t* x, std::int64_t M, std::int64_t ldx, std::int64_t K, std::uint32_t* xp);
void lowp_gemm_bf16_packed(const std::uint32_t* xp, std::int64_t M, const std::uint16_t* W, std::int64_t K,
                           std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);

// The tables (null entries: a mode that ISA does not speed up).
const LowpKernels& lowp_scalar();     // portable C++, both modes
const LowpKernels& lowp_avx512();     // AVX-512 F/BW/VL/DQ + FMA: both modes emulated lane by lane
const LowpKernels& lowp_avx512bf16(); // + AVX512_BF16: bf16 with VDPBF16PS
const LowpKernels& lowp_vnni();       // + AVX512_VNNI: int8 with VPDPBUSD
const LowpKernels& lowp_amx();        // AMX-BF16 tiles: bf16 with TDPBF16PS (its own order, below)

}  // namespace sonde::threaded
