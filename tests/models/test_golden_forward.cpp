// `sonde forward` on the two tiny checkpoints of ../shared/golden, on every backend built: logits,
// hidden states (Hugging Face convention) and per-layer outputs within max|err|/max|ref| <= 1e-4.
#include <gtest/gtest.h>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

constexpr double kForwardTolerance = 1e-4;

struct ForwardCase {
  std::string backend, model, prompt;
};

std::vector<ForwardCase> forward_cases() {
  std::vector<ForwardCase> c;
  for (const auto& b : built_backends())
    for (const char* m : {"tiny-qwen2-float32-v2048", "tiny-dream-float32-v2048"})
      for (const char* p : {"prompt5", "prompt19"}) c.push_back({b, m, p});
  return c;
}

class GoldenForwardShared : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(GoldenForwardShared, MatchesLogitsHiddenStatesAndLayerOutputs) {
  const ForwardCase& c = GetParam();
  const auto golden = shared_dir() / "golden" / (c.model + ".h5");
  const std::string g = "forward/" + c.prompt + "/";
  const Array ids = read_dataset(golden, g + "input_ids");
  std::vector<std::int64_t> id_list(ids.values.begin(), ids.values.end());
  const auto out = temp_dir() / "out.h5";
  const auto r = run_sonde({"forward", "--model", (shared_dir() / "golden/models" / c.model).string(), "--backend",
                            c.backend, "--ids", join_ids(id_list), "--out", out.string(), "--hooks",
                            "hook_embed,blocks.*.hook_resid_post,ln_final.hook_out"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  EXPECT_LE(normalised_error(read_dataset(out, "input_ids"), ids), 0.0);
  EXPECT_LE(normalised_error(read_dataset(out, "logits"), read_dataset(golden, g + "logits")), kForwardTolerance);

  const Array hidden = read_dataset(golden, g + "hidden_states");  // [L+1, T, H]
  const Array resid = read_dataset(golden, g + "resid_post");      // [L, T, H]
  const std::int64_t L = resid.shape[0];
  EXPECT_LE(normalised_error(read_dataset(out, "acts/hook_embed"), hidden.at(0)), kForwardTolerance);
  for (std::int64_t k = 1; k < L; ++k)
    EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks." + std::to_string(k - 1) + ".hook_resid_post"), hidden.at(k)),
              kForwardTolerance)
        << "hidden_states[" << k << "]";
  EXPECT_LE(normalised_error(read_dataset(out, "acts/ln_final.hook_out"), hidden.at(L)), kForwardTolerance);
  for (std::int64_t i = 0; i < L; ++i)
    EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks." + std::to_string(i) + ".hook_resid_post"), resid.at(i)),
              kForwardTolerance)
        << "resid_post[" << i << "]";
}

INSTANTIATE_TEST_SUITE_P(AllBackends, GoldenForwardShared, ::testing::ValuesIn(forward_cases()),
                         [](const auto& info) {
                           std::string n = info.param.backend + "_" + info.param.model + "_" + info.param.prompt;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace sonde::test
