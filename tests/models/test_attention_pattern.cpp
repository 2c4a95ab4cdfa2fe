// attn.hook_pattern through `sonde forward`: [T, nh, T] probabilities, causal for Qwen2 and
// bidirectional for Dream, consistent with the captured values and attention output
// (z[t,h] = sum_u p[t,h,u] v[u, h / (nh/nkv)]); only captured when named; refused by generate.
#include <gtest/gtest.h>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

class AttentionPatternHook : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionPatternHook, RowsAreSoftmaxOverVisibleKeysAndReproduceZ) {
  const bool causal = GetParam() == "qwen2";
  const auto dir = temp_dir();
  auto r = run_sonde({"make-model", "--arch", GetParam(), "--preset", "tiny", "--seed", "5", "--out", (dir / "m").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = dir / "p.h5";
  r = run_sonde({"forward", "--model", (dir / "m").string(), "--ids", "3,14,15,92,65,35", "--out", out.string(),
                 "--hooks", "blocks.1.attn.hook_pattern,blocks.1.attn.hook_v,blocks.1.attn.hook_z"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Array p = read_dataset(out, "acts/blocks.1.attn.hook_pattern");
  const Array v = read_dataset(out, "acts/blocks.1.attn.hook_v");
  const Array z = read_dataset(out, "acts/blocks.1.attn.hook_z");
  const std::int64_t T = 6, nh = 4, nkv = 2, d = 16;  // the tiny preset
  ASSERT_EQ(p.shape, (std::vector<std::int64_t>{T, nh, T}));
  auto P = [&](std::int64_t t, std::int64_t h, std::int64_t u) { return p.values[static_cast<std::size_t>((t * nh + h) * T + u)]; };
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < nh; ++h) {
      double sum = 0;
      for (std::int64_t u = 0; u < T; ++u) {
        if (causal && u > t) { EXPECT_EQ(P(t, h, u), 0.0) << "causal: query " << t << " sees key " << u; }
        if (!causal) { EXPECT_GT(P(t, h, u), 0.0) << "bidirectional: every key is visible"; }
        sum += P(t, h, u);
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      for (std::int64_t j = 0; j < d; ++j) {
        double acc = 0;
        for (std::int64_t u = 0; u < T; ++u)
          acc += P(t, h, u) * v.values[static_cast<std::size_t>((u * nkv + h / (nh / nkv)) * d + j)];
        EXPECT_NEAR(acc, z.values[static_cast<std::size_t>((t * nh + h) * d + j)], 1e-4);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Families, AttentionPatternHook, ::testing::Values("qwen2", "dream"));

TEST(AttentionPatternSelection, GlobsSkipPatternsUnlessTheyNameThem) {
  const auto dir = temp_dir();
  auto r = run_sonde({"make-model", "--arch", "qwen2", "--preset", "tiny", "--out", (dir / "m").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_sonde({"forward", "--model", (dir / "m").string(), "--ids", "1,2,3", "--out", (dir / "a.h5").string(),
                 "--hooks", "blocks.0.*"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(has_object(dir / "a.h5", "acts/blocks.0.attn.hook_pattern"));
  EXPECT_TRUE(has_object(dir / "a.h5", "acts/blocks.0.attn.hook_z"));
  r = run_sonde({"forward", "--model", (dir / "m").string(), "--ids", "1,2,3", "--out", (dir / "b.h5").string(),
                 "--hooks", "blocks.*.attn.hook_pattern"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has_object(dir / "b.h5", "acts/blocks.1.attn.hook_pattern"));
  r = run_sonde({"generate", "--model", (dir / "m").string(), "--ids", "1,2,3", "--max-new-tokens", "2", "--out",
                 (dir / "c.h5").string(), "--hooks", "blocks.0.attn.hook_pattern"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("sonde forward"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sonde::test
