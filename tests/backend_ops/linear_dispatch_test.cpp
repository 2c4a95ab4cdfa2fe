// The threaded backend's Linear dispatch (backends/threaded/linear_dispatch.h) as a pure function
// of the shape and the host's rates. The expected choices are worked out by hand from the cost
// model's two formulas, not taken from the code.
#include "linear_dispatch.h"

#include <gtest/gtest.h>

namespace sonde::threaded {
namespace {

// A host reading 60 GB/s with a 260 GFLOP/s GEMM and a GEMV kernel that makes 200 GFLOP/s on
// W chunks in L2.
constexpr HostRates kHost{60e9, 260e9, 200e9};

TEST(LinearDispatch, PredictedSecondsFollowTheModel) {
  // bf16 896 x 896: W is 1.6 MB. gemv: one read + ceil(7 / 3) = 3 passes of 3 rows' flops
  // (2 * 3 * K * N each) at the in-cache rate; gemm: one read + 2 * 7 * K * N flops.
  const double w = 896.0 * 896.0 * 2;
  EXPECT_DOUBLE_EQ(gemv_seconds(7, 896, 896, 2, kHost), w / 60e9 + 3 * 6.0 * 896 * 896 / 200e9);
  EXPECT_DOUBLE_EQ(gemm_seconds(7, 896, 896, 2, kHost), w / 60e9 + 2.0 * 7 * 896 * 896 / 260e9);
}

TEST(LinearDispatch, GemvForDecodeGemmWhenItsRateIsHigher) {
  // Up to 3 rows the GEMV reads W once: nothing to gain.
  for (std::int64_t M : {1, 2, 3}) EXPECT_EQ(choose_linear(M, 896, 4864, 2, kHost, LinearMode::automatic), LinearPath::gemv) << M;
  // Both read W once, so per K * N: gemv 6 * ceil(M / 3) / 200e9, gemm 2M / 260e9.
  // M = 4: 12 / 200e9 = 6.0e-11 against 8 / 260e9 = 3.1e-11; M = 64: 132 / 200e9 = 6.6e-10
  // against 128 / 260e9 = 4.9e-10; M = 256: 516 / 200e9 = 2.6e-9 against 512 / 260e9 = 2.0e-9.
  for (std::int64_t M : {4, 7, 16, 63, 64, 255, 256, 511, 512, 513, 2048})
    EXPECT_EQ(choose_linear(M, 896, 4864, 2, kHost, LinearMode::automatic), LinearPath::gemm) << M;
}

TEST(LinearDispatch, AFastInCacheGemvKeepsThePrefill) {
  // GEMM 150 GFLOP/s, GEMV in L2 200 (this host's loaded figures, bench/README.md). Per K * N:
  // M = 64: gemv 22 passes * 6 / 200e9 = 6.6e-10 < gemm 128 / 150e9 = 8.5e-10;
  // M = 256: 86 * 6 / 200e9 = 2.6e-9 < 512 / 150e9 = 3.4e-9; M = 512: 171 * 6 / 200e9 = 5.1e-9
  // < 1024 / 150e9 = 6.8e-9. The read of W is the same on both sides and cancels.
  const HostRates host{60e9, 150e9, 200e9};
  for (std::int64_t M : {5, 6, 64, 128, 256, 384, 512})
    EXPECT_EQ(choose_linear(M, 896, 4864, 2, host, LinearMode::automatic), LinearPath::gemv) << M;
  // M = 4 pays a whole pass for one row: gemv 2 * 6 / 200e9 = 6.0e-11 > gemm 8 / 150e9 = 5.3e-11.
  EXPECT_EQ(choose_linear(4, 896, 4864, 2, host, LinearMode::automatic), LinearPath::gemm);
  // f32 W only grows the read both share: the same choice.
  EXPECT_EQ(choose_linear(64, 896, 896, 4, host, LinearMode::automatic), LinearPath::gemv);
}

TEST(LinearDispatch, TheGemmsCostPerWeightKeepsFewRowsOnTheGemv) {
  // The host above with the GEMM's widening costed: 0.06 ns per weight whatever the rows (the
  // two-point probe measured 0.061-0.070 on one thread here). Per K * N, gemm = 6e-11 + 2M / rate.
  const HostRates host{60e9, 150e9, 200e9, 0.06e-9};
  const double w = 896.0 * 4864 * 2;
  EXPECT_DOUBLE_EQ(gemm_seconds(4, 896, 4864, 2, host), w / 60e9 + 896.0 * 4864 * 0.06e-9 + 8.0 * 896 * 4864 / 150e9);
  // M = 4: gemv 12 / 200e9 = 6.0e-11 < gemm 6e-11 + 8 / 150e9 = 1.13e-10. Without the term 4 rows
  // took the GEMM on these rates (the test above), and a 4-row decode step ran 2.8x slower there.
  EXPECT_EQ(choose_linear(4, 896, 4864, 2, host, LinearMode::automatic), LinearPath::gemv);
  // With a GEMM rate above the GEMV's it still wins once the rows repay the widening (260
  // GFLOP/s): M = 4: gemv 6.0e-11 < gemm 6e-11 + 8 / 260e9 = 9.1e-11; M = 64: gemv 22 * 6 /
  // 200e9 = 6.6e-10 > gemm 6e-11 + 128 / 260e9 = 5.5e-10; M = 512: 5.1e-9 > 4.0e-9.
  const HostRates fast_gemm{60e9, 260e9, 200e9, 0.06e-9};
  EXPECT_EQ(choose_linear(4, 896, 4864, 2, fast_gemm, LinearMode::automatic), LinearPath::gemv);
  EXPECT_EQ(choose_linear(64, 896, 4864, 2, fast_gemm, LinearMode::automatic), LinearPath::gemm);
  EXPECT_EQ(choose_linear(512, 896, 4864, 2, fast_gemm, LinearMode::automatic), LinearPath::gemm);
}

TEST(LinearDispatch, ForcedModesAndUnknownRates) {
  EXPECT_EQ(choose_linear(512, 896, 896, 2, kHost, LinearMode::gemv), LinearPath::gemv);
  EXPECT_EQ(choose_linear(1, 896, 896, 2, kHost, LinearMode::gemm), LinearPath::gemm);
  EXPECT_EQ(choose_linear(512, 896, 896, 2, HostRates{}, LinearMode::automatic), LinearPath::gemv);
  // Without the in-cache GEMV rate (older callers) the GEMV cannot be costed: gemv, as for no rates.
  EXPECT_EQ(choose_linear(512, 896, 896, 2, HostRates{60e9, 260e9, 0}, LinearMode::automatic), LinearPath::gemv);
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
  EXPECT_TRUE(parse_linear_mode("model", m));
  EXPECT_EQ(m, LinearMode::model);
  // model is the prediction alone: the automatic choices of the tests above.
  EXPECT_EQ(choose_linear(4, 896, 4864, 2, kHost, LinearMode::model), LinearPath::gemm);
  EXPECT_EQ(choose_linear(3, 896, 4864, 2, kHost, LinearMode::model), LinearPath::gemv);
  EXPECT_FALSE(parse_linear_mode("GEMM", m));
  EXPECT_FALSE(parse_linear_mode("blas", m));
}

}  // namespace
}  // namespace sonde::threaded
