// Dream-family variants a loader meets (issue 33): what the dream plugin does not run is refused
// by what the checkpoint's files say, one line naming the file, the field and the value, exit 2,
// never a silent plain-Dream run. Each case starts from fresh `make-model --arch dream --preset
// tiny` output (vocabulary 2048: <|endoftext|> 2044 ... <|mask|> 2047) with one field changed.
// DiffuCoder's and Dream-Coder's own files (`make-model --variant`) run with their published
// defaults, which the output file records; Dream-Coder's padding penalty is checked token for
// token against the float64 PyTorch reference (tests/reference/make_eos_penalty_goldens.py ->
// tests/data/eos-penalty-tiny-dream-f32.json).
#include "checkpoint.h"
#include "expect.h"
#include "h5_check.h"
#include "process.h"
#include "test_paths.h"

#include <gtest/gtest.h>
#include <sonde/model_dir.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

TEST_F(DreamVariants, ATokenizerThatPrependsABosIsRefused) {
  set("tokenizer_config.json", "add_bos_token", true);
  EXPECT_TRUE(one_line_error(generate(), "generate", {(model_ / "tokenizer_config.json").string(), "add_bos_token", "true"},
                             {"never prepends"}));
}

TEST_F(DreamVariants, ANegativeEosPenaltyInGenerationConfigIsRefused) {
  set("generation_config.json", "eos_penalty", -1.5);
  EXPECT_TRUE(one_line_error(generate(), "generate", {(model_ / "generation_config.json").string(), "eos_penalty", "-1.5"},
                             {">= 0"}));
}

TEST_F(DreamVariants, TheEosPenaltyOutsideExactModeIsRefused) {
  const auto o = run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--max-new-tokens", "8", "--backend",
                      "reference", "--eos-penalty", "3", "--diffusion-mode", "block", "--block-size", "4"});
  EXPECT_TRUE(one_line_error(o, "generate", {"eos_penalty", "3", "block"}, {"exact mode"}));
}

TEST(DreamVariantFiles, AnUnknownVariantIsRefused) {
  const auto out = temp_dir() / "m";
  EXPECT_TRUE(one_line_error(run({"make-model", "--arch", "dream", "--variant", "dreamon", "--out", out.string()}),
                             "make-model", {"--variant", "dreamon"}, {"unknown variant"}));
  EXPECT_TRUE(one_line_error(run({"make-model", "--arch", "qwen2", "--variant", "diffucoder", "--out", out.string()}),
                             "make-model", {"--variant", "diffucoder", "qwen2"}, {"needs --arch dream"}));
}

