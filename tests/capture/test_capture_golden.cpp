// The core capture engine (capture.h) on the tiny golden checkpoints of ../shared/golden:
// captured rows against the golden per-layer outputs (prompt rows), against an independent
// unpadded, uncached forward over prompt + generated tokens (generated rows, diffusion rows of
// each step), and the /steps records against the golden diffusion history.
#include <sonde/capture.h>
#include <sonde/session_decode.h>

#include <gtest/gtest.h>

#include "h5_read.h"
#include "test_paths.h"

#include <cmath>
#include <map>

namespace sonde::test {
namespace {

const char* kQwen = "tiny-qwen2-float32-v2048";
const char* kDream = "tiny-dream-float32-v2048";
constexpr double kTol = 1e-4;
constexpr std::int64_t H = 64, L = 2;

std::filesystem::path shared_golden(const char* m) { return shared_dir() / "golden" / (std::string(m) + ".h5"); }
std::string model_dir(const char* m) { return (shared_dir() / "golden/models" / m).string(); }

std::vector<std::int32_t> ids_of(const Array& a) { return {a.values.begin(), a.values.end()}; }

std::unique_ptr<Session> open_model(const char* m) {
  return Session::open(SessionOptions{model_dir(m), "", 1, plugin_root().string()});
}

// Hooks with golden per-layer outputs, selected through the capture spec.
CaptureSpec spec_for(Session& s, PositionPolicy p, const std::vector<std::string>& names) {
  CaptureSpec spec;
  for (const auto& h : s.hook_points())
    if (std::find(names.begin(), names.end(), h.name) != names.end()) spec.hooks.push_back(h);
  EXPECT_EQ(spec.hooks.size(), names.size());
  spec.positions = p;
  return spec;
}

const std::vector<std::string> kGoldenHooks{"hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post",
                                            "ln_final.hook_out"};

// Golden [T, H] of a hook for a forward/<prompt> group.
Array golden_hook(const char* m, const std::string& prompt, const std::string& hook) {
  const std::string g = "forward/" + prompt + "/";
  if (hook == "hook_embed") return read_dataset(shared_golden(m), g + "hidden_states").at(0);
  if (hook == "ln_final.hook_out") return read_dataset(shared_golden(m), g + "hidden_states").at(L);
  const auto layer = std::stoll(hook.substr(7, 1));
  return read_dataset(shared_golden(m), g + "resid_post").at(layer);
}

// Rows [first, first + n) of a captured hook as an Array [n, H].
Array rows_of(const CapturedPrompt& c, const std::string& hook, std::int64_t first, std::int64_t n) {
  const auto& v = c.acts.at(hook);
  Array a;
  a.shape = {n, H};
  a.values.assign(v.begin() + first * H, v.begin() + (first + n) * H);
  return a;
}

// An independent forward: one unpadded sequence, no cache, positions 0..T-1; hook -> [T, H].
std::map<std::string, Array> plain_forward(Session& s, const std::vector<std::int32_t>& ids,
                                           const std::vector<std::string>& hooks) {
  std::map<std::string, Array> out;
  ForwardInput in;
  in.tokens = static_cast<std::int64_t>(ids.size());
  in.ids = ids;
  s.forward(in, false, std::set<std::string>(hooks.begin(), hooks.end()), [&](const std::string& h, const TensorView& v) {
    const Tensor t = to_f32(v);
    Array a;
    a.shape = {in.tokens, H};
    a.values.assign(t.data<float>(), t.data<float>() + in.tokens * H);
    out[h] = a;
  });
  return out;
}

Array row_at(const Array& a, std::int64_t i) {
  Array r = a.at(i);
  r.shape = {1, H};
  return r;
}

const std::vector<std::string> kGoldenPrompts{"prompt5", "prompt19"};

TEST(CaptureGoldenShared, QwenPromptRowsEqualGoldenLayersInAMixedLengthBatch) {
  auto s = open_model(kQwen);
  std::vector<std::vector<std::int32_t>> prompts;
  for (const auto& p : kGoldenPrompts) prompts.push_back(ids_of(read_dataset(shared_golden(kQwen), "forward/" + p + "/input_ids")));
  for (auto policy : {PositionPolicy::All, PositionPolicy::Prompt, PositionPolicy::Last}) {
    SCOPED_TRACE(position_policy_name(policy));
    SessionDecodeForward fwd(*s);
    ArOptions o;
    o.max_new_tokens = 4;
    const auto res = generate_autoregressive_captured(fwd, prompts, o, spec_for(*s, policy, kGoldenHooks), {10, 11});
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const auto T = static_cast<std::int64_t>(prompts[r].size());
      const auto& c = res.captured[r];
      const std::int64_t first_pos = policy == PositionPolicy::Last ? T - 1 : 0;
      const std::int64_t n = T - first_pos;
      for (std::int64_t i = 0; i < n; ++i) {
        const auto& row = c.rows[static_cast<std::size_t>(i)];
        EXPECT_EQ(row.prompt_idx, 10 + static_cast<std::int64_t>(r));
        EXPECT_EQ(row.pos, first_pos + i);
        EXPECT_EQ(row.token_id, prompts[r][static_cast<std::size_t>(first_pos + i)]);
        EXPECT_EQ(row.step, -1);
        EXPECT_EQ(row.kind, RowKind::Prompt);
      }
      const std::int64_t gen = policy == PositionPolicy::All ? 4 : 0;
      ASSERT_EQ(static_cast<std::int64_t>(c.rows.size()), n + gen);
      for (const auto& h : kGoldenHooks) {
        Array want = golden_hook(kQwen, kGoldenPrompts[r], h);
        if (policy == PositionPolicy::Last) want = row_at(want, T - 1);
        EXPECT_LE(normalised_error(rows_of(c, h, 0, n), want), kTol) << kGoldenPrompts[r] << " " << h;
      }
    }
  }
}

TEST(CaptureGoldenShared, QwenGeneratedRowsEqualAForwardOverPromptAndCompletion) {
  auto s = open_model(kQwen);
  std::vector<std::vector<std::int32_t>> prompts;
  for (const auto& p : kGoldenPrompts) prompts.push_back(ids_of(read_dataset(shared_golden(kQwen), "ar_greedy/" + p + "/prompt")));
  for (bool cache : {true, false}) {
    SCOPED_TRACE(cache ? "kv cache" : "recompute");
    SessionDecodeForward fwd(*s, cache);
    ArOptions o;
    o.max_new_tokens = 16;
    o.use_cache = cache;
    const auto res = generate_autoregressive_captured(fwd, prompts, o, spec_for(*s, PositionPolicy::Generated, kGoldenHooks),
                                                      {0, 1});
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const auto tokens = ids_of(read_dataset(shared_golden(kQwen), "ar_greedy/" + kGoldenPrompts[r] + "/tokens"));
      ASSERT_EQ(res.completions[r].tokens, tokens);  // the golden greedy decision
      const auto& c = res.captured[r];
      ASSERT_EQ(c.rows.size(), 16u);  // every generated token, the last one included
      auto full = prompts[r];
      full.insert(full.end(), tokens.begin(), tokens.end());
      const auto ref = plain_forward(*s, full, kGoldenHooks);
      const auto T = static_cast<std::int64_t>(prompts[r].size());
      for (std::int64_t k = 0; k < 16; ++k) {
        const auto& row = c.rows[static_cast<std::size_t>(k)];
        EXPECT_EQ(row.pos, T + k);
        EXPECT_EQ(row.step, k);
        EXPECT_EQ(row.token_id, tokens[static_cast<std::size_t>(k)]);
        EXPECT_EQ(row.kind, RowKind::Generated);
        for (const auto& h : kGoldenHooks)
          EXPECT_LE(normalised_error(rows_of(c, h, k, 1), row_at(ref.at(h), T + k)), kTol) << h << " step " << k;
      }
    }
  }
}

