// The diffusion decoding modes at the command line and in dataset lines: bad values are one line
// naming the setting and value, exit 2, nothing written; a block size that does not divide the
// generation gives a shorter last block; /steps records each step's block and recomputed count.
#include "expect.h"
#include "h5_check.h"
#include "process.h"
#include "tiny_model_suite.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

class DiffusionModes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / "sonde-tests" / ("DiffusionModes-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    make_tiny_model(root_ / "dream", "dream");
    make_tiny_model(root_ / "qwen2", "qwen2");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  void SetUp() override {
    dir_ = temp_dir();
    ASSERT_TRUE(fs::exists(root_ / "dream" / "model.safetensors")) << "sonde make-model failed in SetUpTestSuite";
  }
  Outcome generate(std::vector<std::string> extra, const std::string& arch = "dream") const {
    std::vector<std::string> args{"generate", "--model", (root_ / arch).string(), "--ids", "1,2,3"};
    if (std::find(extra.begin(), extra.end(), "--max-new-tokens") == extra.end()) args.insert(args.end(), {"--max-new-tokens", "16"});
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  }
  Outcome batch(const std::string& lines, std::vector<std::string> extra = {}) const {
    std::ofstream(dir_ / "in.jsonl") << lines;
    std::vector<std::string> args{"batch", "--model", (root_ / "dream").string(), "--input", (dir_ / "in.jsonl").string(),
                                  "--output", (dir_ / "out.jsonl").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  }
  static inline fs::path root_;
  fs::path dir_;
};

TEST_F(DiffusionModes, BadValuesOnTheCommandLineAreOneLineAndExitTwo) {
  for (const char* t : {"0", "1.5", "-0.2", "nan"})
    EXPECT_TRUE(one_line_error(generate({"--alg", "confidence_threshold", "--threshold", t}), "generate", {"threshold", t},
                               {"outside"}))
        << t;
  EXPECT_TRUE(one_line_error(generate({"--threshold", "0.5"}), "generate", {"threshold", "0.5", "entropy"}, {"needs"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "cached"}), "generate", {"cached"}, {"unknown"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "block", "--block-size", "0"}), "generate", {"block_size", "0"},
                             {"less than"}));
  EXPECT_TRUE(one_line_error(generate({"--block-size", "8"}), "generate", {"block_size", "8", "block"}, {"needs"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "block", "--block-size", "4", "--steps", "3"}), "generate",
                             {"steps", "3", "4 blocks"}, {"fewer"}));
  EXPECT_TRUE(one_line_error(generate({"--alg", "origin", "--tokens-per-step", "2"}), "generate",
                             {"tokens_per_step", "origin"}, {"needs"}));
  EXPECT_TRUE(one_line_error(generate({"--tokens-per-step", "0"}), "generate", {"tokens_per_step", "0"}, {"less than"}));
  EXPECT_TRUE(one_line_error(generate({"--alg", "confidence_threshold", "--alg-temp", "0.5"}), "generate",
                             {"alg_temp", "confidence_threshold"}, {"not used"}));
}

TEST_F(DiffusionModes, AnAutoregressiveModelRefusesABlockMode) {
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "block"}, "qwen2"), "generate", {"diffusion_mode", "block"},
                             {"needs a diffusion model"}));
  for (const char* mode : {"block-cache", "dual-cache"})
    EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", mode}, "qwen2"), "generate", {"diffusion_mode", mode},
                               {"needs a diffusion model"}));
}

