// LLaDA's generate() (DiffusionLoop::SemiArRemasking) on fake forwards, and torch's CPU draws:
// TorchCpuRandom against values torch printed (tests/data/torch-cpu-rand.json, written by
// tests/reference/make_llada_goldens.py), get_num_transfer_tokens' split of each block over its
// steps, commits only up to the current block's end, generate.py's asserts as BadInput, the
// classifier-free guidance combination, and a seeded row alone equal to the same row in a batch.
#include <sonde/config.h>
#include <sonde/decode.h>
#include <sonde/error.h>
#include <sonde/request.h>
#include <sonde/sampling.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <functional>

#include "test_paths.h"

namespace sonde {
namespace {

TEST(TorchCpuRandom, ReproducesTorchManualSeedThenRand) {
  std::ifstream in(test::data_dir() / "torch-cpu-rand.json");
  ASSERT_TRUE(in) << "missing tests/data/torch-cpu-rand.json";
  const auto j = nlohmann::json::parse(in);
  for (const auto& [seed_text, v] : j["seeds"].items()) {
    const std::uint64_t seed = std::stoull(seed_text);
    for (const char* kind : {"f32", "f64"}) {
      TorchCpuRandom g(seed);
      std::int64_t at = 0;
      for (const auto& [index_text, want] : v[kind].items()) {
        const std::int64_t index = std::stoll(index_text);
        ASSERT_GE(index, at);
        double got = 0;
        for (; at <= index; ++at) got = kind[1] == '3' ? static_cast<double>(g.rand_f32()) : g.rand_f64();
        EXPECT_EQ(got, want.get<double>()) << "seed " << seed << " " << kind << "[" << index << "]";
      }
    }
    TorchCpuRandom g(seed);  // rand_like(float64), then float32 draws continue the same stream
    for (const auto& want : v["like_f64"]) EXPECT_EQ(g.rand_f64(), want.get<double>()) << "seed " << seed;
    for (const auto& want : v["then_f32"]) EXPECT_EQ(static_cast<double>(g.rand_f32()), want.get<double>());
  }
}

TEST(TorchCpuRandom, SkipEqualsDrawing) {
  TorchCpuRandom a(7), b(7);
  for (int i = 0; i < 1000; ++i) a.rand_f64();
  b.skip_f64(1000);
  EXPECT_EQ(a.rand_f32(), b.rand_f32());
}

// Logits of a slot from (position, the row's committed ids, whether its prompt is masked): rows
// depend on their own canvas, never on their place in a batch or its padding.
class LladaFake : public DecodeForward {
 public:
  using Fill = std::function<void(std::int32_t pos, std::uint64_t content, float* row)>;
  LladaFake(std::int64_t V, std::int32_t mask, Fill fill) : V_(V), mask_(mask), fill_(std::move(fill)) {}
  std::int64_t vocab_size() const override { return V_; }
  Tensor forward(const StepInput& in) override {
    ++calls;
    Tensor t(DType::f32, Shape{in.batch, in.tokens, V_});
    for (std::int64_t r = 0; r < in.batch; ++r) {
      std::uint64_t content = 0;
      for (std::int64_t j = 0; j < in.tokens; ++j) {
        const auto at = static_cast<std::size_t>(r * in.tokens + j);
        const bool real = in.key_mask.empty() || in.key_mask[at];
        if (real && in.ids[at] != mask_) content = content * 31 + static_cast<std::uint64_t>(in.ids[at]) + 1;
      }
      for (std::int64_t j = 0; j < in.tokens; ++j)
        fill_(in.positions[static_cast<std::size_t>(r * in.tokens + j)], content, t.data<float>() + (r * in.tokens + j) * V_);
    }
    return t;
  }
  int calls = 0;

