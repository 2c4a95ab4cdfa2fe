// The step-level engine (engine.h) on make-model checkpoints, on every backend: each request's
// tokens, logits and captured rows are bit-identical (on the batch-invariant backends; cpu-blas
// within 1e-5) to decode.h's loop running it alone on a
// SessionDecodeForward (the path every command took before the engine), whether it arrives first,
// joins a running batch at a later step, or shares its forwards with steered requests. Qwen2:
// greedy and sampled, with EOS and stop strings, chunked prefill and a compacting KV cache. Dream:
// every unmasking algorithm and every diffusion mode, requests of other lengths at other steps.
#include <sonde/engine.h>
#include <sonde/session_decode.h>
#include <sonde/tokenizer.h>

#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

struct Trace {
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<float>> logits;   // AR: each step's last-slot logits
  std::vector<std::vector<float>> rows;     // the tapped hook of each forward, flattened
  std::vector<std::vector<std::int32_t>> canvases;  // diffusion: the canvas after each step
  std::string finish;
};

void keep(std::vector<std::vector<float>>& out, const TensorView& v) {
  const Tensor c = Tensor::copy_of(v);
  out.emplace_back(c.data<float>(), c.data<float>() + c.shape().numel());
}

Trace solo(Session& s, const EngineRequest& q) {
  SessionDecodeForward fwd(s);
  std::vector<Edit> edits = q.edits;
  s.set_edits(edits);
  fwd.begin_edit_rows({static_cast<std::int64_t>(q.prompt.size())}, {q.id});
  Trace t;
  if (!q.hooks.empty()) fwd.set_taps(q.hooks, [&](const std::string&, const TensorView& v) { keep(t.rows, v); });
  if (s.info().decoding == DecodingKind::Autoregressive) {
    const auto c = generate_autoregressive(fwd, {q.prompt}, q.ar, [&](const ArStep& st) {
      t.logits.emplace_back(st.logits.data<float>(), st.logits.data<float>() + st.logits.shape().numel());
    });
    t.tokens = c[0].tokens;
    t.finish = c[0].finish_reason;
  } else {
    const auto r = diffusion_generate(fwd, {q.prompt}, q.diffusion, [&](const DiffusionStep& st) { t.canvases.push_back(st.canvas); });
    t.tokens = r.completions[0];
    t.finish = "length";
  }
  s.set_edits({});
  return t;
}

std::vector<Trace> through_engine(Session& s, EngineOptions o, const std::vector<EngineRequest>& reqs,
                                  const std::vector<std::int64_t>& arrive) {
  auto model = session_engine_model(s);
  o.decoding = s.info().decoding;
  Engine engine(*model, o);
  std::vector<Trace> out(reqs.size());
  std::vector<std::shared_ptr<EngineHandle>> hs(reqs.size());
  std::size_t next = 0;
  for (std::int64_t step = 0;; ++step) {
    for (; next < reqs.size() && arrive[next] <= step; ++next) {
      EngineRequest q = reqs[next];
      Trace& t = out[next];
      q.on_token = [&t](std::int64_t, std::int32_t, const Tensor& l) {
        t.logits.emplace_back(l.data<float>(), l.data<float>() + l.shape().numel());
      };
      q.on_step = [&t](const DiffusionStep& st) { t.canvases.push_back(st.canvas); };
      if (!q.hooks.empty()) q.tap = [&t](const std::string&, const TensorView& v) { keep(t.rows, v); };
      hs[next] = engine.submit(std::move(q));
    }
    if (!engine.step() && next == reqs.size()) break;
  }
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const auto r = hs[i]->wait();
    EXPECT_EQ(r.error, "") << "request " << i;
    out[i].tokens = r.tokens;
    out[i].finish = r.finish_reason;
  }
  const auto st = engine.stats();
  EXPECT_EQ(st.running + st.waiting + st.kv_rows + st.threads, 0);
  return out;
}

// Within 1e-5 of each array's scale: cpu-blas is not batch-invariant (OpenBLAS picks its kernel
// by the row count, docs/backends.md), so there a row's numbers move with its neighbours.
void expect_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, std::size_t i,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size()) << "request " << i << ": " << what;
  for (std::size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].size(), b[k].size()) << "request " << i << ": " << what << " " << k;
    double err = 0, scale = 1e-30;
    for (std::size_t j = 0; j < a[k].size(); ++j) {
      err = std::max(err, static_cast<double>(std::abs(a[k][j] - b[k][j])));
      scale = std::max(scale, static_cast<double>(std::abs(a[k][j])));
    }
    EXPECT_LE(err / scale, 1e-5) << "request " << i << ": " << what << " " << k;
  }
}