// Dream entropy, 16 steps, on both prompts at once (left padding).
struct DreamRun {
  std::vector<std::vector<std::int32_t>> prompts;
  DiffusionCaptureResult res;
};

DreamRun run_dream(Session& s, const CaptureSpec& spec) {
  DreamRun d;
  for (const auto& p : kGoldenPrompts)
    d.prompts.push_back(ids_of(read_dataset(shared_golden(kDream), "diffusion/" + p + "/entropy_steps16/prompt")));
  DiffusionOptions o;
  o.max_new_tokens = 16;
  o.steps = 16;
  o.sampling.alg = DiffusionAlg::Entropy;
  o.mask_id = 2047;
  o.pad_id = 2046;
  SessionDecodeForward fwd(s);
  d.res = diffusion_generate_captured(fwd, d.prompts, o, spec, {0, 1});
  return d;
}

std::string dream_group(std::size_t r) { return "diffusion/" + kGoldenPrompts[r] + "/entropy_steps16/"; }

// The canvas before step i: the prompt and 16 masks, or history[i - 1].
std::vector<std::int32_t> canvas_before(std::size_t r, std::int64_t i, const std::vector<std::int32_t>& prompt) {
  if (i > 0) return ids_of(read_dataset(shared_golden(kDream), dream_group(r) + "history").at(i - 1));
  auto c = prompt;
  c.insert(c.end(), 16, 2047);
  return c;
}

