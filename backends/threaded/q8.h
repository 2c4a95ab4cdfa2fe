#pragma once
// The q8 weight format (--weights q8, layout in kernels.h: WType::q8): int8 values with one f32
// scale per block of kQ8Block along K, quantised once at upload. Per block b of row n:
// s = max|w| / 127 and q = round(w * (127 / max|w|)), so |w - float(q) * s| <= s / 2 (plus the
// f32 rounding of the product). x stays f32: a q8 Linear is x . dequant(W), through the same
// GEMV and GEMM kernels as bf16 weights (W8A16), at 1.125 bytes per weight.
#include "kernels.h"
#include "thread_pool.h"

#include <sonde/tensor.h>

#include <cstdint>
#include <vector>

namespace sonde::threaded {

constexpr double kQ8BytesPerWeight = static_cast<double>(kQ8BlockBytes) / kQ8Block;

struct Q8Weight {
  std::int64_t N = 0, K = 0;
  std::vector<unsigned char> data;  // N rows of q8_row_bytes(K)
  std::size_t bytes() const { return data.size(); }
};

// Quantises a 2-D float weight [N, K] (f32, f16 or bf16) row by row on the pool.
Q8Weight quantize_weight(const TensorView& w, ThreadPool& pool);

}  // namespace sonde::threaded
