// TransformerLens names as aliases of sonde's hook points (docs/hooks.md), so that SAELens's
// hook_name resolves, and an SAE point's hook part resolving through them.
#include <sonde/hooks.h>

#include <gtest/gtest.h>

namespace {

TEST(TransformerLensAliases, NormsAndComponentHooksMapToCanonicalNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"blocks.3.ln1.hook_normalized", "blocks.3.ln1.hook_out"}, {"blocks.3.ln2.hook_normalized", "blocks.3.ln2.hook_out"},
      {"blocks.3.hook_mlp_in", "blocks.3.hook_resid_mid"},        {"blocks.3.hook_in", "blocks.3.hook_resid_pre"},
      {"blocks.3.hook_out", "blocks.3.hook_resid_post"},          {"blocks.3.attn.hook_in", "blocks.3.ln1.hook_out"},
      {"blocks.3.attn.hook_out", "blocks.3.hook_attn_out"},       {"blocks.3.mlp.hook_in", "blocks.3.ln2.hook_out"},
      {"blocks.3.mlp.hook_out", "blocks.3.hook_mlp_out"},         {"blocks.3.attn.q.hook_out", "blocks.3.attn.hook_q"},
      {"blocks.3.attn.o.hook_in", "blocks.3.attn.hook_z"},        {"embed.hook_out", "hook_embed"},
      {"ln_final.hook_in", "blocks.23.hook_resid_post"},          {"ln_final.hook_normalized", "ln_final.hook_out"},
      {"unembed.hook_out", "hook_logits"},
      {"model.layers.2.hook_sae_acts_post", "blocks.2.hook_resid_post.hook_sae_acts_post"},
      {"blocks.1.ln2.hook_normalized.hook_sae_error", "blocks.1.ln2.hook_out.hook_sae_error"},
  };
  for (const auto& [alias, canonical] : cases) EXPECT_EQ(sonde::canonical_hook_name(alias, 24), canonical) << alias;
  // Canonical names are left alone.
  for (const char* name : {"blocks.3.ln1.hook_out", "blocks.3.mlp.hook_post", "blocks.3.hook_resid_post.hook_sae_recons"})
    EXPECT_EQ(sonde::canonical_hook_name(name, 24), name);
}

}  // namespace
