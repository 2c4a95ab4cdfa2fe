#include "q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sonde::threaded {

namespace {
// Row n of a [N, K] float weight as f32 (element reads through memcpy: the data may be unaligned).
void widen_row(const TensorView& w, std::int64_t n, float* row) {
  const std::int64_t K = w.shape[1];
  const auto* p = static_cast<const unsigned char*>(w.data);
  if (w.dtype == DType::f32) {
    std::memcpy(row, p + n * K * 4, static_cast<std::size_t>(K) * 4);
    return;
  }
  const bool bf16 = w.dtype == DType::bf16;
  for (std::int64_t i = 0; i < K; ++i) {
    std::uint16_t h;
    std::memcpy(&h, p + (n * K + i) * 2, 2);
    row[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

// Round to nearest, ties to even, for |v| <= 2^22 (here <= 127 and a rounding): adding 1.5 * 2^23
// leaves no fraction bits, so the f32 add rounds v in the current (default: nearest-even) mode.
// As std::nearbyint, without a libm call per weight (IEEE arithmetic: no -ffast-math here, so the
// compiler may not fold the two operations away).
float round_even(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// One row of K floats as blocks (scale, then 32 int8; zero past K). Plain loops over a block that
// the compiler vectorises (the max as a compare-select, the rounding as adds, the cast truncating
// an integral value), unlike std::fmax and std::nearbyint (a libm call per weight).
void quantize_row(const float* x, std::int64_t K, unsigned char* out) {
  for (std::int64_t lo = 0; lo < K; lo += kQ8Block, out += kQ8BlockBytes) {
    float v[kQ8Block] = {};
    std::memcpy(v, x + lo, static_cast<std::size_t>(std::min(kQ8Block, K - lo)) * sizeof(float));
    float amax = 0;
    for (float f : v) amax = std::max(amax, std::fabs(f));
    const float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    std::memcpy(out, &s, 4);
    std::int8_t q[kQ8Block];
    for (std::int64_t i = 0; i < kQ8Block; ++i) q[i] = static_cast<std::int8_t>(static_cast<int>(round_even(v[i] * inv)));
    std::memcpy(out + 4, q, kQ8Block);
  }
}
}  // namespace

Q8Weight quantize_weight(const TensorView& w, ThreadPool& pool) {
  Q8Weight out;
  out.N = w.shape[0];
  out.K = w.shape[1];
  const std::int64_t rb = q8_row_bytes(out.K);
  out.data.resize(static_cast<std::size_t>(out.N * rb));
  constexpr std::int64_t kRows = 64;
  pool.run((out.N + kRows - 1) / kRows, [&](std::int64_t t, int) {
    std::vector<float> row(static_cast<std::size_t>(out.K));
    for (std::int64_t n = t * kRows; n < std::min(out.N, (t + 1) * kRows); ++n) {
      widen_row(w, n, row.data());
      quantize_row(row.data(), out.K, out.data.data() + n * rb);
    }
  });
  return out;
}

}  // namespace sonde::threaded
