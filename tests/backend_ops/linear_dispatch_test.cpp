// The threaded backend's Linear dispatch (backends/threaded/linear_dispatch.h) as a pure function
// of the shape and the host's rates. The expected choices are worked out by hand from the cost
// model's two formulas, not taken from the code.
#include "linear_dispatch.h"

#include <gtest/gtest.h>

namespace sonde::threaded {
namespace {

// A host reading 60 GB/s with a 260 GFLOP/s GEMM (the 2-thread figures in bench/README.md).
constexpr HostRates kHost{60e9, 260e9};

TEST(LinearDispatch, PredictedSecondsFollowTheModel) {
  // bf16 896 x 896: W is 1.6 MB. gemv: ceil(7 / 3) = 3 reads; gemm: one read + 2 * 7 * K * N flops.
  const double w = 896.0 * 896.0 * 2;
  EXPECT_DOUBLE_EQ(gemv_seconds(7, 896, 896, 2, kHost), 3 * w / 60e9);
  EXPECT_DOUBLE_EQ(gemm_seconds(7, 896, 896, 2, kHost), w / 60e9 + 2.0 * 7 * 896 * 896 / 260e9);
}

TEST(LinearDispatch, GemvForDecodeGemmFromAHandfulOfRows) {
  // Up to 3 rows the GEMV reads W once: nothing to gain.
  for (std::int64_t M : {1, 2, 3}) EXPECT_EQ(choose_linear(M, 896, 4864, 2, kHost, LinearMode::automatic), LinearPath::gemv) << M;
  // M = 4: gemv 2 reads = 2 * 2KN / 60e9 = 6.67e-11 KN s; gemm 2KN / 60e9 + 8KN / 260e9 = 6.41e-11 KN s.
  for (std::int64_t M : {4, 7, 16, 63, 64, 255, 511, 512, 513, 2048})
    EXPECT_EQ(choose_linear(M, 896, 4864, 2, kHost, LinearMode::automatic), LinearPath::gemm) << M;
  // f32 W doubles the read each GEMV pass saves: GEMM from 4 rows as well.
  EXPECT_EQ(choose_linear(4, 896, 896, 4, kHost, LinearMode::automatic), LinearPath::gemm);
}

TEST(LinearDispatch, ABandwidthRichHostKeepsTheGemvLonger) {
  // 600 GB/s against 100 GFLOP/s: per row, gemm costs 2KN / 1e11 = 2e-11 KN s; a GEMV pass
  // 2KN / 6e11 = 3.3e-12 KN s. At M = 6 (2 passes) gemv 6.7e-12 < gemm 3.3e-12 + 1.2e-10.
  const HostRates rich{600e9, 100e9};
  EXPECT_EQ(choose_linear(6, 896, 896, 2, rich, LinearMode::automatic), LinearPath::gemv);
  // The GEMV's passes grow as M / 3 and the GEMM's flops as M, so gemv stays ahead at any M there.
  EXPECT_EQ(choose_linear(4096, 896, 896, 2, rich, LinearMode::automatic), LinearPath::gemv);
}

TEST(LinearDispatch, ForcedModesAndUnknownRates) {
  EXPECT_EQ(choose_linear(512, 896, 896, 2, kHost, LinearMode::gemv), LinearPath::gemv);
  EXPECT_EQ(choose_linear(1, 896, 896, 2, kHost, LinearMode::gemm), LinearPath::gemm);
  EXPECT_EQ(choose_linear(512, 896, 896, 2, HostRates{}, LinearMode::automatic), LinearPath::gemv);
}

TEST(LinearDispatch, ModeNames) {
  LinearMode m = LinearMode::gemm;
  EXPECT_TRUE(parse_linear_mode("", m));
  EXPECT_EQ(m, LinearMode::automatic);
  EXPECT_TRUE(parse_linear_mode("gemv", m));
  EXPECT_EQ(m, LinearMode::gemv);
  EXPECT_TRUE(parse_linear_mode("gemm", m));
  EXPECT_EQ(m, LinearMode::gemm);
  EXPECT_TRUE(parse_linear_mode("auto", m));
  EXPECT_EQ(m, LinearMode::automatic);
  EXPECT_FALSE(parse_linear_mode("GEMM", m));
  EXPECT_FALSE(parse_linear_mode("blas", m));
}

}  // namespace
}  // namespace sonde::threaded
