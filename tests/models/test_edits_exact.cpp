// Exact properties of edits, on every backend, through the sonde program: an add with scale 0
// and a patch of a run with its own activations change no bit; an edit at a layer leaves every
// hook before it bit-identical; a batch of prompts of different lengths gets each prompt's own
// steered result; a diffusion edit limited to later steps leaves the earlier steps' canvases as
// they were. The checkpoint and the vectors are those of tests/data/edits-tiny-*.h5.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

fs::path golden(const std::string& name) { return data_dir() / (name + ".h5"); }

fs::path model_of(const std::string& name, const fs::path& dir) {
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(golden(name), "edits_make_model_args"))) mm.push_back(a.get<std::string>());
  mm.insert(mm.end(), {"--out", (dir / "model").string()});
  const auto r = run_sonde(mm);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir / "model";
}

bool same_bits(const Array& a, const Array& b) { return a.shape == b.shape && a.values == b.values; }

class EditsExact : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = temp_dir();
    model_ = model_of("edits-tiny-qwen2-f32", dir_);
    v_ = golden("edits-tiny-qwen2-f32").string() + ":/inputs/v";
  }
  fs::path forward(const std::string& name, std::vector<std::string> extra, const std::string& hooks,
                   const std::string& ids = "5,17,301,44,9,1020,3") {
    const auto out = dir_ / (name + ".h5");
    std::vector<std::string> args{"forward", "--model", model_.string(), "--backend", GetParam(), "--ids", ids,
                                  "--hooks", hooks, "--out", out.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_sonde(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }
  fs::path edits_file(const nlohmann::json& edits) {
    const auto p = dir_ / ("edits" + std::to_string(++files_) + ".json");
    std::ofstream(p) << nlohmann::json{{"edits", edits}}.dump();
    return p;
  }
  fs::path dir_, model_;
  std::string v_;
  int files_ = 0;
};

const char* kAllResid = "blocks.*.hook_resid_post,blocks.*.attn.hook_z,blocks.*.mlp.hook_post";

TEST_P(EditsExact, AddWithScaleZeroChangesNoBit) {
  const auto base = forward("base", {}, kAllResid);
  const auto zero = forward("zero", {"--steer", "blocks.0.hook_resid_post=" + v_ + "*0"}, kAllResid);
  EXPECT_TRUE(same_bits(read_dataset(zero, "logits"), read_dataset(base, "logits")));
  for (const char* h : {"blocks.0.hook_resid_post", "blocks.1.hook_resid_post", "blocks.1.attn.hook_z", "blocks.1.mlp.hook_post"})
    EXPECT_TRUE(same_bits(read_dataset(zero, std::string("acts/") + h), read_dataset(base, std::string("acts/") + h))) << h;
  // ... while scale 1 does change them (the edit is really there).
  const auto one = forward("one", {"--steer", "blocks.0.hook_resid_post=" + v_ + "*1"}, kAllResid);
  EXPECT_FALSE(same_bits(read_dataset(one, "logits"), read_dataset(base, "logits")));
}

TEST_P(EditsExact, AnEditAtALayerLeavesEveryEarlierHookBitIdentical) {
  const std::string hooks = "blocks.0.*,blocks.1.hook_resid_pre,blocks.1.ln1.hook_out,blocks.1.attn.hook_z,blocks.1.hook_attn_out,"
                            "blocks.1.hook_resid_mid,blocks.1.hook_resid_post";
  const auto base = forward("base", {}, hooks);
  const auto edited = forward("edited", {"--edits", edits_file({{{"hook", "blocks.1.hook_resid_mid"}, {"op", "add"},
                                                                {"vector", v_}, {"scale", 3}}}).string()}, hooks);
  std::vector<std::string> before{"blocks.0.hook_resid_pre", "blocks.0.attn.hook_q", "blocks.0.attn.hook_z",
                                  "blocks.0.hook_resid_mid", "blocks.0.mlp.hook_post", "blocks.0.hook_resid_post",
                                  "blocks.1.hook_resid_pre", "blocks.1.ln1.hook_out", "blocks.1.attn.hook_z",
                                  "blocks.1.hook_attn_out"};
  for (const auto& h : before) EXPECT_TRUE(same_bits(read_dataset(edited, "acts/" + h), read_dataset(base, "acts/" + h))) << h;
  for (const char* h : {"blocks.1.hook_resid_mid", "blocks.1.hook_resid_post"})
    EXPECT_FALSE(same_bits(read_dataset(edited, std::string("acts/") + h), read_dataset(base, std::string("acts/") + h))) << h;
}

TEST_P(EditsExact, PatchingARunWithItsOwnActivationsChangesNoBit) {
  const auto src = forward("src", {}, "blocks.0.hook_resid_post,blocks.1.attn.hook_z");
  const auto patched = forward("patched", {"--edits", edits_file({{{"hook", "blocks.0.hook_resid_post"}, {"op", "patch"}, {"source", src.string()}},
                                                                  {{"hook", "blocks.1.attn.hook_z"}, {"op", "patch"}, {"source", src.string()}, {"heads", {0, 3}}}}).string()},
                               "blocks.1.hook_resid_post");
  const auto base = forward("base", {}, "blocks.1.hook_resid_post");
  EXPECT_TRUE(same_bits(read_dataset(patched, "logits"), read_dataset(base, "logits")));
  EXPECT_TRUE(same_bits(read_dataset(patched, "acts/blocks.1.hook_resid_post"), read_dataset(base, "acts/blocks.1.hook_resid_post")));
}

std::vector<std::vector<std::int64_t>> completions(const std::vector<std::string>& args) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& j : generate_json(args)) out.push_back(j["completion_ids"].get<std::vector<std::int64_t>>());
  return out;
}