// Bit for bit on a batch-invariant backend (reference, threaded); cpu-blas: the same tokens and
// steps, numbers within 1e-5.
void expect_same(const Trace& a, const Trace& b, std::size_t i, bool exact) {
  EXPECT_EQ(a.tokens, b.tokens) << "request " << i;
  EXPECT_EQ(a.finish, b.finish) << "request " << i;
  EXPECT_EQ(a.canvases, b.canvases) << "request " << i;
  if (!exact) {
    expect_close(a.logits, b.logits, i, "logits");
    expect_close(a.rows, b.rows, i, "captured rows");
    return;
  }
  EXPECT_TRUE(a.logits == b.logits) << "request " << i << ": logits differ";
  EXPECT_TRUE(a.rows == b.rows) << "request " << i << ": captured rows differ (" << a.rows.size() << " vs " << b.rows.size() << ")";
}

std::vector<std::int32_t> random_ids(std::mt19937& rng, std::int64_t n, std::int32_t vocab) {
  std::vector<std::int32_t> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(static_cast<std::int32_t>(10 + rng() % static_cast<unsigned>(vocab - 10)));
  return v;
}

Edit steering(const Session& s, float scale) {
  Edit e;
  e.hook = "blocks.0.hook_resid_post";
  e.op = EditOp::Add;
  e.scale = scale;
  e.operand = Tensor(DType::f32, Shape{1, s.config().hidden_size});
  for (std::int64_t i = 0; i < s.config().hidden_size; ++i) e.operand.data<float>()[i] = static_cast<float>((i % 7) - 3) * 0.25f;
  return e;
}

TEST(EngineModels, QwenRequestsJoiningAtAnyStepKeepTheirSoloBits) {
  const auto dir = made_model("qwen2", "tiny", 31);
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto s = Session::open(SessionOptions{dir.string(), backend, 2, plugin_root().string()});
    const auto V = static_cast<std::int32_t>(s->config().vocab_size);
    std::mt19937 rng(9);
    std::vector<EngineRequest> reqs;
    const std::vector<std::int64_t> arrive{0, 0, 3, 7, 8, 12, 15, 21};
    for (std::size_t i = 0; i < arrive.size(); ++i) {
      EngineRequest q;
      q.id = "r" + std::to_string(i);
      q.prompt = random_ids(rng, 3 + static_cast<std::int64_t>(rng() % 40), V);
      q.ar.max_new_tokens = 4 + static_cast<std::int64_t>(rng() % 14);
      q.ar.seeds = {1000 + i};
      q.ar.sampling.do_sample = i % 2 == 1;
      q.ar.sampling.temperature = 0.9;
      q.ar.sampling.top_p = 0.95;
      reqs.push_back(q);
    }
    // EOS: request 2 ends at the token its solo run chooses third; stop string: request 4 at the
    // text of its solo run's second token.
    const auto* tok = s->tokenizer();
    ASSERT_NE(tok, nullptr);
    reqs[2].ar.eos_ids = {solo(*s, reqs[2]).tokens.at(2)};
    const auto second = solo(*s, reqs[4]).tokens.at(1);
    reqs[4].ar.stop_strings = {tok->decode(std::vector<std::int32_t>{second})};
    reqs[4].ar.detokenize = [tok](const std::vector<std::int32_t>& ids) { return tok->decode(ids); };
    reqs[5].hooks = {"blocks.1.hook_resid_post", "blocks.0.attn.hook_z"};
    reqs[5].ar.feed_last = true;
    reqs[6].edits = {steering(*s, 3.0f)};
    reqs[6].hooks = {"blocks.1.hook_resid_post"};
    std::vector<Trace> alone;
    for (const auto& q : reqs) alone.push_back(solo(*s, q));
    EXPECT_EQ(alone[2].finish, "eos");
    EXPECT_EQ(alone[4].finish, "stop");
    // 3 slots, 16-token prefill chunks, a context of 64: waiting, chunking and compaction all happen.
    const auto got = through_engine(*s, EngineOptions{DecodingKind::Autoregressive, 3, 64, 64, 16}, reqs, arrive);
    for (std::size_t i = 0; i < reqs.size(); ++i) expect_same(alone[i], got[i], i, backend != "cpu-blas");
  }
}

