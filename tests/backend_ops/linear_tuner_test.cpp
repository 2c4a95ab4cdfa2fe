// The Linear tuner (backends/threaded/linear_tuner.h) on made-up times: which path each call of a
// shape class takes while it explores and after it settles. Expected paths are worked out by hand.
#include "linear_tuner.h"

#include <gtest/gtest.h>

namespace sonde::threaded {
namespace {

constexpr LinearPath kTunerGemv = LinearPath::gemv, kTunerGemm = LinearPath::gemm;

TEST(LinearTuner, RowClassesAreHalfOctaves) {
  // [2^e, 1.5 * 2^e) is class 2e, [1.5 * 2^e, 2^(e+1)) class 2e + 1.
  EXPECT_EQ(LinearTuner::row_class(1), 0);
  EXPECT_EQ(LinearTuner::row_class(4), 4);
  EXPECT_EQ(LinearTuner::row_class(5), 4);
  EXPECT_EQ(LinearTuner::row_class(6), 5);
  EXPECT_EQ(LinearTuner::row_class(7), 5);
  EXPECT_EQ(LinearTuner::row_class(8), 6);
  EXPECT_EQ(LinearTuner::row_class(128), 14);
  EXPECT_EQ(LinearTuner::row_class(191), 14);
  EXPECT_EQ(LinearTuner::row_class(192), 15);
  EXPECT_EQ(LinearTuner::row_class(255), 15);
  EXPECT_EQ(LinearTuner::row_class(256), 16);
}

TEST(LinearTuner, AlternatesFromThePredictionThenKeepsTheFasterBest) {
  LinearTuner t;
  const auto next = [&] { return t.pick(256, 3584, 18944, 2, kTunerGemv); };
  // Trials: gemv, gemm, gemv, gemm (the prediction first, then the path with fewer trials).
  // gemv's best 0.23 < gemm's 0.24, never 1.2x apart (which would settle early, next test).
  const double seconds[] = {0.30, 0.26, 0.23, 0.24};
  const LinearPath expected[] = {kTunerGemv, kTunerGemm, kTunerGemv, kTunerGemm};
  for (int i = 0; i < 4; ++i) {
    const LinearTuner::Pick p = next();
    EXPECT_EQ(p.path, expected[i]) << i;
    EXPECT_TRUE(p.timed) << i;
    EXPECT_EQ(t.record(256, 3584, 18944, 2, p.path, seconds[i]), i == 3) << i;  // the 4th settles it
  }
  for (int i = 0; i < 3; ++i) {
    const LinearTuner::Pick p = next();
    EXPECT_EQ(p.path, kTunerGemv);  // 0.23 against 0.24: the best, though gemv's mean is the larger
    EXPECT_FALSE(p.timed);
  }
  const auto [gemv_s, gemm_s] = t.best(256, 3584, 18944, 2);
  EXPECT_DOUBLE_EQ(gemv_s, 0.23);
  EXPECT_DOUBLE_EQ(gemm_s, 0.24);
}

TEST(LinearTuner, APredictionClearlyFasterOnItsFirstTrialSettlesAtOnce) {
  LinearTuner t;
  // gemv (the prediction, timed first) 0.10 s, gemm 0.125 s: more than 1.2x slower, settled.
  EXPECT_FALSE(t.record(64, 896, 151936, 2, t.pick(64, 896, 151936, 2, kTunerGemv).path, 0.10));
  const LinearTuner::Pick second = t.pick(64, 896, 151936, 2, kTunerGemv);
  EXPECT_EQ(second.path, kTunerGemm);
  EXPECT_TRUE(t.record(64, 896, 151936, 2, second.path, 0.125));
  const LinearTuner::Pick after = t.pick(64, 896, 151936, 2, kTunerGemv);
  EXPECT_EQ(after.path, kTunerGemv);
  EXPECT_FALSE(after.timed);
  // Not so when the other path looks faster (the first trial may have been slowed by a cold start),
  // nor within the margin: both go on to kTrials each.
  for (const double other : {0.08, 0.115}) {
    LinearTuner u;
    u.record(64, 896, 151936, 2, u.pick(64, 896, 151936, 2, kTunerGemv).path, 0.10);
    EXPECT_FALSE(u.record(64, 896, 151936, 2, u.pick(64, 896, 151936, 2, kTunerGemv).path, other)) << other;
    const LinearTuner::Pick third = u.pick(64, 896, 151936, 2, kTunerGemv);
    EXPECT_TRUE(third.timed) << other;
    EXPECT_EQ(third.path, kTunerGemv) << other;
  }
}

TEST(LinearTuner, TheMeasurementOverridesThePrediction) {
  LinearTuner t;
  for (int i = 0; i < 4; ++i) {
    const LinearTuner::Pick p = t.pick(300, 18944, 3584, 2, kTunerGemv);
    t.record(300, 18944, 3584, 2, p.path, p.path == kTunerGemv ? 0.50 : 0.40);
  }
  EXPECT_EQ(t.pick(300, 18944, 3584, 2, kTunerGemv).path, kTunerGemm);
  // Another row count of the same class (256..383) follows it; the next class explores anew.
  EXPECT_EQ(t.pick(383, 18944, 3584, 2, kTunerGemv).path, kTunerGemm);
  EXPECT_FALSE(t.pick(383, 18944, 3584, 2, kTunerGemv).timed);
  EXPECT_TRUE(t.pick(384, 18944, 3584, 2, kTunerGemv).timed);
  // So do another K, N and weight size.
  EXPECT_TRUE(t.pick(300, 3584, 3584, 2, kTunerGemv).timed);
  EXPECT_TRUE(t.pick(300, 18944, 512, 2, kTunerGemv).timed);
  EXPECT_TRUE(t.pick(300, 18944, 3584, 4, kTunerGemv).timed);
  EXPECT_TRUE(t.pick(300, 18944, 3584, 1.125, kTunerGemv).timed);
}

TEST(LinearTuner, ATieKeepsThePrediction) {
  LinearTuner t;
  for (int i = 0; i < 4; ++i) {
    const LinearTuner::Pick p = t.pick(64, 896, 4864, 2, kTunerGemm);
    EXPECT_EQ(p.path, i % 2 == 0 ? kTunerGemm : kTunerGemv) << i;  // the prediction first
    t.record(64, 896, 4864, 2, p.path, 0.01);
  }
  EXPECT_EQ(t.pick(64, 896, 4864, 2, kTunerGemm).path, kTunerGemm);
  EXPECT_EQ(t.pick(64, 896, 4864, 2, kTunerGemv).path, kTunerGemv);
}

TEST(LinearTuner, UpToThreeRowsIsTheGemvUntimed) {
  LinearTuner t;
  for (std::int64_t M : {1, 2, 3}) {
    const LinearTuner::Pick p = t.pick(M, 896, 4864, 2, kTunerGemm);
    EXPECT_EQ(p.path, kTunerGemv) << M;
    EXPECT_FALSE(p.timed) << M;
  }
  EXPECT_TRUE(t.pick(4, 896, 4864, 2, kTunerGemv).timed);
}

}  // namespace
}  // namespace sonde::threaded
