#pragma once
// The ISA-specific kernel table of the threaded backend. One table per instruction set
// (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp), each TU compiled with its own
// flags; isa.cpp picks one at run time. This header includes no sonde header on purpose: an
// inline function instantiated in an AVX-512 TU could be merged by the linker and then run on a
// CPU without AVX-512, so the ISA TUs see only plain C types and intrinsics.
#include <cstdint>

namespace sonde::threaded {

// How a Linear weight's elements are stored (rows of K elements, row-major, any alignment).
// q8: each row is ceil(K / kQ8Block) blocks of kQ8BlockBytes, a block being its f32 scale s
// followed by kQ8Block int8 values q (zero past K); element k stands for w = float(q) * s, one f32
// multiply, computed the same way by every kernel and by the GEMM path's widening, so all of them
// feed the same f32 weights to the same sums. One stream per row: the scale is read with its
// block, and row n starts at n * ceil(K / kQ8Block) * kQ8BlockBytes.
enum class WType : int { f32, f16, bf16, q8 };

constexpr std::int64_t kQ8Block = 32;
constexpr std::int64_t kQ8BlockBytes = 4 + kQ8Block;
// Bytes of the q8 blocks that hold elements [0, k) of a row (k = K: the row's length).
constexpr std::int64_t q8_row_bytes(std::int64_t k) { return (k + kQ8Block - 1) / kQ8Block * kQ8BlockBytes; }

struct Kernels {
  const char* name;

  // y[m*ldy + n] = sum_k x[m*ldx + k] * W[n,k] for m < M, n0 <= n < n1 (f32 accumulation).
  void (*gemv)(const float* x, std::int64_t M, std::int64_t ldx, const void* W, WType wt, std::int64_t K,
               std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);
  // The exact f32 GEMM (gemm_avx512.cpp): y[m*ldy + n] = sum_k x[m*ldx + k] * W[n*K + k] (+ bias[n],
  // an f32 add after the sum, when bias is given), each sum exactly as gemv sums it (bit-identical
  // to gemv and then a bias pass), from operands packed by the two pack entries: x rows into
  // gemm_x_pack_floats(M, K) floats, f32 or bf16 W rows into gemm_w_pack_floats(N, K) floats (W[n*K]
  // is row n); scratch holds kGemmScratchFloats. Null: gemv on W rows widened to f32.
  void (*gemm_pack_x)(const float* x, std::int64_t M, std::int64_t ldx, std::int64_t K, float* xp);
  void (*gemm_pack_w)(const void* W, bool bf16, std::int64_t N, std::int64_t K, float* wp);
  void (*gemm_packed)(const float* xp, std::int64_t M, const float* wp, std::int64_t N, std::int64_t K,
                      const float* bias, float* y, std::int64_t ldy, float* scratch);
  float (*dot)(const float* a, const float* b, std::int64_t n);  // sum a[i] b[i]
  void (*axpy)(float a, const float* x, float* y, std::int64_t n);  // y += a x
  // Attention over a block of keys, one call instead of one per key (decode at long context is
  // mostly these): s[u] = q . k[u ks ..] for u < n (n >= 1), summed in an order fixed by u's place
  // in the block and d alone, returning max_u s[u]; and acc[j] += p[u] v[u vs + j] for
  // u = 0, 1, ... n-1 in turn, each term as axpy adds it.
  float (*dots)(const float* q, const float* k, std::int64_t ks, std::int64_t n, std::int64_t d, float* s);
  void (*axpys)(const float* p, const float* v, std::int64_t vs, std::int64_t n, std::int64_t d, float* acc);
  // Optional (null: dots only). keys_t lays keys [0, n) (n <= kKeysT) out transposed,
  // kt[e * kKeysT + u] = k[u ks + e] for e < d, zero for n <= u < kKeysT; dots_t then gives dots' s[u]
  // and maximum bit for bit from it, without dots' per-key folds of 16 lanes (the products of
  // one element e for 16 keys are one FMA). Worth it when many query rows visit the same keys
  // (prefill, a diffusion canvas): the transposition is paid once per block of keys.
  void (*keys_t)(const float* k, std::int64_t ks, std::int64_t n, std::int64_t d, float* kt);
  float (*dots_t)(const float* q, const float* kt, std::int64_t n, std::int64_t d, float* s);
  // Optional (null: four calls of dots_t / axpys). Four query rows at once, each with dots_t's and
  // axpys' bits: one load of a key's (value's) element vector serves the four rows' FMAs.
  void (*dots_t4)(const float* const* q, const float* kt, std::int64_t n, std::int64_t d, float* const* s, float* top);
  void (*axpys4)(const float* const* p, const float* v, std::int64_t vs, std::int64_t n, std::int64_t d,
                 float* const* acc);
  // s[u] = e^(s[u] - m), or 0 where s[u] = -inf (a forbidden key), for u < n; returns their sum
  // in index order. m is finite.
  float (*exp_block)(float* s, std::int64_t n, float m);
  void (*scale)(float a, float* y, std::int64_t n);                 // y *= a
  void (*silu_mul)(const float* g, const float* u, float* y, std::int64_t n);  // y = g / (1 + e^-g) * u
  void (*add)(const float* a, const float* b, float* y, std::int64_t n);
};

// The most keys keys_t lays out at once (one block of the attention's key loop).
constexpr std::int64_t kKeysT = 64;

// The packed GEMM's tile: x rows per block, W rows per block (3 vectors), and its scratch (the
// partial sums of 8 x blocks: 8 x 5 levels x 8 x 48 floats, 61 KB, in L2).
constexpr std::int64_t kGemmXRows = 8, kGemmWRows = 48;
constexpr std::int64_t kGemmScratchFloats = 8 * 5 * kGemmXRows * kGemmWRows;

// The GEMV entries of the SIMD tables (own TUs: gemv_avx512.cpp, gemv_avx2.cpp).
void gemv_avx512(const float* x, std::int64_t M, std::int64_t ldx, const void* W, WType wt, std::int64_t K,
                 std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);
void gemv_avx2(const float* x, std::int64_t M, std::int64_t ldx, const void* W, WType wt, std::int64_t K,
               std::int64_t n0, std::int64_t n1, float* y, std::int64_t ldy);

void gemm_pack_x_avx512(const float* x, std::int64_t M, std::int64_t ldx, std::int64_t K, float* xp);
void gemm_pack_w_avx512(const void* W, bool bf16, std::int64_t N, std::int64_t K, float* wp);
void gemm_packed_avx512(const float* xp, std::int64_t M, const float* wp, std::int64_t N, std::int64_t K,
                        const float* bias, float* y, std::int64_t ldy, float* scratch);


const Kernels& kernels_scalar();
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();

}  // namespace sonde::threaded
