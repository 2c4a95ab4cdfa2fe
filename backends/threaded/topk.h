#pragma once
// The TopK SaeActivation's two streaming passes on AVX-512 (topk_avx512.cpp; the selection and the
// other ISAs are in ops_topk.cpp). Plain functions on raw pointers: this header includes no
// sonde or standard-library inline code, for the reason kernels.h gives.
#include <cstdint>

namespace sonde::threaded {

constexpr std::int64_t kTopKGroups = 256;  // group g: the values at j = g mod 256 (16 vectors of 16)

// Pass 1: a bar no value of row[0..N)'s k largest is below (1 <= k <= 256, N >= 256), as a
// float_order (sae_f32.h): from the maxima of the 256 groups, a t with at least k of them >= t
// (so k values are >= t), found by `steps` halvings of [lowest maximum, highest maximum]: 32 reach
// the k-th largest maximum exactly; fewer leave t lower, which only lets more candidates through.
std::int32_t topk_bar_avx512(const float* row, std::int64_t N, std::int64_t k, int steps);
// Pass 2: out[j] = 0 for every j < N, except out[j] = max(row[j], 0) where float_order(row[j])
// >= bar, whose indices j (ascending) are written to cand (room for N + 16): returns how many.
std::int64_t topk_candidates_avx512(const float* row, std::int64_t N, std::int32_t bar, float* out, std::int32_t* cand);

}  // namespace sonde::threaded
