// Fast-dLLM v2's bad input: a bd_size that is not a positive integer, a mask token outside the
// vocabulary (given, or batch_sample's default 151665 when config.json names none), another
// architecture class, and generation, which sonde does not run for block diffusion yet: exit 2
// and one line naming the file, the field and the value. Each case starts from fresh
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

// batch_sample is not a loop sonde runs yet: generation is refused, never run as Dream's.
TEST_F(FastDllmV2BadInput, GenerationIsRefusedNotRunAnotherWay) {
  const auto o = run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--json", "--max-new-tokens", "8"});
  EXPECT_TRUE(one_line_error(o, "generate", {"block diffusion"}, {"does not run", "not"}));
}

}  // namespace
}  // namespace sonde::test
