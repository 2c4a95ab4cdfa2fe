// Same input, same backend: bit-identical output across runs (two separate processes).
#include <gtest/gtest.h>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

class Determinism : public ::testing::TestWithParam<std::string> {};

TEST_P(Determinism, TwoRunsGiveIdenticalBits) {
  const auto dir = temp_dir();
  const auto model = dir / "model";
  auto r = run_sonde({"make-model", "--arch", "dream", "--preset", "tiny", "--seed", "3", "--out", model.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<Array> logits, acts;
  for (int run = 0; run < 2; ++run) {
    const auto out = dir / ("run" + std::to_string(run) + ".h5");
    r = run_sonde({"forward", "--model", model.string(), "--backend", GetParam(), "--ids", "5,17,99,3,250,7,42",
                   "--out", out.string(), "--hooks", "blocks.*.attn.hook_z"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    logits.push_back(read_dataset(out, "logits"));
    acts.push_back(read_dataset(out, "acts/blocks.1.attn.hook_z"));
  }
  EXPECT_EQ(logits[0].values, logits[1].values);  // exact, not within a tolerance
  EXPECT_EQ(acts[0].values, acts[1].values);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Determinism, ::testing::ValuesIn(built_backends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace sonde::test
