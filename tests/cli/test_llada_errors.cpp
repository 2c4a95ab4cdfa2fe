// LLaDA's bad input: a config.json of a variant the plugin does not compute, a mask token outside
// the vocabulary, generate()'s rules (block_length divides the generation, the blocks divide the
// steps) and Dream's settings on a LLaDA model: exit 2 and one line naming the file or flag, the
// field and the value. Each case starts from fresh `make-model --arch llada --preset tiny` output.
#include "checkpoint.h"
#include "expect.h"
#include "process.h"
#include "test_paths.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

class LladaBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = temp_dir() / "llada";
    make_tiny_model(model_, "llada");
    cfg_ = model_ / "config.json";
  }
  void set_config(const char* key, const nlohmann::json& value) const {
    auto j = read_json(cfg_);
    j[key] = value;
    write_text(cfg_, j.dump(2));
  }
  Outcome forward() const { return run({"forward", "--model", model_.string(), "--ids", "1,2,3", "--out", (model_ / "o.h5").string()}); }
  Outcome generate(std::vector<std::string> extra) const {
    std::vector<std::string> a{"generate", "--model", model_.string(), "--ids", "1,2,3", "--json", "--backend", "reference"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  }
  fs::path model_, cfg_;
};

TEST_F(LladaBadInput, ItGeneratesWhenNothingIsWrong) {
  const auto o = generate({"--max-new-tokens", "8", "--steps", "4", "--block-length", "4"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST_F(LladaBadInput, UnknownBlockType) {
  set_config("block_type", "sequential");
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "block_type", "sequential"}, {"supported"}));
}

TEST_F(LladaBadInput, AlibiAndLogitScaling) {
  set_config("alibi", true);
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "alibi", "true"}, {"not supported"}));
  set_config("alibi", false);
  set_config("scale_logits", true);
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "scale_logits"}, {"not supported"}));
}

TEST_F(LladaBadInput, AnotherArchitecture) {
  set_config("architectures", nlohmann::json::array({"LLaDAMoEModelLM"}));
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "architectures", "LLaDAMoEModelLM"}, {"supported"}));
}

TEST_F(LladaBadInput, MaskTokenOutsideTheVocabulary) {
  set_config("mask_token_id", 126336);  // LLaDA-8B's id, in a vocabulary of 2048
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "mask_token_id", "126336", "2048"}, {"outside"}));
}

TEST_F(LladaBadInput, BlockLengthThatDoesNotDivideTheGeneration) {
  EXPECT_TRUE(one_line_error(generate({"--max-new-tokens", "16", "--block-length", "5"}), "generate",
                             {"block_length", "5", "16"}, {"divide"}));
}

TEST_F(LladaBadInput, StepsThatTheBlocksDoNotDivide) {
  EXPECT_TRUE(one_line_error(generate({"--max-new-tokens", "16", "--block-length", "4", "--steps", "6"}), "generate",
                             {"steps", "6", "4 blocks"}, {"multiple"}));
}

TEST_F(LladaBadInput, DreamSettingsAndUnknownRemasking) {
  EXPECT_TRUE(one_line_error(generate({"--alg", "entropy"}), "generate", {"alg"}, {"Dream"}));
  EXPECT_TRUE(one_line_error(generate({"--remasking", "lowest"}), "generate", {"remasking", "lowest"}, {"unknown"}));
}

// Fast-dLLM's settings: what its published loops do not have is refused, not ignored.
TEST_F(LladaBadInput, FastDllmSettingsOutOfRange) {
  for (const char* t : {"0", "1.5", "nan"})
    EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "dual-cache", "--threshold", t}), "generate", {"threshold", t},
                               {"outside"}))
        << t;
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "block"}), "generate", {"diffusion_mode", "block"}, {"block_length"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "block-cache", "--cfg-scale", "1.5"}), "generate",
                             {"cfg_scale", "1.5", "block-cache"}, {"no classifier-free guidance"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "dual-cache", "--refresh-every", "2"}), "generate",
                             {"refresh_every"}, {"Dream"}));
  EXPECT_TRUE(one_line_error(generate({"--diffusion-mode", "dual-cache", "--block-size", "4"}), "generate", {"block_size"},
                             {"Dream"}));
  EXPECT_TRUE(one_line_error(generate({"--threshold", "0.5", "--alg", "entropy"}), "generate", {"threshold", "entropy"},
                             {"needs"}));
  const auto ok = generate({"--max-new-tokens", "8", "--steps", "4", "--block-length", "4", "--diffusion-mode", "dual-cache",
                            "--threshold", "0.5"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

}  // namespace
}  // namespace sonde::test