// make-model --variant NAME, then one generation written to a file: the decoding it records.
class VariantRun : public ::testing::Test {
 protected:
  void make(const std::string& variant) {
    model_ = temp_dir() / variant;
    const auto o = run({"make-model", "--arch", "dream", "--variant", variant, "--preset", "tiny", "--out", model_.string()});
    ASSERT_EQ(o.exit_code, 0) << o.describe();
  }
  nlohmann::json decoding(const std::vector<std::string>& extra = {}) const {
    const auto file = model_.parent_path() / "out.h5";
    std::vector<std::string> a{"generate", "--model", model_.string(), "--ids", "1,2,3", "--max-new-tokens", "4",
                               "--backend", "reference", "--out", file.string(), "--hooks", "hook_embed", "--overwrite"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto o = run(a);
    if (o.exit_code != 0) ADD_FAILURE() << o.describe();
    const auto cfg = string_attr(file, "run_config_json");
    if (!cfg) ADD_FAILURE() << "no run_config_json in " << file;
    return cfg ? nlohmann::json::parse(*cfg).at("decoding").at(0) : nlohmann::json{};
  }
  std::filesystem::path model_;
};

TEST_F(VariantRun, DiffuCoderHasItsPadTokenAndRunsItsCardsSampling) {
  make("diffucoder");
  EXPECT_EQ(read_json(model_ / "tokenizer_config.json")["pad_token"], "<|dlm_pad|>");
  bool has_pad = false;  // the added token, just below make-model's four specials (2044..2047)
  const auto tokenizer = read_json(model_ / "tokenizer.json");
  for (const auto& t : tokenizer["added_tokens"])
    has_pad = has_pad || (t["content"] == "<|dlm_pad|>" && t["id"] == 2043);
  EXPECT_TRUE(has_pad);
  const auto d = decoding();
  EXPECT_EQ(d["alg"], "entropy");
  EXPECT_DOUBLE_EQ(d.value("temperature", 0.0), 0.4);
  EXPECT_DOUBLE_EQ(d.value("top_p", 0.0), 0.95);
  EXPECT_FALSE(d.contains("eos_penalty"));
  // A flag still wins over the file.
  const auto greedy = decoding({"--temperature", "0"});
  EXPECT_FALSE(greedy.contains("temperature"));
}

TEST_F(VariantRun, DreamCoderHasItsBosAndRunsItsReadmesSamplingWithThePaddingPenalty) {
  make("dream-coder");
  EXPECT_EQ(read_json(model_ / "config.json")["bos_token_id"], 2043);
  EXPECT_EQ(read_json(model_ / "config.json")["pad_token_id"], 2044);
  EXPECT_EQ(read_json(model_ / "tokenizer_config.json")["bos_token"], "<|beginoftext|>");
  EXPECT_EQ(read_json(model_ / "tokenizer_config.json")["add_bos_token"], false);
  const auto d = decoding();
  EXPECT_DOUBLE_EQ(d.value("temperature", 0.0), 0.1);
  EXPECT_DOUBLE_EQ(d.value("top_p", 0.0), 1.0);
  EXPECT_DOUBLE_EQ(d.value("eos_penalty", 0.0), 3.0);
  EXPECT_FALSE(decoding({"--eos-penalty", "0"}).contains("eos_penalty"));
}

TEST_F(VariantRun, DreamCoderEncodesPromptsWithoutItsBos) {
  make("dream-coder");
  const auto o = run({"generate", "--model", model_.string(), "--prompt", "ab", "--max-new-tokens", "2", "--backend",
                      "reference", "--json"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  const auto j = nlohmann::json::parse(lines_of(o.out).at(0));
  ASSERT_TRUE(j.contains("prompt_ids")) << j.dump();
  ASSERT_FALSE(j["prompt_ids"].empty());
  for (const auto& id : j["prompt_ids"]) EXPECT_NE(id, 2043) << j.dump();
}

// Dream-Coder's padding penalty against the PyTorch reference: config.json's pad_token_id set to
// the case's token, greedy entropy, the same tokens with the penalty and without it, and the
// penalty taken from generation_config.json as from the flag.
class EosPenaltyGolden : public ::testing::Test {
 protected:
  static const nlohmann::json& golden() {
    static const nlohmann::json g = read_json(data_dir() / "eos-penalty-tiny-dream-f32.json");
    return g;
  }
  static std::vector<std::int64_t> tokens(const std::filesystem::path& model, const nlohmann::json& c,
                                          std::vector<std::string> extra) {
    std::string ids;
    for (const auto& t : c["prompt"]) ids += (ids.empty() ? "" : ",") + std::to_string(t.get<int>());
    std::vector<std::string> a{"generate", "--model", model.string(), "--ids", ids, "--backend", "reference", "--json",
                               "--temperature", "0", "--alg", "entropy", "--steps", std::to_string(c["steps"].get<int>()),
                               "--max-new-tokens", std::to_string(c["max_new_tokens"].get<int>())};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto o = run(a);
    if (o.exit_code != 0) ADD_FAILURE() << o.describe();
    return o.exit_code == 0 ? nlohmann::json::parse(lines_of(o.out).at(0))["completion_ids"].get<std::vector<std::int64_t>>()
                            : std::vector<std::int64_t>{};
  }
};

TEST_F(EosPenaltyGolden, MatchesPyTorchReference) {
  const auto model = temp_dir() / "dream-coder";
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : golden()["make_model"]) mm.push_back(a.get<std::string>());
  mm.insert(mm.end(), {"--out", model.string()});
  ASSERT_EQ(run(mm).exit_code, 0);
  ASSERT_EQ(sha256_file(model / "model.safetensors"), golden()["model_sha256"].get<std::string>())
      << "make-model no longer gives the goldens' checkpoint: rerun tests/reference/make_eos_penalty_goldens.py";
  for (const auto& c : golden()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto cfg = read_json(model / "config.json");
    cfg["pad_token_id"] = c["pad_token_id"];
    write_text(model / "config.json", cfg.dump(2));
    const auto plain = c["tokens_plain"].get<std::vector<std::int64_t>>();
    const auto penalized = c["tokens_penalized"].get<std::vector<std::int64_t>>();
    ASSERT_NE(plain, penalized);  // the case pins the penalty
    const std::string penalty = std::to_string(c["eos_penalty"].get<double>());
    EXPECT_EQ(tokens(model, c, {"--eos-penalty", "0"}), plain);
    EXPECT_EQ(tokens(model, c, {"--eos-penalty", penalty}), penalized);
    auto gen = read_json(model / "generation_config.json");  // the variant's file: eos_penalty 3.0
    gen["eos_penalty"] = c["eos_penalty"];
    write_text(model / "generation_config.json", gen.dump(2));
    EXPECT_EQ(tokens(model, c, {}), penalized);
  }
}

}  // namespace
}  // namespace sonde::test
