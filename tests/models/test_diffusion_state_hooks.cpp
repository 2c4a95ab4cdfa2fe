// diffusion.hook_tokens / hook_transfer / hook_confidence (one scalar per row) written by
// `sonde generate --hooks ... --out`: the transfers follow the model-spec §3.4 schedule, the
// final tokens are the completion, and /prompts records the prompt text.
#include <gtest/gtest.h>

#include <cmath>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

// k per step for n masked slots and `steps` steps, eps 1e-3 (model-spec §3.4), in float32.
std::vector<std::int64_t> schedule(std::int64_t n, std::int64_t steps) {
  std::vector<std::int64_t> k;
  for (std::int64_t i = 0; i < steps; ++i) {
    const float t = 1.0f - static_cast<float>(i) * (1.0f - 1e-3f) / static_cast<float>(steps);
    const float s = 1.0f - static_cast<float>(i + 1) * (1.0f - 1e-3f) / static_cast<float>(steps);
    const std::int64_t ki = i == steps - 1 ? n : static_cast<std::int64_t>(static_cast<float>(n) * (1.0f - s / t));
    k.push_back(ki);
    n -= ki;
  }
  return k;
}

TEST(DiffusionStateHooks, WrittenPerRowAndConsistentWithTheSchedule) {
  const auto dir = temp_dir();
  auto r = run_sonde({"make-model", "--arch", "dream", "--preset", "tiny", "--seed", "2", "--out", (dir / "m").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::int64_t n = 8;
  const auto json = generate_json({"--model", (dir / "m").string(), "--prompt", "hello there", "--max-new-tokens", "8",
                                   "--steps", "8", "--alg", "maskgit_plus", "--json", "--out", (dir / "d.h5").string(),
                                   "--hooks", "diffusion.hook_tokens,diffusion.hook_transfer,diffusion.hook_confidence",
                                   "--diffusion-capture", "all"});
  ASSERT_EQ(json.size(), 1u);
  const auto f = dir / "d.h5";
  const Array tokens = read_dataset(f, "acts/diffusion.hook_tokens"), transfer = read_dataset(f, "acts/diffusion.hook_transfer");
  const Array conf = read_dataset(f, "acts/diffusion.hook_confidence");
  const auto step = as_ints(read_dataset(f, "rows/step")), pos = as_ints(read_dataset(f, "rows/pos"));
  ASSERT_EQ(tokens.shape, std::vector<std::int64_t>{static_cast<std::int64_t>(step.size())});  // scalar rows
  ASSERT_EQ(transfer.shape, tokens.shape);
  ASSERT_EQ(conf.shape, tokens.shape);

  const auto prompt_len = static_cast<std::int64_t>(json[0]["prompt_ids"].size());
  const auto completion = json[0]["completion_ids"].get<std::vector<std::int64_t>>();
  std::vector<std::int64_t> per_step(static_cast<std::size_t>(n), 0);
  for (std::size_t i = 0; i < step.size(); ++i) {
    per_step.at(static_cast<std::size_t>(step[i])) += static_cast<std::int64_t>(transfer.values[i]);
    if (step[i] == n - 1 && pos[i] >= prompt_len) {  // after the last step the canvas is the completion
      EXPECT_EQ(tokens.values[i], completion.at(static_cast<std::size_t>(pos[i] - prompt_len)));
    }
    if (transfer.values[i] == 1) { EXPECT_TRUE(std::isfinite(conf.values[i])) << "a committed slot has a confidence"; }
  }
  EXPECT_EQ(per_step, schedule(n, n));

  const auto text = read_dataset(f, "prompts/text_bytes");
  std::string s;
  for (double c : text.values) s += static_cast<char>(c);
  EXPECT_EQ(s, "hello there");
}

}  // namespace
}  // namespace sonde::test
