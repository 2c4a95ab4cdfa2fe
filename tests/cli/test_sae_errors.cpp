// Bad SAEs (--sae) on forward, generate and batch: each is one line naming the file, the field
// and the value, exit 2, and no output file is written. The SAE is tests/data/sae/standard_flat
// (d_in 64, the tiny preset's hidden size), copied and broken one field at a time.
#include "expect.h"
#include "process.h"
#include "test_paths.h"
#include "tiny_model_suite.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

class SaeErrors : public TinyModelSuite {
 protected:
  // A copy of the test SAE with cfg.json changed by `change`.
  std::string sae(const std::function<void(nlohmann::json&)>& change) {
    const auto d = dir_ / "sae";
    fs::create_directories(d);
    fs::copy_file(data_dir() / "sae" / "standard_flat" / "sae_weights.safetensors", d / "sae_weights.safetensors",
                  fs::copy_options::overwrite_existing);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(data_dir() / "sae" / "standard_flat" / "cfg.json"));
    change(cfg);
    std::ofstream(d / "cfg.json") << cfg.dump();
    return d.string();
  }
  Outcome forward(std::vector<std::string> extra) {
    std::vector<std::string> a{"forward", "--model", model_.string(), "--ids", "1,2,3", "--out", out().string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  }
  fs::path out() const { return dir_ / "out.h5"; }
};

TEST_F(SaeErrors, AHookTheModelLacks) {
  const auto d = sae([](auto& c) { c["hook_name"] = "blocks.9.hook_resid_post"; });
  EXPECT_TRUE(one_line_error(forward({"--sae", d}), "forward", {"cfg.json", "hook_name", "blocks.9.hook_resid_post"},
                             {"no such hook"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(SaeErrors, MissingOrMistypedFields) {
  EXPECT_TRUE(one_line_error(forward({"--sae", sae([](auto& c) { c.erase("d_sae"); })}), "forward", {"cfg.json", "d_sae"},
                             {"missing"}));
  EXPECT_TRUE(one_line_error(forward({"--sae", sae([](auto& c) { c["d_in"] = "64"; })}), "forward", {"cfg.json", "d_in", "\"64\""},
                             {"positive integer"}));
  EXPECT_TRUE(one_line_error(forward({"--sae", sae([](auto& c) { c["architecture"] = "crosscoder"; })}), "forward",
                             {"architecture", "crosscoder"}, {"not one of"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(SaeErrors, WeightsOfTheWrongShape) {
  const auto d = sae([](auto& c) { c["d_in"] = 32; });
  EXPECT_TRUE(one_line_error(forward({"--sae", d}), "forward", {"sae_weights.safetensors", "W_enc", "[64, 96]", "[32, 96]"},
                             {"shape"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(SaeErrors, ADimensionThatIsNotTheHooks) {
  // mlp.hook_post has rows of 128 (the tiny preset's intermediate size), the SAE reads 64.
  const auto d = sae([](auto& c) { c["hook_name"] = "blocks.0.mlp.hook_post"; });
  EXPECT_TRUE(one_line_error(forward({"--sae", d}), "forward", {"d_in", "64", "blocks.0.mlp.hook_post", "128"}, {"rows of"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(SaeErrors, FlagsThatNeedEachOther) {
  EXPECT_TRUE(one_line_error(forward({"--sae-splice"}), "forward", {"--sae"}, {"need"}));
  EXPECT_TRUE(one_line_error(forward({"--sae", sae([](auto&) {}), "--sae-error-term"}), "forward", {"--sae-splice"}, {"needs"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(SaeErrors, GenerateAndBatchRefuseToo) {
  const auto d = sae([](auto& c) { c["hook_name"] = "blocks.0.hook_resid_psot"; });
  EXPECT_TRUE(one_line_error(run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--max-new-tokens", "2", "--sae", d,
                                  "--hooks", "hook_embed", "--out", out().string()}),
                             "generate", {"hook_name", "blocks.0.hook_resid_psot", "blocks.0.hook_resid_post"}, {"no such hook"}));
  std::ofstream(dir_ / "in.jsonl") << "{\"id\": \"a\", \"ids\": [1, 2]}\n";
  EXPECT_TRUE(one_line_error(run({"batch", "--model", model_.string(), "--input", (dir_ / "in.jsonl").string(), "--output",
                                  (dir_ / "r.jsonl").string(), "--sae", d, "--max-new-tokens", "2"}),
                             "batch", {"hook_name", "blocks.0.hook_resid_psot"}, {"no such hook"}));
  EXPECT_FALSE(fs::exists(out()));
  EXPECT_FALSE(fs::exists(dir_ / "r.jsonl"));
}

}  // namespace
}  // namespace sonde::test
