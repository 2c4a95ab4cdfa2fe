// The capture engine (capture.h) against our own float64 PyTorch goldens (tests/data) on make-model
// checkpoints, so that a fresh clone checks it without ../shared (test_capture_golden.cpp adds
// the shared checkpoints and Dream's golden histories on top): prompt rows of a mixed-length batch
// against the golden per-layer outputs, generated rows against an unpadded, uncached forward over
// prompt + the golden greedy tokens, and no hooks giving no rows and the same tokens.
#include <sonde/capture.h>
#include <sonde/session_decode.h>

#include <gtest/gtest.h>

#include "h5_read.h"
#include "made_models.h"
#include "test_paths.h"

#include <map>

namespace sonde::test {
namespace {

constexpr double kOwnTol = 1e-4;

std::vector<std::int32_t> own_ids_of(const Array& a) { return {a.values.begin(), a.values.end()}; }

std::unique_ptr<Session> open_made(const std::string& preset, int seed) {
  return Session::open(SessionOptions{made_model("qwen2", preset, seed).string(), "", 1, plugin_root().string()});
}

CaptureSpec own_spec_for(Session& s, PositionPolicy p, const std::vector<std::string>& names) {
  CaptureSpec spec;
  for (const auto& h : s.hook_points())
    if (std::find(names.begin(), names.end(), h.name) != names.end()) spec.hooks.push_back(h);
  EXPECT_EQ(spec.hooks.size(), names.size());
  spec.positions = p;
  return spec;
}

Array own_rows_of(const CapturedPrompt& c, const std::string& hook, std::int64_t first, std::int64_t n, std::int64_t H) {
  const auto& v = c.acts.at(hook);
  Array a;
  a.shape = {n, H};
  a.values.assign(v.begin() + first * H, v.begin() + (first + n) * H);
  return a;
}

Array own_row_at(const Array& a, std::int64_t i) {
  Array r = a.at(i);
  r.shape = {1, a.shape.back()};
  return r;
}

// small-qwen2-f32.h5: `make-model --arch qwen2 --preset small --seed 11`: 4 layers, hidden 256.
TEST(CaptureOwn, QwenPromptRowsEqualGoldenLayersInAMixedLengthBatch) {
  constexpr std::int64_t H = 256, L = 4;
  const auto golden = data_dir() / "small-qwen2-f32.h5";
  auto s = open_made("small", 11);
  const std::vector<std::string> groups{"p7", "p23"};
  const std::vector<std::string> hooks{"hook_embed", "blocks.0.hook_resid_post", "blocks.3.hook_resid_post",
                                       "ln_final.hook_out"};
  auto golden_hook = [&](const std::string& g, const std::string& hook) {
    const std::string p = "forward/" + g + "/";
    if (hook == "hook_embed") return read_dataset(golden, p + "hidden_states").at(0);
    if (hook == "ln_final.hook_out") return read_dataset(golden, p + "hidden_states").at(L);
    return read_dataset(golden, p + "resid_post").at(std::stoll(hook.substr(7, 1)));
  };
  std::vector<std::vector<std::int32_t>> prompts;
  for (const auto& g : groups) prompts.push_back(own_ids_of(read_dataset(golden, "forward/" + g + "/input_ids")));
  for (auto policy : {PositionPolicy::All, PositionPolicy::Prompt, PositionPolicy::Last}) {
    SCOPED_TRACE(position_policy_name(policy));
    SessionDecodeForward fwd(*s);
    ArOptions o;
    o.max_new_tokens = 3;
    const auto res = generate_autoregressive_captured(fwd, prompts, o, own_spec_for(*s, policy, hooks), {10, 11});
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const auto T = static_cast<std::int64_t>(prompts[r].size());
      const auto& c = res.captured[r];
      const std::int64_t first_pos = policy == PositionPolicy::Last ? T - 1 : 0;
      const std::int64_t n = T - first_pos;
      ASSERT_EQ(static_cast<std::int64_t>(c.rows.size()), n + (policy == PositionPolicy::All ? 3 : 0));
      for (std::int64_t i = 0; i < n; ++i) {
        const auto& row = c.rows[static_cast<std::size_t>(i)];
        EXPECT_EQ(row.prompt_idx, 10 + static_cast<std::int64_t>(r));
        EXPECT_EQ(row.pos, first_pos + i);
        EXPECT_EQ(row.token_id, prompts[r][static_cast<std::size_t>(first_pos + i)]);
        EXPECT_EQ(row.kind, RowKind::Prompt);
      }
      for (const auto& h : hooks) {
        Array want = golden_hook(groups[r], h);
        if (policy == PositionPolicy::Last) want = own_row_at(want, T - 1);
        EXPECT_LE(normalised_error(own_rows_of(c, h, 0, n, H), want), kOwnTol) << groups[r] << " " << h;
      }
    }
  }
}

// gen-tiny-qwen2-f32.h5: `make-model --arch qwen2 --preset tiny --seed 31`: 2 layers, hidden 64.
TEST(CaptureOwn, QwenGeneratedRowsEqualAForwardOverPromptAndGoldenTokens) {
  constexpr std::int64_t H = 64;
  const auto golden = data_dir() / "gen-tiny-qwen2-f32.h5";
  auto s = open_made("tiny", 31);
  const std::vector<std::string> hooks{"hook_embed", "blocks.1.hook_resid_post", "ln_final.hook_out"};
  std::vector<std::vector<std::int32_t>> prompts, tokens;
  for (const char* row : {"row0", "row1", "row2"}) {
    prompts.push_back(own_ids_of(read_dataset(golden, std::string("ar_greedy/batch3/") + row + "/prompt")));
    tokens.push_back(own_ids_of(read_dataset(golden, std::string("ar_greedy/batch3/") + row + "/tokens")));
  }
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "kv cache" : "recompute");
    SessionDecodeForward fwd(*s, cache);
    ArOptions o;
    o.max_new_tokens = 16;
    o.use_cache = cache;
    const auto res = generate_autoregressive_captured(fwd, prompts, o, own_spec_for(*s, PositionPolicy::Generated, hooks), {0, 1, 2});
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      ASSERT_EQ(res.completions[r].tokens, tokens[r]);
      const auto& c = res.captured[r];
      ASSERT_EQ(c.rows.size(), 16u);
      auto full = prompts[r];
      full.insert(full.end(), tokens[r].begin(), tokens[r].end());
      std::map<std::string, Array> ref;
      ForwardInput in;
      in.tokens = static_cast<std::int64_t>(full.size());
      in.ids = full;
      s->forward(in, false, std::set<std::string>(hooks.begin(), hooks.end()), [&](const std::string& h, const TensorView& v) {
        const Tensor t = to_f32(v);
        Array a;
        a.shape = {in.tokens, H};
        a.values.assign(t.data<float>(), t.data<float>() + in.tokens * H);
        ref[h] = a;
      });
      const auto T = static_cast<std::int64_t>(prompts[r].size());
      for (std::int64_t k = 0; k < 16; ++k) {
        const auto& row = c.rows[static_cast<std::size_t>(k)];
        EXPECT_EQ(row.pos, T + k);
        EXPECT_EQ(row.step, k);
        EXPECT_EQ(row.token_id, tokens[r][static_cast<std::size_t>(k)]);
        EXPECT_EQ(row.kind, RowKind::Generated);
        for (const auto& h : hooks)
          EXPECT_LE(normalised_error(own_rows_of(c, h, k, 1, H), own_row_at(ref.at(h), T + k)), kOwnTol) << h << " step " << k;
      }
    }
  }
  SessionDecodeForward fwd(*s);
  ArOptions o;
  o.max_new_tokens = 16;
  const auto res = generate_autoregressive_captured(fwd, {prompts[0]}, o, CaptureSpec{}, {0});
  EXPECT_TRUE(res.captured.empty());
  EXPECT_EQ(res.completions[0].tokens, tokens[0]);
}

}  // namespace
}  // namespace sonde::test