TEST(EngineModels, SteeredAndUnsteeredQwenRequestsInOneForwardEachEqualTheirSoloRuns) {
  const auto dir = made_model("qwen2", "tiny", 32);
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto s = Session::open(SessionOptions{dir.string(), backend, 2, plugin_root().string()});
    EngineRequest plain;
    plain.prompt = {101, 202, 303, 404, 505};
    plain.ar.max_new_tokens = 10;
    plain.hooks = {"blocks.1.hook_resid_post"};
    EngineRequest steered = plain;
    steered.edits = {steering(*s, 4.0f)};
    const Trace a = solo(*s, plain), b = solo(*s, steered);
    ASSERT_FALSE(a.rows == b.rows);  // the steering changes the run
    const auto got = through_engine(*s, EngineOptions{DecodingKind::Autoregressive, 4, 64, 64, 256}, {plain, steered, plain}, {0, 0, 2});
    expect_same(a, got[0], 0, backend != "cpu-blas");
    expect_same(b, got[1], 1, backend != "cpu-blas");
    expect_same(a, got[2], 2, backend != "cpu-blas");
  }
}

TEST(EngineModels, DreamRequestsOfEveryAlgorithmAndModeKeepTheirSoloBits) {
  const auto dir = made_model("dream", "tiny", 33);
  const DiffusionAlg algs[] = {DiffusionAlg::Origin, DiffusionAlg::MaskgitPlus, DiffusionAlg::TopkMargin, DiffusionAlg::Entropy,
                               DiffusionAlg::ConfidenceThreshold};
  const DiffusionMode modes[] = {DiffusionMode::Exact, DiffusionMode::Block, DiffusionMode::BlockCache, DiffusionMode::DualCache};
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto s = Session::open(SessionOptions{dir.string(), backend, 2, plugin_root().string()});
    const auto V = static_cast<std::int32_t>(s->config().vocab_size);
    std::mt19937 rng(4);
    std::vector<EngineRequest> reqs;
    std::vector<std::int64_t> arrive;
    int i = 0;
    for (const auto mode : modes)
      for (const auto alg : algs) {
        EngineRequest q;
        q.id = "d" + std::to_string(i);
        q.prompt = random_ids(rng, 2 + static_cast<std::int64_t>(rng() % 12), V);
        q.diffusion.mode = mode;
        q.diffusion.block_size = 4;
        q.diffusion.max_new_tokens = 8 + static_cast<std::int64_t>(rng() % 5);
        q.diffusion.steps = q.diffusion.max_new_tokens;
        q.diffusion.mask_id = static_cast<std::int32_t>(s->info().mask_token_id);
        q.diffusion.sampling.alg = alg;
        q.diffusion.sampling.temperature = i % 2 ? 0.6 : 0.0;
        q.diffusion.threshold = 0.05;
        q.diffusion.seeds = {static_cast<std::uint64_t>(70 + i)};
        if (i % 6 == 0) q.hooks = {"blocks.0.hook_resid_post"};
        if (i % 7 == 3) q.edits = {steering(*s, 2.0f)};
        reqs.push_back(q);
        arrive.push_back(i / 2);
        ++i;
      }
    std::vector<Trace> alone;
    for (const auto& q : reqs) alone.push_back(solo(*s, q));
    const auto got = through_engine(*s, EngineOptions{DecodingKind::MaskedDiffusion, 6, 64, 64, 256}, reqs, arrive);
    for (std::size_t k = 0; k < reqs.size(); ++k) expect_same(alone[k], got[k], k, backend != "cpu-blas");
  }
}


// Each request's own capture (EngineRequest::capture): its hooks, positions and, for Dream, steps,
// equal the run layer's capture of the same request run alone, row for row and value for value,
// while requests with other captures, none, or edits share its forwards.
std::vector<HookPoint> hooks_named(const Session& s, const std::vector<std::string>& names) {
  std::vector<HookPoint> out;
  for (const auto& h : s.hook_points())
    if (std::find(names.begin(), names.end(), h.name) != names.end()) out.push_back(h);
  return out;
}

CapturedPrompt captured_alone(Session& s, const EngineRequest& q) {
  SessionDecodeForward fwd(s);
  s.set_edits(q.edits);
  fwd.begin_edit_rows({static_cast<std::int64_t>(q.prompt.size())}, {q.id});
  std::vector<CapturedPrompt> out;
  if (s.info().decoding == DecodingKind::Autoregressive)
    out = generate_autoregressive_captured(fwd, {q.prompt}, q.ar, q.capture, {0}).captured;
  else
    out = diffusion_generate_captured(fwd, {q.prompt}, q.diffusion, q.capture, {0}).captured;
  s.set_edits({});
  return out.empty() ? CapturedPrompt{} : out[0];
}