// A left-padded batch: each row's positions count from its own first token, so an edit at
// position 1 and a steering vector give each prompt what it gets alone; a self-patch of a
// generation (prompt and generated rows, through the KV cache) gives the same tokens.
TEST_P(EditsExact, ABatchOfMixedLengthsGivesEachPromptItsOwnEditedResult) {
  const auto e = edits_file({{{"hook", "blocks.0.hook_resid_post"}, {"op", "add"}, {"vector", v_}, {"scale", 4}},
                             {{"hook", "blocks.1.hook_resid_mid"}, {"op", "scale"}, {"factor", 0.25}, {"positions", {1}}}});
  int runs = 0;
  // Completions, and the captured blocks.1.hook_resid_post rows of each prompt.
  const auto gen = [&](std::vector<std::string> ids, bool edited) {
    const auto out = dir_ / ("g" + std::to_string(++runs) + ".h5");
    std::vector<std::string> args{"--model", model_.string(), "--backend", GetParam(), "--max-new-tokens", "6",
                                  "--json", "--hooks", "blocks.1.hook_resid_post", "--out", out.string()};
    for (const auto& i : ids) args.insert(args.end(), {"--ids", i});
    if (edited) args.insert(args.end(), {"--edits", e.string()});
    const auto tokens = completions(args);
    const Array acts = read_dataset(out, "acts/blocks.1.hook_resid_post");
    const auto start = as_ints(read_dataset(out, "prompts/row_start")), count = as_ints(read_dataset(out, "prompts/row_count"));
    std::vector<Array> rows;
    for (std::size_t p = 0; p < start.size(); ++p) {
      Array r;
      r.shape = {count[p], acts.shape[1]};
      r.values.assign(acts.values.begin() + start[p] * acts.shape[1], acts.values.begin() + (start[p] + count[p]) * acts.shape[1]);
      rows.push_back(r);
    }
    return std::make_pair(tokens, rows);
  };
  const std::string p0 = "5,17,301,44,9,1020,3", p1 = "88,7";
  const auto [b_tokens, b_rows] = gen({p0, p1}, true);
  ASSERT_EQ(b_tokens.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const auto [tokens, rows] = gen({i == 0 ? p0 : p1}, true);
    EXPECT_EQ(b_tokens[i], tokens.at(0)) << "prompt " << i;
    EXPECT_LE(normalised_error(b_rows.at(i), rows.at(0)), 1e-5) << "prompt " << i;
    const auto [plain_tokens, plain_rows] = gen({i == 0 ? p0 : p1}, false);
    EXPECT_GT(normalised_error(plain_rows.at(0), rows.at(0)), 1e-2) << "the edits change nothing; the test shows nothing";
  }
}