TEST(CaptureGoldenShared, DreamCommitRowsComeOncePerSlotFromTheForwardOfTheirStep) {
  auto s = open_model(kDream);
  auto spec = spec_for(*s, PositionPolicy::All, {"blocks.1.hook_resid_post", "diffusion.hook_tokens", "diffusion.hook_transfer"});
  spec.record_steps = true;
  const auto d = run_dream(*s, spec);
  for (std::size_t r = 0; r < 2; ++r) {
    SCOPED_TRACE(kGoldenPrompts[r]);
    const auto& c = d.res.captured[r];
    const auto T = static_cast<std::int64_t>(d.prompts[r].size());
    ASSERT_EQ(c.rows.size(), 16u);
    std::set<std::int32_t> seen;
    const auto k = read_dataset(shared_golden(kDream), dream_group(r) + "k");
    const auto history = read_dataset(shared_golden(kDream), dream_group(r) + "history");
    for (std::size_t i = 0; i < c.rows.size(); ++i) {
      const auto& row = c.rows[i];
      EXPECT_TRUE(seen.insert(row.pos).second) << "slot " << row.pos << " captured twice";
      EXPECT_GE(row.pos, T);
      EXPECT_EQ(row.kind, RowKind::Committed);
      const auto after = ids_of(history.at(row.step));
      EXPECT_EQ(row.token_id, after[static_cast<std::size_t>(row.pos)]);  // the token committed then
      EXPECT_EQ(canvas_before(r, row.step, d.prompts[r])[static_cast<std::size_t>(row.pos)], 2047);
      EXPECT_EQ(c.acts.at("diffusion.hook_tokens")[i], static_cast<float>(row.token_id));
      EXPECT_EQ(c.acts.at("diffusion.hook_transfer")[i], 1.0f);
      const auto ref = plain_forward(*s, canvas_before(r, row.step, d.prompts[r]), {"blocks.1.hook_resid_post"});
      EXPECT_LE(normalised_error(rows_of(c, "blocks.1.hook_resid_post", static_cast<std::int64_t>(i), 1),
                                 row_at(ref.at("blocks.1.hook_resid_post"), row.pos)), kTol);
    }
    // /steps: one entry per step, canvas and counts as in the golden history.
    ASSERT_EQ(c.steps.size(), 16u);
    const auto t = read_dataset(shared_golden(kDream), dream_group(r) + "t");
    for (std::int64_t i = 0; i < 16; ++i) {
      const auto& st = c.steps[static_cast<std::size_t>(i)];
      EXPECT_EQ(st.prompt_idx, static_cast<std::int64_t>(r));
      EXPECT_EQ(st.step, i);
      EXPECT_EQ(st.n_transfer, static_cast<std::int32_t>(k.values[static_cast<std::size_t>(i)]));
      EXPECT_FLOAT_EQ(st.t, static_cast<float>(t.values[static_cast<std::size_t>(i)]));
      EXPECT_EQ(st.canvas, ids_of(history.at(i)));
    }
  }
}

