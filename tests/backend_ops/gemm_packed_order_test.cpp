// The packed outer-product GEMM (backends/threaded/gemm_avx512.cpp, issue 28) against the
// documented f32 summation order, bit for bit, at the shapes its blocking has edges on: x rows
// in blocks of 8 and chunks of 64 (the partial sums of a chunk), W rows in blocks of 48 with 16-
// and 32-row edges, K tails, a bias (its own f32 add after the sum), and tasks split over x rows.
// The order is written out here from the header of gemv_avx512.cpp, not taken from either kernel:
// 32 lane chains of fused multiply-adds from +0 over k = 32 s + j (s ascending, 0 * 0 past K),
// the halves added (j, j + 16), then (j, j + 8), (j, j + 4), (j, j + 2), (j, j + 1).
#include "linear_order_ref.h"
#include "op_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace sonde::test {
namespace {

std::shared_ptr<Backend> packed_gemm_backend(int threads) { return make_backend("threaded", threads, "native", "f32"); }

void expect_documented(const std::vector<float>& got, const std::vector<float>& x, const std::vector<float>& w,
                       const std::vector<float>* bias, std::int64_t M, std::int64_t K, std::int64_t N,
                       const std::string& what) {
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      float want = linear_documented_dot(x.data() + m * K, w.data() + n * K, K);
      if (bias) want = want + (*bias)[std::size_t(n)];
      const float g = got[std::size_t(m * N + n)];
      ASSERT_EQ(std::memcmp(&g, &want, 4), 0) << what << " " << M << "x" << K << "x" << N << " at (" << m << ", " << n
                                              << "): " << std::hexfloat << g << " vs " << want;
    }
}

// Forced GEMM, 1 and 2 threads, with and without a bias, over the blocking's edges.
TEST(LinearPackedGemm, OutputsAreTheDocumentedSumAtEveryEdge) {
  LinearEnvScope isa("SONDE_THREADED_ISA", "avx512");
  LinearEnvScope linear("SONDE_THREADED_LINEAR", "gemm");
  for (const int threads : {1, 2}) {
    std::shared_ptr<Backend> b;
    try {
      b = packed_gemm_backend(threads);
    } catch (const Error& e) {
      GTEST_SKIP() << "AVX-512 not available on this CPU: " << e.what();
    }
    // M: one row, a whole block, a block and one, over one chunk of 8 blocks; N: 16- and 32-row
    // edges of a 48-row block, several blocks; K: one step, a tail of 1, a tail of 31, 32 steps,
    // and long chains of 129 and 282 steps (a 7B's K is 3584 and 18,944: 112 and 592 steps).
    for (const auto [M, K, N] : {std::array<std::int64_t, 3>{1, 32, 16}, {8, 33, 49}, {9, 95, 100}, {71, 1024, 34},
                                 {130, 63, 130}, {64, 1, 17}, {17, 4100, 50}, {9, 9000, 20}})
      for (const bool with_bias : {false, true}) {
        std::vector<Arg> args{{random_tensor(DType::f32, Shape{M, K}, 11)}, {random_tensor(DType::bf16, Shape{N, K}, 12), true}};
        if (with_bias) args.push_back({random_tensor(DType::f32, Shape{N}, 13), true});
        const auto x = values(args[0].t), w = values(args[1].t);
        const std::vector<float> bias = with_bias ? values(args[2].t) : std::vector<float>{};
        const auto got = values(run_on(*b, make_node(OpKind::Linear, Shape{M, N}), args));
        expect_documented(got, x, w, with_bias ? &bias : nullptr, M, K, N,
                          std::to_string(threads) + " threads" + (with_bias ? ", bias," : ","));
      }
  }
}

// A chain that rounds to -0 before a padded step: the GEMV's masked step adds 0 * 0 and turns it
// into +0, and so must the packed kernel's zero padding (skipping the padded step would keep -0).
// Also infinities and NaN pass through the same chains.
TEST(LinearPackedGemm, SignedZeroAndNonFiniteFollowTheDocumentedSum) {
  LinearEnvScope isa("SONDE_THREADED_ISA", "avx512");
  LinearEnvScope linear("SONDE_THREADED_LINEAR", "gemm");
  std::shared_ptr<Backend> b;
  try {
    b = packed_gemm_backend(2);
  } catch (const Error& e) {
    GTEST_SKIP() << "AVX-512 not available on this CPU: " << e.what();
  }
  constexpr std::int64_t M = 10, K = 40, N = 20;
  Tensor xt = random_tensor(DType::f32, Shape{M, K}, 21), wt = random_tensor(DType::f32, Shape{N, K}, 22);
  auto* x = static_cast<float*>(xt.view().data);
  auto* w = static_cast<float*>(wt.view().data);
  // Row 0: every product a negative tiny that rounds to -0 (each lane chain ends at -0).
  for (std::int64_t k = 0; k < K; ++k) x[k] = -1e-30f;
  for (std::int64_t k = 0; k < K; ++k) w[k] = 1e-30f;
  x[1 * K + 3] = std::numeric_limits<float>::infinity();
  x[2 * K + 5] = std::numeric_limits<float>::quiet_NaN();
  w[3 * K + 7] = -std::numeric_limits<float>::infinity();
  const std::vector<Arg> args{{xt}, {wt, true}};
  const auto got = values(run_on(*b, make_node(OpKind::Linear, Shape{M, N}), args));
  const auto xs = values(args[0].t), ws = values(args[1].t);
  expect_documented(got, xs, ws, nullptr, M, K, N, "special values");
  EXPECT_FALSE(std::signbit(got[0])) << "row 0 sums to +0 after the padded steps";
}

}  // namespace
}  // namespace sonde::test