TEST_P(EditsExact, SelfPatchOfAGenerationKeepsItsTokens) {
  const auto src = dir_ / "gen.h5";
  const std::vector<std::string> base{"--model", model_.string(), "--backend", GetParam(), "--max-new-tokens", "6",
                                      "--json", "--ids", "5,17,301,44", "--ids", "88,7"};
  auto capture = base;
  capture.insert(capture.end(), {"--hooks", "blocks.0.hook_resid_post,blocks.1.hook_resid_post", "--out", src.string()});
  const auto want = completions(capture);
  auto patched = base;
  const auto out = dir_ / "patched.h5";
  patched.insert(patched.end(), {"--hooks", "blocks.1.hook_resid_post", "--out", out.string(), "--edits",
                                 edits_file({{{"hook", "blocks.0.hook_resid_post"}, {"op", "patch"}, {"source", src.string()}}}).string()});
  EXPECT_EQ(completions(patched), want);
  EXPECT_TRUE(same_bits(read_dataset(out, "acts/blocks.1.hook_resid_post"), read_dataset(src, "acts/blocks.1.hook_resid_post")));
  // A patch from another prompt's rows does change them (the patch is really applied).
  auto other = dir_ / "other.h5";
  auto other_run = std::vector<std::string>{"--model", model_.string(), "--backend", GetParam(), "--max-new-tokens", "6",
                                            "--json", "--ids", "1900,1200,3,3", "--ids", "1,1", "--hooks", "blocks.0.hook_resid_post",
                                            "--out", other.string()};
  completions(other_run);
  auto cross = base;
  cross.insert(cross.end(), {"--edits", edits_file({{{"hook", "blocks.0.hook_resid_post"}, {"op", "patch"}, {"source", other.string()}}}).string()});
  EXPECT_NE(completions(cross), want);
}

// Mean ablation from a statistics file: the hook's rows become the mean --stats recorded.
TEST_P(EditsExact, MeanFromAStatsFileReplacesTheRows) {
  const auto stats = dir_ / "stats.h5";
  forward("with_stats", {"--stats", stats.string()}, "blocks.0.hook_attn_out");
  const auto out = forward("mean", {"--edits", edits_file({{{"hook", "blocks.0.hook_attn_out"}, {"op", "mean"}, {"stats", stats.string()},
                                                           {"positions", {0, 2}}}}).string()},
                           "blocks.0.hook_attn_out,blocks.0.hook_attn_out.pre_edit", "9,9,9,9");
  const Array mean = read_dataset(stats, "stats/blocks.0.hook_attn_out/mean");
  const Array rows = read_dataset(out, "acts/blocks.0.hook_attn_out"), pre = read_dataset(out, "acts/blocks.0.hook_attn_out.pre_edit");
  const auto H = static_cast<std::size_t>(mean.values.size());
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t j = 0; j < H; ++j) {
      const double want = t == 0 || t == 2 ? static_cast<double>(static_cast<float>(mean.values[j])) : pre.values[t * H + j];
      ASSERT_EQ(rows.values[t * H + j], want) << "slot " << t << " feature " << j;
    }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, EditsExact, ::testing::ValuesIn(built_backends()), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

// Dream: an edit at steps 3-5 of 8 leaves the canvases after steps 0-2 exactly as without it
// and changes a later one.
TEST(EditsExactDiffusion, StepsBeforeAnEditsFirstStepAreUntouched) {
  const auto dir = temp_dir();
  const auto model = model_of("edits-tiny-dream-f32", dir);
  const auto e = dir / "e.json";
  std::ofstream(e) << nlohmann::json{{"edits", {{{"hook", "blocks.0.hook_resid_post"}, {"op", "add"}, {"scale", 30},
                                                 {"vector", golden("edits-tiny-dream-f32").string() + ":/inputs/v"},
                                                 {"steps", "3-5"}, {"positions", "generated"}}}}}.dump();
  const std::vector<std::string> base{"--model", model.string(), "--ids", "5,17,301", "--max-new-tokens", "8",
                                      "--steps", "8", "--json", "--history"};
  auto edited = base;
  edited.insert(edited.end(), {"--edits", e.string()});
  const auto a = generate_json(base).at(0)["history"], b = generate_json(edited).at(0)["history"];
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(a[s], b[s]) << "step " << s;
  EXPECT_NE(a[7], b[7]) << "the edit changed nothing; the test shows nothing";
}

}  // namespace
}  // namespace sonde::test
