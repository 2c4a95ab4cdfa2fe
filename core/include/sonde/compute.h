#pragma once
// Compute precision of a run's Linear ops (--compute, issue 28), defined once here so that every
// backend computes the same thing and the reference backend can emulate it.
//  - f32 (the default): x and W as given (bf16/f16 W widened exactly), products and sums in f32
//    (reference: double). The exact path.
//  - bf16: y[m,n] = b[n] + sum_k bf16(x[m,k]) * bf16(W[n,k]) where bf16() is round to nearest,
//    ties to even, an f32 subnormal becoming a zero of its sign first (as VCVTNE2PS2BF16, which
//    treats input subnormals as zero). A product of two bf16 values is exact in f32; the sum is in
//    f32 (the threaded kernels: lane-wise as VDPBF16PS, kernels_lowp.h) or double (reference).
//    bf16 W are used as stored; f32/f16 W are rounded to bf16 once.
//  - int8 (with --weights q8, W8A8): W in q8 blocks (32 int8 and one f32 scale along K,
//    quantise_block below) and x quantised per block of the same 32 elements with the same
//    formula; a block's dot product sum_i qx_i qw_i is an exact integer and is scaled by
//    sx * sw (an f32 product); the blocks' terms are summed in f32 (threaded) or double
//    (reference).
// Either mode's result depends on the mode, not on the instruction set: the threaded backend's
// kernels of one mode are bit-identical to each other on any host that can run them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace sonde {

enum class Compute { f32, bf16, int8 };

inline std::string_view compute_name(Compute c) {
  return c == Compute::bf16 ? "bf16" : c == Compute::int8 ? "int8" : "f32";
}

inline std::optional<Compute> parse_compute(std::string_view s) {
  if (s == "f32") return Compute::f32;
  if (s == "bf16") return Compute::bf16;
  if (s == "int8") return Compute::int8;
  return std::nullopt;
}

// Elements per int8 block along K (the q8 weight blocks' and the activations').
constexpr std::int64_t kComputeBlock = 32;

// bf16(x) of the bf16 mode as the top 16 bits of an f32.
inline std::uint16_t compute_bf16_bits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;  // subnormal (or zero): a zero of its sign
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float compute_bf16(float f) {
  const std::uint32_t bits = static_cast<std::uint32_t>(compute_bf16_bits(f)) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Round to nearest, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 leaves no fraction bits
// (IEEE arithmetic: no -ffast-math). Include this header only in TUs built without -mfma: with
// FMA, -ffp-contract=fast may fuse v * inv into the add below and round differently.
inline float compute_round_even(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// One block of n <= kComputeBlock values (zero past n) as q8: s = max|v| / 127 and
// q = round_even(v * (127 / max|v|)), so v ~ float(q) * s; all zeros give s = 0, q = 0.
inline float quantise_block(const float* v, std::int64_t n, std::int8_t* q) {
  float amax = 0;
  for (std::int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  const float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
  for (std::int64_t i = 0; i < kComputeBlock; ++i)
    q[i] = i < n ? static_cast<std::int8_t>(static_cast<int>(compute_round_even(v[i] * inv))) : std::int8_t{0};
  return s;
}

}  // namespace sonde
