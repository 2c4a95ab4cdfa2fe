// The checks of test_generate_golden.cpp that need no golden numbers, on make-model checkpoints of
// the same shapes, so that a fresh clone without ../shared runs them: bad requests exit 2 with a
// clear message, and KV-cached logits equal a full recompute (model-spec §1.3).
#include <sonde/session_decode.h>

#include <gtest/gtest.h>

#include <cmath>

#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

TEST(GenerateBadRequests, ExitTwoWithAClearMessage) {
  struct Case {
    const char* arch;
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Case> cases{
      {"qwen2", {"--ids", ","}, "no token ids"},
      {"qwen2", {"--ids", "5,2048"}, "2048"},
      {"dream", {"--ids", "5,6", "--steps", "0"}, "--steps"},
      {"dream", {"--ids", "5,6", "--alg", "greedy"}, "greedy"},
      {"qwen2", {"--ids", "5,6", "--max-new-tokens", "100000000"}, "max_position_embeddings"},
      {"qwen2", {"--ids", "5,6", "--hooks", "hook_embed"}, "--hooks needs --out or --stats"},
      {"qwen2", {"--ids", "5,6", "--prompt", "hi"}, "--prompt or --ids"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"generate", "--model", made_model(c.arch).string()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = run_sonde(args);
    EXPECT_EQ(r.exit_code, 2) << c.message << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
  }
}

// Greedy tokens equal and every step's last-slot logits agree within 1e-5 of their scale, for a
// single row and a left-padded batch.
TEST(KvCache, CachedLogitsEqualFullRecompute) {
  const auto model = made_model("qwen2", "tiny", 21);
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto session = Session::open(SessionOptions{model.string(), backend, 1, plugin_root().string()});
    const std::vector<std::vector<std::int32_t>> prompts{{1619, 1366, 882, 1837, 1886, 1546, 925}, {776, 1012, 1190}};
    auto run = [&](bool cache, std::vector<std::vector<float>>& logits) {
      SessionDecodeForward fwd(*session, cache);
      ArOptions o;
      o.max_new_tokens = 10;
      return generate_autoregressive(fwd, prompts, o, [&](const ArStep& s) {
        logits.emplace_back(s.logits.data<float>(), s.logits.data<float>() + s.logits.shape().numel());
      });
    };
    std::vector<std::vector<float>> with, without;
    const auto a = run(true, with), b = run(false, without);
    for (std::size_t r = 0; r < prompts.size(); ++r) EXPECT_EQ(a[r].tokens, b[r].tokens);
    ASSERT_EQ(with.size(), without.size());
    ASSERT_FALSE(with.empty());
    for (std::size_t s = 0; s < with.size(); ++s) {
      double err = 0, scale = 0;
      for (std::size_t i = 0; i < with[s].size(); ++i) {
        err = std::max(err, static_cast<double>(std::abs(with[s][i] - without[s][i])));
        scale = std::max(scale, static_cast<double>(std::abs(without[s][i])));
      }
      EXPECT_LE(err / scale, 1e-5) << "step " << s;
    }
  }
}

}  // namespace
}  // namespace sonde::test
