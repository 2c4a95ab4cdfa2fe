// `sonde generate --json` on the tiny golden checkpoints of ../shared/golden, on every backend
// built: Qwen2 greedy tokens (with and without the KV cache), Dream entropy / maskgit_plus
// sequences and per-step canvases, mixed-length batches equal to single runs, bad requests
// (exit 2). Plus, at the C++ level, KV-cached logits against full recompute (model-spec §1.3).
#include <sonde/session_decode.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

#include <cmath>
#include <sstream>

namespace sonde::test {
namespace {

const char* kQwen = "tiny-qwen2-float32-v2048";
const char* kDream = "tiny-dream-float32-v2048";

std::string model_dir(const char* m) { return (shared_dir() / "golden/models" / m).string(); }
std::filesystem::path shared_golden(const char* m) { return shared_dir() / "golden" / (std::string(m) + ".h5"); }


std::vector<std::int64_t> concat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class GenerateGoldenShared : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateGoldenShared, QwenGreedyTokensWithAndWithoutKvCache) {
  for (const char* p : {"prompt5", "prompt19"})
    for (bool cache : {true, false}) {
      SCOPED_TRACE(std::string(p) + (cache ? " cached" : " recompute"));
      const auto prompt = as_ints(read_dataset(shared_golden(kQwen), std::string("ar_greedy/") + p + "/prompt"));
      const auto tokens = as_ints(read_dataset(shared_golden(kQwen), std::string("ar_greedy/") + p + "/tokens"));
      std::vector<std::string> args{"--model", model_dir(kQwen), "--backend", GetParam(), "--ids", join_ids(prompt),
                                    "--max-new-tokens", "16", "--json"};
      if (!cache) args.push_back("--no-kv-cache");
      const auto out = generate_json(args);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0]["completion_ids"].get<std::vector<std::int64_t>>(), tokens);
      EXPECT_EQ(out[0]["prompt_ids"].get<std::vector<std::int64_t>>(), prompt);
      EXPECT_EQ(out[0]["finish_reason"], "length");
    }
}

TEST_P(GenerateGoldenShared, DreamSequencesAndHistories) {
  for (const char* p : {"prompt5", "prompt19"})
    for (auto [alg, steps] : {std::pair{"entropy", "16"}, std::pair{"maskgit_plus", "4"}}) {
      const std::string g = std::string("diffusion/") + p + "/" + alg + "_steps" + steps + "/";
      SCOPED_TRACE(g);
      const auto prompt = as_ints(read_dataset(shared_golden(kDream), g + "prompt"));
      const auto sequence = as_ints(read_dataset(shared_golden(kDream), g + "sequence"));
      const Array history = read_dataset(shared_golden(kDream), g + "history");
      const auto out = generate_json({"--model", model_dir(kDream), "--backend", GetParam(), "--ids", join_ids(prompt),
                                 "--max-new-tokens", "16", "--steps", steps, "--alg", alg, "--json", "--history"});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(concat(prompt, out[0]["completion_ids"].get<std::vector<std::int64_t>>()), sequence);
      const auto h = out[0]["history"].get<std::vector<std::vector<std::int64_t>>>();
      ASSERT_EQ(static_cast<std::int64_t>(h.size()), history.shape[0]);
      for (std::int64_t i = 0; i < history.shape[0]; ++i) EXPECT_EQ(h[static_cast<std::size_t>(i)], as_ints(history.at(i))) << "step " << i;
    }
}

