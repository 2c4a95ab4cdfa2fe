#pragma once
// The SAE ops (graph.h SaeActivation / NormRescale / Sub) on f32 inputs, for the fast CPU backends
// (header-only, like edit_f32.h). The encoder and decoder are Linear nodes; these ops touch each
// [rows, N] tensor once, so plain loops are enough. Norms are accumulated in double, as the
// reference does.
#include <sonde/op_checks.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <cmath>
#include <numeric>
#include <vector>

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace sonde::ops {

// A float's bits as an int32 in the float's order (negatives' magnitude bits flipped): one
// integer compare instead of a float compare, and a total order (NaNs at the ends, -0 < +0;
// neither is visible in an output, which relu turns to 0).
inline std::int32_t float_order(float f) {
  const auto s = std::bit_cast<std::int32_t>(f);
  return s ^ ((s >> 31) & 0x7FFFFFFF);
}

// The lanes of p[0..16) not below `bar` (NaNs included), as the bits of a mask: four 4-lane
// compares. A prefilter of top_k_indices's exact test: a value whose float_order beats the bar's
// is never below the bar as a float (float_order is monotone in float order; NaNs, and -0 against
// +0, pass here and are settled by the exact test).
inline unsigned lanes_not_below(const float* p, float bar) {
  unsigned mask = 0;
#if defined(__SSE__)
  const __m128 b = _mm_set1_ps(bar);
  for (int q = 0; q < 4; ++q)
    mask |= static_cast<unsigned>(_mm_movemask_ps(_mm_cmpnlt_ps(_mm_loadu_ps(p + 4 * q), b))) << (4 * q);
#else
  for (int t = 0; t < 16; ++t) mask |= static_cast<unsigned>(!(p[t] < bar)) << t;
#endif
  return mask;
}

// A bar below which no value of the row's k largest lies, from the maxima of G groups (group g:
// the values at j = g mod G), and the row's output `zero` (when given) zeroed on the way:
// k of the groups have a maximum at or above the k-th largest maximum, so k values (distinct
// ones) are at or above it. With G = 256 >= 4k on 16,384 Gaussian values about 73 values
// pass it (a scan that raises its bar as it goes let ~750 in, with ~4.4 nth_element
// compactions a row: most of the TopK's time). False (nothing done) for rows too short or k
// too large for G groups to pay: the caller starts from no bar.
inline bool seed_top_k_bar(const float* row, std::int64_t N, std::int64_t k, float* zero, std::int32_t& bar) {
  constexpr std::int64_t G = 256;
  if (4 * k > G || N < 4 * G) return false;
  alignas(16) std::int32_t m[G];
  std::fill(m, m + G, std::numeric_limits<std::int32_t>::min());
  std::int64_t j0 = 0;
  for (; j0 + G <= N; j0 += G) {
#if defined(__SSE2__)
    // float_order on 4 lanes, and a signed max by compare and select (SSE2 has no pmaxsd).
    for (std::int64_t g = 0; g < G; g += 4) {
      const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j0 + g));
      const __m128i o = _mm_xor_si128(s, _mm_and_si128(_mm_srai_epi32(s, 31), _mm_set1_epi32(0x7FFFFFFF)));
      const __m128i cur = _mm_load_si128(reinterpret_cast<const __m128i*>(m + g));
      const __m128i gt = _mm_cmpgt_epi32(o, cur);
      _mm_store_si128(reinterpret_cast<__m128i*>(m + g), _mm_or_si128(_mm_and_si128(gt, o), _mm_andnot_si128(gt, cur)));
    }
#else
    for (std::int64_t g = 0; g < G; ++g) m[g] = std::max(m[g], float_order(row[j0 + g]));
#endif
    if (zero) std::memset(zero + j0, 0, G * sizeof(float));
  }
  for (std::int64_t j = j0; j < N; ++j) {
    m[j - j0] = std::max(m[j - j0], float_order(row[j]));
    if (zero) zero[j] = 0.0f;
  }
  std::nth_element(m, m + (k - 1), m + G, std::greater<>());
  bar = m[k - 1];
  return true;
}