void expect_same_capture(const CapturedPrompt& a, const CapturedPrompt& b, std::size_t i, bool exact) {
  const auto key = [](const RowRecord& r) { return std::tuple(r.pos, r.token_id, r.step, r.kind, r.fresh, r.computed_step); };
  ASSERT_EQ(a.rows.size(), b.rows.size()) << "request " << i;
  for (std::size_t k = 0; k < a.rows.size(); ++k) EXPECT_EQ(key(a.rows[k]), key(b.rows[k])) << "request " << i << " row " << k;
  ASSERT_EQ(a.acts.size(), b.acts.size()) << "request " << i;
  for (const auto& [hook, values] : a.acts) {
    ASSERT_TRUE(b.acts.count(hook)) << "request " << i << ": " << hook;
    if (exact)
      EXPECT_TRUE(values == b.acts.at(hook)) << "request " << i << ": " << hook << " differs";
    else
      expect_close({values}, {b.acts.at(hook)}, i, hook.c_str());
  }
  EXPECT_EQ(a.steps.size(), b.steps.size()) << "request " << i;
}

TEST(EngineModels, EachRequestsOwnCaptureEqualsItsCaptureAlone) {
  for (const char* arch : {"qwen2", "dream"}) {
    SCOPED_TRACE(arch);
    const auto dir = made_model(arch, "tiny", 34);
    for (const auto& backend : built_backends()) {
      SCOPED_TRACE(backend);
      auto s = Session::open(SessionOptions{dir.string(), backend, 2, plugin_root().string()});
      const bool ar = s->info().decoding == DecodingKind::Autoregressive;
      const auto V = static_cast<std::int32_t>(s->config().vocab_size);
      std::mt19937 rng(5);
      const PositionPolicy positions[] = {PositionPolicy::All, PositionPolicy::Last, PositionPolicy::Generated,
                                          PositionPolicy::Prompt, PositionPolicy::All};
      const StepPolicy steps[] = {{StepPolicy::Kind::All, 1}, {StepPolicy::Kind::Commit, 1}, {StepPolicy::Kind::Every, 2},
                                  {StepPolicy::Kind::Final, 1}, {StepPolicy::Kind::Commit, 1}};
      std::vector<EngineRequest> reqs;
      for (std::size_t i = 0; i < 5; ++i) {
        EngineRequest q;
        q.id = "c" + std::to_string(i);
        q.prompt = random_ids(rng, 3 + static_cast<std::int64_t>(rng() % 20), V);
        q.ar.max_new_tokens = 3 + static_cast<std::int64_t>(rng() % 8);
        q.diffusion.max_new_tokens = 6 + static_cast<std::int64_t>(rng() % 4);
        q.diffusion.steps = q.diffusion.max_new_tokens;
        q.diffusion.mask_id = static_cast<std::int32_t>(s->info().mask_token_id);
        q.diffusion.mode = i == 4 ? DiffusionMode::DualCache : DiffusionMode::Exact;
        q.diffusion.block_size = 3;
        q.capture.positions = positions[i];
        q.capture.steps = steps[i];
        q.capture.record_steps = !ar;
        if (i != 3)  // request 3 captures nothing beside the others
          q.capture.hooks = hooks_named(*s, i % 2 ? std::vector<std::string>{"blocks.0.hook_resid_post"}
                                                  : std::vector<std::string>{"blocks.1.hook_resid_post", "blocks.0.mlp.hook_post"});
        if (i == 2) q.edits = {steering(*s, 3.0f)};
        reqs.push_back(q);
      }
      std::vector<CapturedPrompt> alone;
      for (const auto& q : reqs) alone.push_back(captured_alone(*s, q));
      ASSERT_FALSE(alone[0].rows.empty());
      auto model = session_engine_model(*s);
      Engine engine(*model, EngineOptions{s->info().decoding, 3, 8, 64, 16});
      std::vector<std::shared_ptr<EngineHandle>> hs;
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        hs.push_back(engine.submit(reqs[i]));
        if (i % 2) engine.step();  // later ones join a running batch
      }
      engine.run_until_idle();
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        const EngineResult r = hs[i]->wait();
        ASSERT_EQ(r.error, "") << "request " << i;
        expect_same_capture(alone[i], r.captured, i, backend != "cpu-blas");
      }
    }
  }
}

}  // namespace
}  // namespace sonde::test