// prompt19 and prompt5 in one left-padded batch give each prompt's golden result.
TEST_P(GenerateGoldenShared, MixedLengthBatchEqualsSingleRuns) {
  std::vector<std::string> ids;
  for (const char* p : {"prompt19", "prompt5"}) ids.push_back(join_ids(as_ints(read_dataset(shared_golden(kQwen), std::string("ar_greedy/") + p + "/prompt"))));
  const auto ar = generate_json({"--model", model_dir(kQwen), "--backend", GetParam(), "--ids", ids[0], "--ids", ids[1],
                            "--max-new-tokens", "16", "--json"});
  ASSERT_EQ(ar.size(), 2u);
  EXPECT_EQ(ar[0]["completion_ids"].get<std::vector<std::int64_t>>(), as_ints(read_dataset(shared_golden(kQwen), "ar_greedy/prompt19/tokens")));
  EXPECT_EQ(ar[1]["completion_ids"].get<std::vector<std::int64_t>>(), as_ints(read_dataset(shared_golden(kQwen), "ar_greedy/prompt5/tokens")));
  const auto df = generate_json({"--model", model_dir(kDream), "--backend", GetParam(), "--ids", ids[0], "--ids", ids[1],
                            "--max-new-tokens", "16", "--steps", "4", "--alg", "maskgit_plus", "--json"});
  ASSERT_EQ(df.size(), 2u);
  EXPECT_EQ(concat(as_ints(read_dataset(shared_golden(kDream), "diffusion/prompt19/maskgit_plus_steps4/prompt")),
                   df[0]["completion_ids"].get<std::vector<std::int64_t>>()),
            as_ints(read_dataset(shared_golden(kDream), "diffusion/prompt19/maskgit_plus_steps4/sequence")));
  EXPECT_EQ(concat(as_ints(read_dataset(shared_golden(kDream), "diffusion/prompt5/maskgit_plus_steps4/prompt")),
                   df[1]["completion_ids"].get<std::vector<std::int64_t>>()),
            as_ints(read_dataset(shared_golden(kDream), "diffusion/prompt5/maskgit_plus_steps4/sequence")));
}

// One seed, one output: across runs, batch composition and (by the parameter) backends.
TEST_P(GenerateGoldenShared, SampledOutputDependsOnlyOnTheSeed) {
  const std::vector<std::string> common{"--model", model_dir(kQwen), "--backend", GetParam(), "--max-new-tokens", "12",
                                        "--temperature", "0.9", "--top-k", "50", "--top-p", "0.9", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return generate_json(a);
  };
  const auto single = with({"--ids", "776,1012,1190,1500,1342", "--seed", "5"});
  const auto again = with({"--ids", "776,1012,1190,1500,1342", "--seed", "5"});
  // As the second prompt of a batch, the request gets seed 4 + 1 = 5.
  const auto batch = with({"--ids", "1619,1366,882", "--ids", "776,1012,1190,1500,1342", "--seed", "4"});
  ASSERT_EQ(single.size(), 1u);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(single[0]["completion_ids"], again[0]["completion_ids"]);
  EXPECT_EQ(single[0]["completion_ids"], batch[1]["completion_ids"]);
  const auto other = with({"--ids", "776,1012,1190,1500,1342", "--seed", "6"});
  EXPECT_NE(single[0]["completion_ids"], other[0]["completion_ids"]);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, GenerateGoldenShared, ::testing::ValuesIn(built_backends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(GenerateBadRequestsShared, ExitTwoWithAClearMessage) {
  struct Case {
    const char* model;
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Case> cases{
      {kQwen, {"--ids", ","}, "no token ids"},
      {kQwen, {"--ids", "5,2048"}, "2048"},
      {kDream, {"--ids", "5,6", "--steps", "0"}, "--steps"},
      {kDream, {"--ids", "5,6", "--alg", "greedy"}, "greedy"},
      {kQwen, {"--ids", "5,6", "--max-new-tokens", "100000000"}, "max_position_embeddings"},
      {kQwen, {"--ids", "5,6", "--hooks", "hook_embed"}, "--hooks needs --out or --stats"},
      {kQwen, {"--ids", "5,6", "--prompt", "hi"}, "--prompt or --ids"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"generate", "--model", model_dir(c.model)};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = run_sonde(args);
    EXPECT_EQ(r.exit_code, 2) << c.message << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
  }
}

// model-spec §1.3: cached output equals uncached output. Greedy tokens equal and every step's
// last-slot logits agree within 1e-5 of their scale, for a single row and a left-padded batch.
TEST(KvCacheShared, CachedLogitsEqualFullRecompute) {
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto session = Session::open(SessionOptions{model_dir(kQwen), backend, 1, plugin_root().string()});
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