// The k largest of row[0..N) (ties: the lower index), as indices in `idx` [0..k), in no order.
// One pass keeping candidates: a value enters if its order beats the bar (the k-th best known
// at the last compaction; a later index loses a tie), and when 4k have gathered, nth_element
// keeps the k best of them and raises the bar. The bar starts at seed_top_k_bar's (values at
// it enter too) when the row is long enough, else at the first k values, so the scan is a float
// compare per value, 16 at a time, and only passing lanes are looked at. (nth_element over all
// 16,384 features of a row cost the qwen2.5-0.5b forward about one more encoder Linear a row at k = 64.)
// `zero`, when given, is the row's output [0..N): zeroed as the row is scanned, so the
// caller need not fill it in a pass of its own before writing the k kept values.
inline void top_k_indices(const float* row, std::int64_t N, std::int64_t k, std::vector<std::int64_t>& idx,
                          float* zero = nullptr) {
  const auto key = [row](std::int64_t j) {  // value order, then the lower index: larger is better
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(static_cast<std::int64_t>(float_order(row[j]))) << 32 |
                                     (0xFFFFFFFFu - static_cast<std::uint32_t>(j)));
  };
  std::vector<std::int64_t>& keys = idx;
  keys.clear();
  const auto cap = static_cast<std::size_t>(4 * k);
  keys.reserve(cap);
  std::int32_t bar = std::numeric_limits<std::int32_t>::min();  // only the lowest NaN is at or below it
  float bar_value = -std::numeric_limits<float>::infinity();   // the prefilter's: nothing is below it
  std::int64_t j = 0;
  std::int32_t seed = 0;
  if (seed_top_k_bar(row, N, k, zero, seed) && seed > std::numeric_limits<std::int32_t>::min()) {
    bar = seed - 1;  // values at the seed enter: the k-th largest may be one of them
    bar_value = std::bit_cast<float>(float_order(std::bit_cast<float>(seed)));  // float_order is its own inverse
    zero = nullptr;  // zeroed already
  } else {
    for (; j < k; ++j) keys.push_back(key(j));
    if (zero) std::fill(zero, zero + std::min(k, N), 0.0f);
  }
  const auto compact = [&] {
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
    keys.resize(static_cast<std::size_t>(k));
    bar = static_cast<std::int32_t>(keys.back() >> 32);
    bar_value = row[0xFFFFFFFFu - static_cast<std::uint32_t>(keys.back() & 0xFFFFFFFF)];
  };
  const auto offer = [&](std::int64_t j) {
    if (float_order(row[j]) <= bar) return;
    keys.push_back(key(j));
    if (keys.size() == cap) compact();
  };
  constexpr std::int64_t kBlock = 16;
  for (; j + kBlock <= N; j += kBlock) {
    if (zero) std::memset(zero + j, 0, kBlock * sizeof(float));
    // Only the lanes that pass are offered (a scalar pass over a block with one candidate cost
    // more than the vector test: about a block in five has one while the bar is still low).
    for (unsigned m = lanes_not_below(row + j, bar_value); m != 0; m &= m - 1) offer(j + std::countr_zero(m));
  }
  for (; j < N; ++j) {
    if (zero) zero[j] = 0.0f;
    offer(j);
  }
  if (keys.size() > static_cast<std::size_t>(k)) compact();
  for (auto& h : keys) h = 0xFFFFFFFFu - static_cast<std::uint32_t>(h & 0xFFFFFFFF);
}

// Rows [r0, r1) of a SaeActivation (the backends split rows over their threads).
inline void sae_activation_rows_f32(const Node& n, Inputs in, const TensorView& out, std::int64_t r0, std::int64_t r1) {
  const auto d = check_sae_activation(n, in, out);
  const float* p = in[0].as<const float>();
  const float* t = in.size() > 1 ? in[1].as<const float>() : nullptr;
  float* y = out.as<float>();
  std::vector<std::int64_t> idx;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* pr = p + r * d.N;
    float* yr = y + r * d.N;
    switch (n.params.sae_act) {
      case SaeAct::Relu:
        for (std::int64_t j = 0; j < d.N; ++j) yr[j] = pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
      case SaeAct::JumpRelu:
        for (std::int64_t j = 0; j < d.N; ++j) yr[j] = pr[j] > t[j] && pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
      case SaeAct::Gated:
        for (std::int64_t j = 0; j < d.N; ++j) yr[j] = t[r * d.N + j] > 0.0f && pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
      case SaeAct::TopK:
        top_k_indices(pr, d.N, d.k, idx, yr);  // zero-fills yr as it scans
        for (const auto j : idx) yr[j] = pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
    }
  }
}

inline void run_sae_activation_f32(const Node& n, Inputs in, const TensorView& out) {
  sae_activation_rows_f32(n, in, out, 0, check_sae_activation(n, in, out).rows);
}

inline void run_norm_rescale_f32(const Node& n, Inputs in, const TensorView& out) {
  const auto d = check_norm_rescale(n, in, out);
  const float* x = in[0].as<const float>();
  const float* ref = in[1].as<const float>();
  float* y = out.as<float>();
  for (std::int64_t r = 0; r < d.rows; ++r) {
    double ss = 0;
    for (std::int64_t j = 0; j < d.F; ++j) ss += static_cast<double>(ref[r * d.F + j]) * ref[r * d.F + j];
    const double c = std::sqrt(ss) / std::sqrt(static_cast<double>(d.F));
    const double m = n.params.norm_power > 0 ? c : 1.0 / c;
    for (std::int64_t j = 0; j < d.E; ++j) y[r * d.E + j] = static_cast<float>(x[r * d.E + j] * m);
  }
}

inline void run_sub_f32(const Node& n, Inputs in, const TensorView& out) {
  const auto count = check_binary(n, in, out);
  const float* a = in[0].as<const float>();
  const float* b = in[1].as<const float>();
  float* y = out.as<float>();
  for (std::int64_t i = 0; i < count; ++i) y[i] = a[i] - b[i];
}

}  // namespace sonde::ops