 private:
  std::int64_t V_;
  std::int32_t mask_;
  Fill fill_;
};

constexpr std::int32_t kLladaMask = 15;

DiffusionOptions llada_opts(std::int64_t new_tokens, std::int64_t steps, std::int64_t block) {
  DiffusionOptions o;
  o.loop = DiffusionLoop::SemiArRemasking;
  o.max_new_tokens = new_tokens;
  o.steps = steps;
  o.block_length = block;
  o.mask_id = kLladaMask;
  o.pad_id = 14;
  return o;
}

// Token (pos % 13) wins at every slot, with a confidence that falls with the position.
void falling(std::int32_t pos, std::uint64_t, float* row) {
  for (int v = 0; v < 16; ++v) row[v] = 0;
  row[pos % 13] = 8.0f - 0.1f * static_cast<float>(pos);
}

TEST(LladaLoop, EachBlockSplitsItsMasksOverItsStepsAndCommitsInsideIt) {
  LladaFake fake(16, kLladaMask, falling);
  // 10 new tokens, blocks of 5, 6 steps: 3 steps a block, 5 = 2 + 2 + 1 (the first 5 % 3 steps one more).
  std::vector<std::vector<std::int64_t>> per_step;
  const auto res = diffusion_generate(fake, {{1, 2, 3}}, llada_opts(10, 6, 5), [&](const DiffusionStep& st) {
    per_step.push_back(st.transfer[0]);
    EXPECT_EQ(st.block[0], st.step / 3);
    for (auto j : st.transfer[0]) {
      EXPECT_GE(j, 3 + 5 * st.block[0]) << "step " << st.step;
      EXPECT_LT(j, 3 + 5 * (st.block[0] + 1)) << "step " << st.step;
    }
  });
  ASSERT_EQ(per_step.size(), 6u);
  const std::vector<std::size_t> counts{2, 2, 1, 2, 2, 1};
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(per_step[i].size(), counts[i]) << "step " << i;
  // Confidence falls with the position: the lowest slots of a block commit first.
  EXPECT_EQ(per_step[0], (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(per_step[3], (std::vector<std::int64_t>{8, 9}));
  EXPECT_EQ(fake.calls, 6);
  std::vector<std::int32_t> want;
  for (int p = 3; p < 13; ++p) want.push_back(p % 13);
  EXPECT_EQ(res.completions[0], want);
}

TEST(LladaLoop, GeneratePyAssertsAreBadInput) {
  LladaFake fake(16, kLladaMask, falling);
  EXPECT_THROW(diffusion_generate(fake, {{1}}, llada_opts(10, 6, 4)), Error);   // 4 does not divide 10
  EXPECT_THROW(diffusion_generate(fake, {{1}}, llada_opts(10, 5, 5)), Error);   // 5 steps over 2 blocks
  auto cached = llada_opts(10, 6, 5);
  cached.mode = DiffusionMode::DualCache;
  EXPECT_THROW(diffusion_generate(fake, {{1}}, cached), Error);  // the fake has no slot cache
  try {
    check_diffusion_options(llada_opts(16, 16, 5));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_length: 5 does not divide max_new_tokens 16"), std::string::npos) << e.what();
  }
}

TEST(LladaLoop, ClassifierFreeGuidanceCombinesBothForwards) {
  // Conditional (prompt visible): token 2 at 1.0, token 3 at 0.9. Unconditional (prompt masked):
  // token 2 at 1.0, token 3 at 0.0. Guided at scale 1: un + 2 (cond - un) = 1.0 and 1.8: token 3.
  LladaFake fake(16, kLladaMask, [](std::int32_t, std::uint64_t content, float* row) {
    for (int v = 0; v < 16; ++v) row[v] = -5;
    row[2] = 1.0f;
    row[3] = content != 0 ? 0.9f : 0.0f;
  });
  auto o = llada_opts(2, 1, 2);
  EXPECT_EQ(diffusion_generate(fake, {{7, 8}}, o).completions[0], (std::vector<std::int32_t>{2, 2}));
  o.cfg_scale = 1.0;
  fake.calls = 0;
  EXPECT_EQ(diffusion_generate(fake, {{7, 8}}, o).completions[0], (std::vector<std::int32_t>{3, 3}));
  EXPECT_EQ(fake.calls, 2);  // two forwards a step
}

// Logits that depend on the row's committed content: seeded draws must follow the row alone.
void content_logits(std::int32_t pos, std::uint64_t content, float* row) {
  for (int v = 0; v < 16; ++v)
    row[v] = static_cast<float>(std::sin(0.7 * v + 0.3 * pos + 1e-3 * static_cast<double>(content % 9973)));
  row[kLladaMask] = -30;
}

TEST(LladaLoop, SeededRowAloneEqualsTheRowInAPaddedBatch) {
  for (const auto remasking : {Remasking::LowConfidence, Remasking::Random}) {
    auto o = llada_opts(8, 8, 4);
    o.remasking = remasking;
    o.sampling.temperature = 0.8;
    o.seeds = {5, 9};
    LladaFake fake(16, kLladaMask, content_logits);
    const std::vector<std::vector<std::int32_t>> prompts{{1, 2}, {3, 4, 5, 6, 7}};
    const auto batch = diffusion_generate(fake, prompts, o);
    for (std::size_t r = 0; r < 2; ++r) {
      auto alone = o;
      alone.seeds = {o.seeds[r]};
      EXPECT_EQ(diffusion_generate(fake, {prompts[r]}, alone).completions[0], batch.completions[r])
          << "row " << r << ", " << remasking_name(remasking);
    }
    auto other = o;  // and the seed matters
    other.seeds = {6, 9};
    EXPECT_NE(diffusion_generate(fake, prompts, other).completions[0], batch.completions[0]);
  }
}

TEST(LladaSettings, DreamSettingsAreRefusedAndDefaultsFollowGeneratePy) {
  ModelConfig cfg;
  cfg.mask_token_id = 15;
  GenerationSettings s;
  s.max_new_tokens = 32;
  const auto d = resolve_diffusion(s, cfg, DiffusionLoop::SemiArRemasking);
  EXPECT_EQ(d.loop, DiffusionLoop::SemiArRemasking);
  EXPECT_EQ(d.steps, 32);
  EXPECT_EQ(d.block_length, 32);
  EXPECT_EQ(d.remasking, Remasking::LowConfidence);
  EXPECT_EQ(d.cfg_scale, 0.0);
  EXPECT_EQ(d.sampling.temperature, 0.0);
  s.alg = "entropy";
  EXPECT_THROW(resolve_diffusion(s, cfg, DiffusionLoop::SemiArRemasking), Error);
  GenerationSettings l;
  l.remasking = "random";
  EXPECT_THROW(resolve_diffusion(l, cfg, DiffusionLoop::DreamTimesteps), Error);
  l.remasking = "lowest";
  EXPECT_THROW(l.check(), Error);
}

}  // namespace
}  // namespace sonde
