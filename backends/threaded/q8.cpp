#include "q8.h"

#include <algorithm>
#include <cstring>

namespace sonde::threaded {

namespace {
// Row n of a [N, K] float weight as f32 (element reads through memcpy: the data may be unaligned).
void widen_row(const TensorView& w, std::int64_t n, float* row) {
  const std::int64_t K = w.shape[1];
  const auto* p = static_cast<const unsigned char*>(w.data);
  for (std::int64_t i = 0; i < K; ++i) {
    if (w.dtype == DType::f32) {
      std::memcpy(row + i, p + (n * K + i) * 4, 4);
      continue;
    }
    std::uint16_t h;
    std::memcpy(&h, p + (n * K + i) * 2, 2);
    row[i] = w.dtype == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}
}  // namespace

Q8Weight quantize_weight(const TensorView& w, const Kernels& k, ThreadPool& pool) {
  Q8Weight out;
  out.N = w.shape[0];
  out.K = w.shape[1];
  out.kp = q8_padded(out.K);
  const std::int64_t nb = out.kp / kQ8Block;
  out.q.resize(static_cast<std::size_t>(out.N * out.kp));
  out.scale.resize(static_cast<std::size_t>(out.N * nb));
  out.wsum.resize(static_cast<std::size_t>(out.N * nb));
  constexpr std::int64_t kRows = 64;
  pool.run((out.N + kRows - 1) / kRows, [&](std::int64_t t, int) {
    std::vector<float> row(static_cast<std::size_t>(out.K));
    for (std::int64_t n = t * kRows; n < std::min(out.N, (t + 1) * kRows); ++n) {
      widen_row(w, n, row.data());
      std::int8_t* q = out.q.data() + n * out.kp;
      k.q8_quantize(row.data(), out.K, out.kp, q, out.scale.data() + n * nb);
      for (std::int64_t b = 0; b < nb; ++b) {
        std::int32_t s = 0;
        for (std::int64_t i = 0; i < kQ8Block; ++i) s += q[b * kQ8Block + i];
        out.wsum[static_cast<std::size_t>(n * nb + b)] = s;
      }
    }
  });
  return out;
}

}  // namespace sonde::threaded
