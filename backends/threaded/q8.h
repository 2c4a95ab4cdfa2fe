#pragma once
// The q8 weight format (--weights q8): int8 values with one f32 scale per block of kQ8Block
// along K, quantised once at upload. Per block b of row n: scale = max|w| / 127 and
// q = round(w / scale), so |w - scale * q| <= scale / 2 = max|w_b| / 254.
#include "kernels.h"
#include "thread_pool.h"

#include <sonde/tensor.h>

#include <cstdint>
#include <vector>

namespace sonde::threaded {

struct Q8Weight {
  std::int64_t N = 0, K = 0, kp = 0;  // kp: K rounded up to a multiple of kQ8Block
  std::vector<std::int8_t> q;        // [N, kp]
  std::vector<float> scale;          // [N, kp / kQ8Block]
  std::vector<std::int32_t> wsum;    // [N, kp / kQ8Block]: sum of each block's q
  Q8Rows rows() const { return {q.data(), scale.data(), wsum.data(), kp}; }
  std::size_t bytes() const { return q.size() + scale.size() * 4 + wsum.size() * 4; }
};

// Quantises a 2-D float weight [N, K] (f32, f16 or bf16) row by row on the pool.
Q8Weight quantize_weight(const TensorView& w, const Kernels& k, ThreadPool& pool);

inline std::int64_t q8_padded(std::int64_t K) { return (K + kQ8Block - 1) / kQ8Block * kQ8Block; }

}  // namespace sonde::threaded