TEST(CaptureGoldenShared, DreamFinalRowsEqualAForwardOfTheFinalCanvas) {
  auto s = open_model(kDream);
  for (auto policy : {PositionPolicy::All, PositionPolicy::Generated, PositionPolicy::Last}) {
    SCOPED_TRACE(position_policy_name(policy));
    auto spec = spec_for(*s, policy, kGoldenHooks);
    spec.steps = parse_step_policy("final");
    const auto d = run_dream(*s, spec);
    for (std::size_t r = 0; r < 2; ++r) {
      const auto seq = ids_of(read_dataset(shared_golden(kDream), dream_group(r) + "sequence"));
      const auto ref = plain_forward(*s, seq, kGoldenHooks);
      const auto T = static_cast<std::int64_t>(d.prompts[r].size()), N = T + 16;
      const std::int64_t first = policy == PositionPolicy::All ? 0 : policy == PositionPolicy::Generated ? T : N - 1;
      const auto& c = d.res.captured[r];
      ASSERT_EQ(static_cast<std::int64_t>(c.rows.size()), N - first);
      for (std::int64_t i = 0; i < N - first; ++i) {
        EXPECT_EQ(c.rows[static_cast<std::size_t>(i)].pos, first + i);
        EXPECT_EQ(c.rows[static_cast<std::size_t>(i)].token_id, seq[static_cast<std::size_t>(first + i)]);
        EXPECT_EQ(c.rows[static_cast<std::size_t>(i)].step, 16);
      }
      for (const auto& h : kGoldenHooks) {
        Array want;
        want.shape = {N - first, H};
        want.values.assign(ref.at(h).values.begin() + first * H, ref.at(h).values.end());
        EXPECT_LE(normalised_error(rows_of(c, h, 0, N - first), want), kTol) << h;
      }
    }
  }
}

TEST(CaptureGoldenShared, DreamAllAndEveryKCaptureWholeCanvasesAtTheirSteps) {
  auto s = open_model(kDream);
  for (const char* policy : {"all", "every:5"}) {
    SCOPED_TRACE(policy);
    auto spec = spec_for(*s, PositionPolicy::All, {"blocks.0.hook_resid_post"});
    spec.steps = parse_step_policy(policy);
    const auto d = run_dream(*s, spec);
    const std::vector<std::int64_t> steps = std::string(policy) == "all"
        ? std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
        : std::vector<std::int64_t>{0, 5, 10, 15};
    const std::size_t r = 1;  // prompt19: 19 prompt slots, no padding
    const auto& c = d.res.captured[r];
    const std::int64_t N = 19 + 16;
    ASSERT_EQ(static_cast<std::int64_t>(c.rows.size()), N * static_cast<std::int64_t>(steps.size()));
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const auto before = canvas_before(r, steps[k], d.prompts[r]);
      const auto ref = plain_forward(*s, before, {"blocks.0.hook_resid_post"});
      const auto first = static_cast<std::int64_t>(k) * N;
      EXPECT_EQ(c.rows[static_cast<std::size_t>(first)].step, steps[k]);
      EXPECT_LE(normalised_error(rows_of(c, "blocks.0.hook_resid_post", first, N), ref.at("blocks.0.hook_resid_post")), kTol);
      for (std::int64_t j = 19; j < N; ++j) {
        const auto& row = c.rows[static_cast<std::size_t>(first + j)];
        const bool masked_before = before[static_cast<std::size_t>(j)] == 2047;
        if (!masked_before) EXPECT_EQ(row.kind, RowKind::Generated);
        else EXPECT_TRUE(row.kind == RowKind::Masked || row.kind == RowKind::Committed);
      }
    }
  }
}

TEST(CaptureGoldenShared, NoHooksMeansNoRowsAndTheSameTokens) {
  auto s = open_model(kQwen);
  const auto prompt = ids_of(read_dataset(shared_golden(kQwen), "ar_greedy/prompt5/prompt"));
  SessionDecodeForward fwd(*s);
  ArOptions o;
  o.max_new_tokens = 16;
  const auto res = generate_autoregressive_captured(fwd, {prompt}, o, CaptureSpec{}, {0});
  EXPECT_TRUE(res.captured.empty());
  EXPECT_EQ(res.completions[0].tokens, ids_of(read_dataset(shared_golden(kQwen), "ar_greedy/prompt5/tokens")));
}

}  // namespace
}  // namespace sonde::test
