// Dream-family variants a loader meets (issue 33): what the dream plugin does not run is refused
// by what the checkpoint's files say, one line naming the file, the field and the value, exit 2,
// never a silent plain-Dream run. Each case starts from fresh `make-model --arch dream --preset
// tiny` output (vocabulary 2048: <|endoftext|> 2044 ... <|mask|> 2047) with one field changed.
#include "checkpoint.h"
#include "expect.h"
#include "process.h"
#include "test_paths.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

class DreamVariants : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = temp_dir() / "dream";
    make_tiny_model(model_, "dream");
  }
  void set(const char* file, const char* key, const nlohmann::json& value) const {
    auto j = read_json(model_ / file);
    j[key] = value;
    write_text(model_ / file, j.dump(2));
  }
  Outcome generate() const {
    return run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--max-new-tokens", "4", "--json", "--backend",
                "reference"});
  }
  fs::path model_;
};

TEST_F(DreamVariants, ThePublishedLayoutGenerates) {
  const auto o = generate();
  EXPECT_EQ(o.exit_code, 0) << o.describe();
}

TEST_F(DreamVariants, AnUnknownModelTypeNamesTheFileAndField) {
  set("config.json", "model_type", "sdar");  // SDAR, a block-diffusion family without a plugin
  EXPECT_TRUE(one_line_error(generate(), "generate", {(model_ / "config.json").string(), "model_type", "sdar"},
                             {"no model plugin"}));
}

TEST_F(DreamVariants, DreamOnsVariableLengthCanvasIsRefused) {
  set("generation_config.json", "expand_token_id", 2040);
  EXPECT_TRUE(one_line_error(generate(), "generate",
                             {(model_ / "generation_config.json").string(), "expand_token_id", "2040"}, {"DreamOn"}));
}

TEST_F(DreamVariants, DreamOnsDeleteTokenInConfigJsonIsRefused) {
  set("config.json", "delete_token_id", 2041);
  EXPECT_TRUE(one_line_error(generate(), "generate", {(model_ / "config.json").string(), "delete_token_id", "2041"},
                             {"DreamOn"}));
}

TEST_F(DreamVariants, AnotherArchitectureClassIsRefused) {
  set("config.json", "architectures", nlohmann::json::array({"DreamOnModel"}));
  EXPECT_TRUE(one_line_error(generate(), "generate", {(model_ / "config.json").string(), "architectures", "DreamOnModel"},
                             {"only DreamModel"}));
}

TEST_F(DreamVariants, AMaskTokenOutsideTheVocabularyIsRefused) {
  set("config.json", "mask_token_id", 2048);
  EXPECT_TRUE(one_line_error(generate(), "generate", {(model_ / "config.json").string(), "mask_token_id", "2048"},
                             {"outside the vocabulary"}));
}

}  // namespace
}  // namespace sonde::test
