// Hook aliases and selection (design §4).
#include <sonde/error.h>
#include <sonde/hooks.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<sonde::HookPoint> two_layer_hooks() {
  std::vector<sonde::HookPoint> h{{"hook_embed", {8}}};
  for (int i = 0; i < 2; ++i)
    for (const char* n : {"hook_resid_pre", "ln1.hook_out", "attn.hook_q", "hook_mlp_out", "hook_resid_post"})
      h.push_back({"blocks." + std::to_string(i) + "." + n, {8}});
  h.push_back({"ln_final.hook_out", {8}});
  h.push_back({"hook_logits", {32}});
  return h;
}

std::vector<std::string> names(const std::vector<sonde::HookPoint>& h) {
  std::vector<std::string> n;
  for (const auto& x : h) n.push_back(x.name);
  return n;
}

TEST(HookAliases, HiddenStatesFollowHuggingFace) {
  // L = 4: hidden_states[0] is the embedding, [k] for 1 <= k < L is layer k-1's output, [L] is
  // the final norm of the last layer (model-spec §0.3).
  EXPECT_EQ(sonde::canonical_hook_name("hidden_states.0", 4), "hook_embed");
  EXPECT_EQ(sonde::canonical_hook_name("hidden_states.1", 4), "blocks.0.hook_resid_post");
  EXPECT_EQ(sonde::canonical_hook_name("hidden_states[3]", 4), "blocks.2.hook_resid_post");
  EXPECT_EQ(sonde::canonical_hook_name("hidden_states.4", 4), "ln_final.hook_out");
  EXPECT_THROW(sonde::canonical_hook_name("hidden_states.5", 4), sonde::Error);
}

TEST(HookAliases, HuggingFaceModulePaths) {
  EXPECT_EQ(sonde::canonical_hook_name("model.layers.7", 24), "blocks.7.hook_resid_post");
  EXPECT_EQ(sonde::canonical_hook_name("model.layers.7.mlp", 24), "blocks.7.hook_mlp_out");
  EXPECT_EQ(sonde::canonical_hook_name("model.layers.7.mlp.gate_proj", 24), "blocks.7.mlp.hook_pre");
  EXPECT_EQ(sonde::canonical_hook_name("model.layers.7.mlp.up_proj", 24), "blocks.7.mlp.hook_pre_linear");
  EXPECT_EQ(sonde::canonical_hook_name("model.layers.7.self_attn", 24), "blocks.7.hook_attn_out");
  EXPECT_EQ(sonde::canonical_hook_name("model.layers.7.self_attn.k_proj", 24), "blocks.7.attn.hook_k");
  EXPECT_EQ(sonde::canonical_hook_name("model.layers.0.input_layernorm", 24), "blocks.0.ln1.hook_out");
  EXPECT_EQ(sonde::canonical_hook_name("model.embed_tokens", 24), "hook_embed");
  EXPECT_EQ(sonde::canonical_hook_name("model.norm", 24), "ln_final.hook_out");
  EXPECT_EQ(sonde::canonical_hook_name("lm_head", 24), "hook_logits");
}

TEST(HookAliases, LlamaCppTags) {
  EXPECT_EQ(sonde::canonical_hook_name("l_out-3", 24), "blocks.3.hook_resid_post");
  EXPECT_EQ(sonde::canonical_hook_name("attn_norm-3", 24), "blocks.3.ln1.hook_out");
  EXPECT_EQ(sonde::canonical_hook_name("ffn_out-12", 24), "blocks.12.hook_mlp_out");
  EXPECT_EQ(sonde::canonical_hook_name("result_norm", 24), "ln_final.hook_out");
}

TEST(HookAliases, CanonicalNamesPassThrough) {
  EXPECT_EQ(sonde::canonical_hook_name("blocks.3.attn.hook_z", 24), "blocks.3.attn.hook_z");
}

TEST(HookSelector, GlobsRangesAndAliasesInModelOrder) {
  const auto hooks = two_layer_hooks();
  EXPECT_THAT(names(sonde::HookSelector::parse("blocks.*.hook_resid_post").resolve(hooks, 2)),
              ElementsAre("blocks.0.hook_resid_post", "blocks.1.hook_resid_post"));
  EXPECT_THAT(names(sonde::HookSelector::parse("ln_final.hook_out, blocks.1-1.hook_mlp_out , hook_embed").resolve(hooks, 2)),
              ElementsAre("hook_embed", "blocks.1.hook_mlp_out", "ln_final.hook_out"));
  EXPECT_THAT(names(sonde::HookSelector::parse("model.layers.0,hidden_states.0").resolve(hooks, 2)),
              ElementsAre("hook_embed", "blocks.0.hook_resid_post"));
  EXPECT_THAT(names(sonde::HookSelector::parse("blocks.0.attn.hook_?").resolve(hooks, 2)), ElementsAre("blocks.0.attn.hook_q"));
  EXPECT_TRUE(sonde::HookSelector::parse("").resolve(hooks, 2).empty());
  // Selecting the same point twice gives it once.
  EXPECT_EQ(sonde::HookSelector::parse("hook_embed,hidden_states.0").resolve(hooks, 2).size(), 1u);
}

TEST(HookSelector, UnknownNameSuggestsTheClosest) {
  try {
    sonde::HookSelector::parse("blocks.0.hook_resid_pots").resolve(two_layer_hooks(), 2);
    FAIL() << "expected an error";
  } catch (const sonde::Error& e) {
    EXPECT_EQ(e.kind(), sonde::ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr("'blocks.0.hook_resid_pots' matches no hook point"));
    EXPECT_THAT(e.what(), HasSubstr("did you mean: blocks.0.hook_resid_post"));
  }
}

TEST(HookSelector, RangePastTheLastLayerIsAnError) {
  EXPECT_THROW(sonde::HookSelector::parse("blocks.0-5.hook_mlp_out").resolve(two_layer_hooks(), 2), sonde::Error);
  EXPECT_THROW(sonde::HookSelector::parse("blocks.1-0.hook_mlp_out").resolve(two_layer_hooks(), 2), sonde::Error);
}

TEST(ClosestNames, OrdersByEditDistance) {
  EXPECT_THAT(sonde::closest_names("cat", {"dog", "cart", "cat", "bat"}, 2), ElementsAre("cat", "cart"));
}

}  // namespace
