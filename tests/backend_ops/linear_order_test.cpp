// The exact f32 Linear's summation order, pinned against a scalar emulation written from the
// header comment of backends/threaded/gemv_avx512.cpp (not from its code): for output (m, n),
// two sets of 16 lanes, a[j] over the elements 32 s + j and b[j] over 32 s + 16 + j, each a chain
// of fused multiply-adds over the steps s in ascending order from zero (elements past K count as
// 0 * 0), then c = a + b lane-wise and the 16 lanes reduced as a tree: c[j] + c[j + 8], then
// j + 4, j + 2, j + 1 (the order of _mm512_reduce_add_ps). The batch-invariance sweeps compare
// the paths with each other; this test compares them with the order itself, so a kernel that
// changed every path's order alike (issue 28's faster reductions) would fail here.
#include "linear_order_ref.h"
#include "op_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace sonde::test {
namespace {

// bf16 and f32 weights, forced GEMV and GEMM, 1 and 2 threads; K with and without a tail step,
// N not a multiple of the tiles' 4 or 6 rows, M below, at and above the tiles' row counts.
TEST(LinearOrder, Avx512OutputsAreTheDocumentedSumBitForBit) {
  LinearEnvScope isa("SONDE_THREADED_ISA", "avx512");
  std::size_t checked = 0;
  for (const DType wt : {DType::bf16, DType::f32})
    for (const std::string mode : {"gemv", "gemm"})
      for (const int threads : {1, 2}) {
        LinearEnvScope linear("SONDE_THREADED_LINEAR", mode);
        std::string why;
        auto b = try_make_backend("threaded", threads, "native", "f32", why);
        if (!b) GTEST_SKIP() << "AVX-512 not available on this CPU: " << why;
        for (const auto [M, K, N] : {std::array<std::int64_t, 3>{1, 67, 37}, {5, 896, 37}, {13, 1100, 23}, {53, 96, 41}}) {
          const std::vector<Arg> args{{random_tensor(DType::f32, Shape{M, K}, 7)}, {random_tensor(wt, Shape{N, K}, 8), true}};
          const auto x = values(args[0].t), w = values(args[1].t);
          const auto got = values(run_on(*b, make_node(OpKind::Linear, Shape{M, N}), args));
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n, ++checked) {
              const float want = linear_documented_dot(x.data() + m * K, w.data() + n * K, K);
              const float g = got[std::size_t(m * N + n)];
              ASSERT_EQ(std::memcmp(&g, &want, 4), 0) << dtype_name(wt) << " " << mode << " " << threads << " threads, "
                                                      << M << "x" << K << "x" << N << " at (" << m << ", " << n << "): "
                                                      << std::hexfloat << g << " vs " << want;
            }
        }
      }
  EXPECT_EQ(checked, 2u * 2 * 2 * (37 + 5 * 37 + 13 * 23 + 53 * 41));
}

}  // namespace
}  // namespace sonde::test
