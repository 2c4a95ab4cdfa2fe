// Fast-dLLM v2's bad input: a bd_size that is not a positive integer, a mask token outside the
// vocabulary (given, or batch_sample's default 151665 when config.json names none), another
// architecture class, and generation settings batch_sample cannot run with (a sub-block not
// dividing the block, a block not dividing bd_size, a threshold outside (0, 1], a negative
// temperature, a top_p outside (0, 1], a top_k below 1, another loop's settings): exit 2 and one line naming the file or setting and the value. Each case starts from fresh
// `make-model --arch fast_dllm_v2 --preset tiny` output.
#include "checkpoint.h"
#include "expect.h"
#include "process.h"
#include "test_paths.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

class FastDllmV2BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = temp_dir() / "fdv2";
    make_tiny_model(model_, "fast_dllm_v2");
    cfg_ = model_ / "config.json";
  }
  void set_config(const char* key, const nlohmann::json& value) const {
    auto j = read_json(cfg_);
    j[key] = value;
    write_text(cfg_, j.dump(2));
  }
  void drop_config(const char* key) const {
    auto j = read_json(cfg_);
    j.erase(key);
    write_text(cfg_, j.dump(2));
  }
  Outcome forward() const {
    return run({"forward", "--model", model_.string(), "--ids", "1,2,3", "--out", (model_ / "o.h5").string()});
  }
  fs::path model_, cfg_;
};

TEST_F(FastDllmV2BadInput, ItRunsAForwardWhenNothingIsWrong) {
  const auto o = forward();
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

TEST_F(FastDllmV2BadInput, BlockSizeThatIsNotPositive) {
  set_config("bd_size", 0);
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "bd_size", "0"}, {"positive"}));
  set_config("bd_size", -32);
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "bd_size", "-32"}, {"positive"}));
  set_config("bd_size", "32");
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "bd_size", "\"32\""}, {"positive"}));
  drop_config("bd_size");
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "bd_size"}, {"missing"}));
}

TEST_F(FastDllmV2BadInput, MaskTokenOutsideTheVocabulary) {
  set_config("mask_token_id", 2048);
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "mask_token_id", "2048", "[0, 2048)"}, {"outside"}));
  drop_config("mask_token_id");  // the published config has none: batch_sample's 151665 is taken
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "mask_token_id", "151665", "default"}, {"outside"}));
}

TEST_F(FastDllmV2BadInput, AnotherArchitecture) {
  set_config("architectures", nlohmann::json::array({"Qwen2ForCausalLM"}));
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "architectures", "Qwen2ForCausalLM"}, {"supported"}));
}

// batch_sample's settings that cannot run: one line naming the setting and its value, exit 2.
TEST_F(FastDllmV2BadInput, GenerationSettingsThatCannotRun) {
  const auto gen = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"generate", "--model", model_.string(), "--ids", "1,2,3", "--json", "--max-new-tokens", "32"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  };
  EXPECT_TRUE(one_line_error(gen({"--small-block-size", "5"}), "generate", {"small_block_size", "5", "block_size 32"},
                             {"does not divide"}));
  EXPECT_TRUE(one_line_error(gen({"--block-size", "8", "--small-block-size", "16"}), "generate",
                             {"small_block_size", "16", "block_size 8"}, {"does not divide"}));
  EXPECT_TRUE(one_line_error(gen({"--threshold", "0"}), "generate", {"threshold", "0"}, {"outside (0, 1]"}));
  EXPECT_TRUE(one_line_error(gen({"--threshold", "1.5"}), "generate", {"threshold", "1.5"}, {"outside (0, 1]"}));
  EXPECT_TRUE(one_line_error(gen({"--small-block-size", "0"}), "generate", {"small_block_size", "0"}, {"less than 1"}));
  EXPECT_TRUE(one_line_error(gen({"--block-size", "24"}), "generate", {"block_size", "24", "bd_size 32"}, {"does not divide"}));
  EXPECT_TRUE(one_line_error(gen({"--block-size", "64"}), "generate", {"block_size", "64", "bd_size 32"}, {"does not divide"}));
  EXPECT_TRUE(one_line_error(gen({"--temperature", "-0.5"}), "generate", {"temperature", "-0.5"}, {"negative"}));
  EXPECT_TRUE(one_line_error(gen({"--temperature", "1", "--top-p", "0"}), "generate", {"top_p", "0"}, {"outside (0, 1]"}));
  EXPECT_TRUE(
      one_line_error(gen({"--temperature", "1", "--top-p", "1.5"}), "generate", {"top_p", "1.5"}, {"outside (0, 1]"}));
  EXPECT_TRUE(one_line_error(gen({"--temperature", "1", "--top-k", "0"}), "generate", {"top_k", "0"}, {"less than 1"}));
  EXPECT_TRUE(one_line_error(gen({"--eos-penalty", "3"}), "generate", {"eos_penalty"}, {"not a setting"}));
  EXPECT_TRUE(one_line_error(gen({"--steps", "4"}), "generate", {"steps"}, {"not a setting"}));
  EXPECT_TRUE(one_line_error(gen({"--diffusion-mode", "block"}), "generate", {"diffusion_mode"}, {"not a setting"}));
  const auto few = run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--json", "--max-new-tokens", "16"});
  EXPECT_TRUE(one_line_error(few, "generate", {"max_new_tokens", "16", "block_size 32"}, {"less than"}));
}

// The same settings are refused for a model that does not decode by block diffusion.
TEST(FastDllmV2BadInputOtherModels, SmallBlockSizeIsNotDreams) {
  const auto dream = temp_dir() / "dream";
  make_tiny_model(dream, "dream");
  const auto o = run({"generate", "--model", dream.string(), "--ids", "1,2,3", "--json", "--max-new-tokens", "8",
                      "--small-block-size", "4"});
  EXPECT_TRUE(one_line_error(o, "generate", {"small_block_size"}, {"Fast-dLLM v2"}));
}

// Sampling runs (it used to be refused): a seed gives one output.
TEST_F(FastDllmV2BadInput, ItSamplesWithATemperature) {
  const auto gen = [&] {
    return run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--json", "--max-new-tokens", "16",
                "--block-size", "8", "--small-block-size", "4", "--temperature", "2", "--top-p", "0.9", "--seed", "3"});
  };
  const auto a = gen(), b = gen();
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("completion_ids"), std::string::npos) << a.out;
  EXPECT_EQ(a.out, b.out);
}

// Nothing wrong: it generates, as many tokens as batch_sample's whole blocks give.
TEST_F(FastDllmV2BadInput, ItGeneratesWhenNothingIsWrong) {
  const auto o = run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--json", "--max-new-tokens", "32",
                      "--block-size", "16", "--small-block-size", "4", "--threshold", "0.5"});
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("completion_ids"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace sonde::test