TEST_F(DiffusionModes, CachedModesRefuseBadValuesLikeBlockMode) {
  for (const char* t : {"0", "1.5"})
    EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "dual-cache", "--alg", "confidence_threshold", "--threshold", t}),
                               "generate", {"threshold", t}, {"outside"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "block-cache", "--block-size", "4", "--steps", "3"}), "generate",
                             {"steps", "3", "4 blocks"}, {"fewer"}));
  for (const char* n : {"0"})
    EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "dual-cache", "--refresh-every", n}), "generate",
                               {"refresh_every", n}, {"less than 1"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "block", "--refresh-every", "2"}), "generate",
                             {"refresh_every", "2", "block-cache or dual-cache"}, {}));
  EXPECT_TRUE(one_line_error(batch(R"({"id": "a", "ids": [1, 2], "diffusion_mode": "block-cache", "refresh_every": 0})" "\n"),
                             "batch", {"line 1", "refresh_every", "0"}, {"less than 1"}));
  // A block size that does not divide the generation: the last block is shorter (10 = 4 + 4 + 2).
  const auto o = generate({"--max-new-tokens", "10", "--diffusion-mode", "dual-cache", "--block-size", "4", "--json"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  EXPECT_EQ(nlohmann::json::parse(lines_of(o.out).at(0))["completion_ids"].size(), 10u);
}

// 3 prompt slots + 8 new in blocks of 4 (slots 3..6 and 7..10), one slot per step. A block's
// first step computes all 11 slots; later ones [2, 11) then [6, 11) (block-cache) or [2, 7) then
// [6, 11) (dual-cache). Every slot is captured at every step; only computed rows are fresh, the
// others carry the values of their block's refresh (step 0 or 4).
TEST_F(DiffusionModes, CachedModesRecordTheRecomputedSlotsAndMarkTheOthers) {
  for (const std::string mode : {"block-cache", "dual-cache"}) {
    SCOPED_TRACE(mode);
    const auto out = dir_ / (mode + ".h5");
    const auto o = generate({"--max-new-tokens", "8", "--diffusion-mode", mode, "--block-size", "4", "--steps", "8",
                             "--hooks", "blocks.0.hook_resid_post", "--diffusion-capture", "all", "--out", out.string()});
    ASSERT_EQ(o.exit_code, 0) << o.describe();
    EXPECT_EQ(read_ints(out, "/steps/block"), (std::vector<std::int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
    const auto expected = mode == "block-cache" ? std::vector<std::int64_t>{11, 9, 9, 9, 11, 5, 5, 5}
                                                : std::vector<std::int64_t>{11, 5, 5, 5, 11, 5, 5, 5};
    EXPECT_EQ(read_ints(out, "/steps/n_recomputed"), expected);
    const auto steps = read_ints(out, "/rows/step"), pos = read_ints(out, "/rows/pos");
    const auto fresh = read_ints(out, "/rows/fresh"), computed = read_ints(out, "/rows/computed_step");
    ASSERT_EQ(steps.size(), 8u * 11) << "every slot at every step";
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto st = steps[i];
      const std::int64_t first = st < 4 ? 2 : 6, end = mode == "dual-cache" ? first + 5 : 11;
      const bool in_range = st == 0 || st == 4 || (pos[i] >= first && pos[i] < end);  // a refresh: every slot
      EXPECT_EQ(fresh[i], in_range ? 1 : 0) << "row " << i << " step " << st;
      EXPECT_EQ(computed[i], in_range ? st : st < 4 ? 0 : 4) << "row " << i << " step " << st;
    }
    EXPECT_EQ(int_attr(out, "block_size"), 4);
  }
}

TEST_F(DiffusionModes, DatasetLinesAreCheckedBeforeAnythingIsWritten) {
  const auto o = batch(R"({"id": "a", "ids": [1, 2]})" "\n"
                       R"({"id": "b", "ids": [1, 2], "alg": "confidence_threshold", "threshold": 2})" "\n",
                       {"--hooks", "blocks.0.hook_resid_post", "--acts", (dir_ / "a.h5").string()});
  EXPECT_TRUE(one_line_error(o, "batch", {"line 2", "threshold", "2"}, {"outside"}));
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
  EXPECT_FALSE(fs::exists(dir_ / "a.h5"));
  EXPECT_TRUE(one_line_error(batch(R"({"id": "a", "ids": [1, 2], "diffusion_mode": "block", "block_size": 2, "steps": 4, "max_new_tokens": 16})" "\n"),
                             "batch", {"line 1", "steps", "8 blocks"}, {"fewer"}));
  EXPECT_TRUE(one_line_error(batch(R"({"id": "a", "ids": [1, 2], "block_size": "big"})" "\n"), "batch", {"line 1", "block_size"},
                             {"bad value"}));
}

TEST_F(DiffusionModes, ALastBlockShorterThanTheOthers) {
  // 10 new tokens in blocks of 4: 4, 4, 2; steps = tokens gives one slot per step.
  const auto o = generate({"--max-new-tokens", "10", "--diffusion-mode", "block", "--block-size", "4", "--json", "--history"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  const auto j = nlohmann::json::parse(lines_of(o.out).at(0));
  EXPECT_EQ(j["completion_ids"].size(), 10u);
  const auto h = j["history"].get<std::vector<std::vector<std::int64_t>>>();
  ASSERT_EQ(h.size(), 10u);
  for (std::size_t i = 1; i < h.size(); ++i) {  // exactly one slot changes per step, left block first
    int changed = 0;
    std::size_t where = 0;
    for (std::size_t k = 0; k < h[i].size(); ++k)
      if (h[i][k] != h[i - 1][k]) ++changed, where = k;
    EXPECT_EQ(changed, 1) << "step " << i;
    EXPECT_EQ((where - 3) / 4, i < 4 ? 0u : i < 8 ? 1u : 2u) << "step " << i;
  }
}

TEST_F(DiffusionModes, StepsRecordTheBlockAndTheRecomputedPositions) {
  const auto out = dir_ / "g.h5";
  const auto o = generate({"--max-new-tokens", "8", "--diffusion-mode", "block", "--block-size", "4", "--steps", "4",
                           "--hooks", "blocks.0.hook_resid_post", "--out", out.string()});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  EXPECT_EQ(read_ints(out, "/steps/block"), (std::vector<std::int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(read_ints(out, "/steps/n_recomputed"), (std::vector<std::int64_t>{11, 11, 11, 11}));  // 3 + 8, no cache
  EXPECT_EQ(read_ints(out, "/steps/n_transfer"), (std::vector<std::int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(int_attr(out, "block_size"), 4);  // the mode's other root attributes: docs/hdf5-layout.md
  // A threshold of 1 commits one slot per step: as many steps as tokens.
  const auto t = dir_ / "t.h5";
  ASSERT_EQ(generate({"--max-new-tokens", "8", "--diffusion-mode", "block", "--block-size", "4", "--alg",
                      "confidence_threshold", "--threshold", "1", "--hooks", "blocks.0.hook_resid_post", "--out", t.string()})
                .exit_code,
            0);
  EXPECT_EQ(read_ints(t, "/steps/block"), (std::vector<std::int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

}  // namespace
}  // namespace sonde::test
