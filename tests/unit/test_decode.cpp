// The decode loops with hand-written fake forwards: the diffusion schedule of model-spec §3.4,
// the logits shift, tie-breaks, never stopping at EOS; AR stops (eos, stop strings, length),
// left padding and the KV-cache protocol (prefill, then one slot per step).
#include <sonde/decode.h>
#include <sonde/error.h>

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

namespace sonde {
namespace {

// ---- schedule ----

std::vector<std::int64_t> schedule(std::int64_t n, std::int64_t steps) {
  const auto ts = diffusion_timesteps(steps, 1e-3);
  std::vector<std::int64_t> ks;
  for (std::int64_t i = 0; i < steps; ++i) {
    const auto k = diffusion_unmask_count(static_cast<float>(n), ts[static_cast<std::size_t>(i)],
                                          ts[static_cast<std::size_t>(i + 1)], i == steps - 1);
    ks.push_back(k);
    n -= k;
  }
  return ks;
}

std::vector<std::int64_t> first_middle_last(std::int64_t first, std::int64_t middle, std::int64_t count, std::int64_t last) {
  std::vector<std::int64_t> v{first};
  v.insert(v.end(), static_cast<std::size_t>(count), middle);
  v.push_back(last);
  return v;
}

TEST(DiffusionSchedule, MatchesTheSpecTable) {
  EXPECT_EQ(schedule(16, 16), first_middle_last(0, 1, 14, 2));
  EXPECT_EQ(schedule(16, 4), (std::vector<std::int64_t>{3, 4, 4, 5}));
  EXPECT_EQ(schedule(256, 256), first_middle_last(0, 1, 254, 2));
  EXPECT_EQ(schedule(256, 128), first_middle_last(1, 2, 126, 3));
  EXPECT_EQ(schedule(256, 32), first_middle_last(7, 8, 30, 9));
}

TEST(DiffusionSchedule, TimestepsRunFromOneToEps) {
  const auto ts = diffusion_timesteps(4, 1e-3);
  ASSERT_EQ(ts.size(), 5u);
  EXPECT_EQ(ts[0], 1.0f);
  EXPECT_EQ(ts[4], 1e-3f);
  EXPECT_FLOAT_EQ(ts[2], 0.5005f);
}

// ---- a fake bidirectional model: the logits at slot j come from a function of j ----

class FakeDiffusion : public DecodeForward {
 public:
  FakeDiffusion(std::int64_t V, std::function<void(std::int64_t slot, float* row)> fill) : V_(V), fill_(std::move(fill)) {}
  std::int64_t vocab_size() const override { return V_; }
  Tensor forward(const StepInput& in) override {
    ++calls;
    last_input = in;
    Tensor t(DType::f32, Shape{in.batch, in.tokens, V_});
    for (std::int64_t r = 0; r < in.batch; ++r)
      for (std::int64_t j = 0; j < in.tokens; ++j) fill_(j, t.data<float>() + (r * in.tokens + j) * V_);
    return t;
  }
  int calls = 0;
  StepInput last_input;

 private:
  std::int64_t V_;
  std::function<void(std::int64_t, float*)> fill_;
};

DiffusionOptions opts(std::int64_t new_tokens, std::int64_t steps, DiffusionAlg alg) {
  DiffusionOptions o;
  o.max_new_tokens = new_tokens;
  o.steps = steps;
  o.sampling.alg = alg;
  o.mask_id = 7;
  o.pad_id = 6;
  return o;
}

TEST(DiffusionLoop, ShiftsLogitsByOneSlot) {
  // Slot j's own logits favour token j % 5; after the shift canvas slot j holds (j - 1) % 5.
  FakeDiffusion m(8, [](std::int64_t j, float* row) { row[j % 5] = 4.0f; });
  const auto r = diffusion_generate(m, {{1, 2, 3}}, opts(6, 3, DiffusionAlg::MaskgitPlus));
  EXPECT_EQ(r.completions[0], (std::vector<std::int32_t>{2 % 5, 3 % 5, 4 % 5, 5 % 5, 6 % 5, 7 % 5}));
  EXPECT_EQ(r.sequences[0], (std::vector<std::int32_t>{1, 2, 3, 2, 3, 4, 0, 1, 2}));
  EXPECT_EQ(m.calls, 3);  // one full forward per step
}

TEST(DiffusionLoop, NeverStopsAtEosAndFillsEverySlot) {
  // Every slot predicts 6 (the eos / pad id here): the loop still runs all steps.
  FakeDiffusion m(8, [](std::int64_t, float* row) { row[6] = 5.0f; });
  int steps_seen = 0;
  const auto r = diffusion_generate(m, {{1, 2}}, opts(16, 16, DiffusionAlg::Entropy),
                                    [&](const DiffusionStep&) { ++steps_seen; });
  EXPECT_EQ(steps_seen, 16);
  EXPECT_EQ(m.calls, 16);
  EXPECT_EQ(r.completions[0], std::vector<std::int32_t>(16, 6));
}

TEST(DiffusionLoop, EqualConfidencesGoToTheLowerSlot) {
  FakeDiffusion m(8, [](std::int64_t, float* row) { row[3] = 2.0f; });
  std::vector<std::vector<std::int64_t>> transfers;
  std::vector<std::int64_t> ks;
  diffusion_generate(m, {{1, 2}}, opts(16, 4, DiffusionAlg::MaskgitPlus), [&](const DiffusionStep& s) {
    transfers.push_back(s.transfer[0]);
    ks.push_back(s.k);
  });
  EXPECT_EQ(ks, (std::vector<std::int64_t>{3, 4, 4, 5}));
  EXPECT_EQ(transfers[0], (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(transfers[1], (std::vector<std::int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(transfers[3], (std::vector<std::int64_t>{13, 14, 15, 16, 17}));
}

TEST(DiffusionLoop, HigherConfidenceFirst) {
  // Source slot j has logit 0.5*j on token 1: canvas slot j (source j-1) grows more confident
  // with j, so each step reveals the rightmost masked slots, highest first.
  FakeDiffusion m(8, [](std::int64_t j, float* row) { row[1] = 0.5f * static_cast<float>(j); });
  std::vector<std::vector<std::int64_t>> transfers;
  std::vector<std::vector<double>> confs;
  diffusion_generate(m, {{1, 2}}, opts(8, 2, DiffusionAlg::MaskgitPlus), [&](const DiffusionStep& s) {
    transfers.push_back(s.transfer[0]);
    confs.push_back(s.confidence);
  });
  // n = 8, steps 2: t = 1, .5005, .001; k0 = trunc(8 * (1 - .5005)) = 3, then 5.
  EXPECT_EQ(transfers[0], (std::vector<std::int64_t>{9, 8, 7}));
  EXPECT_EQ(transfers[1], (std::vector<std::int64_t>{6, 5, 4, 3, 2}));
  EXPECT_TRUE(std::isnan(confs[0][0]));  // prompt slots have no confidence
  EXPECT_GT(confs[0][9], confs[0][8]);
}

TEST(DiffusionLoop, LeftPaddedBatchUsesTheSpecMaskAndPositions) {
  FakeDiffusion m(8, [](std::int64_t, float* row) { row[2] = 1.0f; });
  diffusion_generate(m, {{1, 2, 3}, {4}}, opts(2, 1, DiffusionAlg::Entropy));
  const auto& in = m.last_input;
  EXPECT_EQ(in.tokens, 5);
  // Row 1: two pad slots (mask 0, position 1), then cumsum(mask) - 1.
  EXPECT_EQ(in.key_mask, (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(in.positions, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 1, 1, 0, 1, 2}));
  EXPECT_EQ(in.ids[5], 6);  // the pad id
}

TEST(DiffusionLoop, UnpaddedBatchHasNoMask) {
  FakeDiffusion m(8, [](std::int64_t, float* row) { row[2] = 1.0f; });
  diffusion_generate(m, {{1, 2}, {3, 4}}, opts(2, 1, DiffusionAlg::Entropy));
  EXPECT_TRUE(m.last_input.key_mask.empty());  // Dream: attention "full"
  EXPECT_EQ(m.last_input.positions, (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(DiffusionLoop, BadRequestsAreBadInput) {
  FakeDiffusion m(8, [](std::int64_t, float*) {});
  auto expect_bad = [&](const DiffusionOptions& o, std::vector<std::vector<std::int32_t>> p) {
    try {
      diffusion_generate(m, p, o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    }
  };
  expect_bad(opts(4, 0, DiffusionAlg::Entropy), {{1}});
  expect_bad(opts(0, 1, DiffusionAlg::Entropy), {{1}});
  expect_bad(opts(4, 1, DiffusionAlg::Entropy), {{}});
}

TEST(DiffusionLoop, OriginRevealsEverythingByTheLastStepAndDependsOnlyOnTheSeed) {
  FakeDiffusion m(8, [](std::int64_t j, float* row) { row[(j * 3) % 7] = 3.0f; });
  auto o = opts(8, 4, DiffusionAlg::Origin);
  o.sampling.temperature = 1.0;
  o.seeds = {9};
  const auto a = diffusion_generate(m, {{1, 2}}, o);
  o.seeds = {5, 9};
  const auto b = diffusion_generate(m, {{3, 3}, {1, 2}}, o);
  EXPECT_EQ(a.sequences[0], b.sequences[1]);
  for (auto t : a.completions[0]) EXPECT_NE(t, 7);
}

// ---- a fake causal LM with its own KV cache ----
// Next token = (sum of the ids of allowed keys + 3 * position of the query) % V. Keys are
// allowed iff their mask is 1 and they are not after the query, so a left-padded row gives the
// same numbers as the row alone.
class FakeLm : public DecodeForward {
 public:
  FakeLm(std::int64_t V, bool cache) : V_(V), cache_(cache) {}
  std::int64_t vocab_size() const override { return V_; }
  bool has_kv_cache() const override { return cache_; }
  void reset_cache(std::int64_t batch, std::int64_t capacity) override {
    keys_.assign(static_cast<std::size_t>(batch), {});
    capacity_ = capacity;
    ++resets;
  }
  Tensor forward(const StepInput& in) override {
    calls.push_back({in.past, in.tokens});
    Tensor t(DType::f32, Shape{in.batch, in.tokens, V_});
    const std::int64_t S = in.past + in.tokens;
    for (std::int64_t r = 0; r < in.batch; ++r) {
      auto& keys = keys_.size() > static_cast<std::size_t>(r) && in.use_cache ? keys_[static_cast<std::size_t>(r)] : scratch_;
      if (!in.use_cache) scratch_.clear();
      EXPECT_EQ(static_cast<std::int64_t>(keys.size()), in.past);
      for (std::int64_t j = 0; j < in.tokens; ++j) keys.push_back(in.ids[static_cast<std::size_t>(r * in.tokens + j)]);
      EXPECT_LE(static_cast<std::int64_t>(keys.size()), in.use_cache ? capacity_ : S);
      for (std::int64_t j = 0; j < in.tokens; ++j) {
        std::int64_t sum = 0;
        for (std::int64_t u = 0; u <= in.past + j; ++u)
          if (in.key_mask.empty() || in.key_mask[static_cast<std::size_t>(r * S + u)]) sum += keys[static_cast<std::size_t>(u)];
        const auto pos = in.positions[static_cast<std::size_t>(r * in.tokens + j)];
        t.data<float>()[(r * in.tokens + j) * V_ + (sum + 3 * pos) % V_] = 1.0f;
      }
    }
    return t;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> calls;
  int resets = 0;

 private:
  std::int64_t V_, capacity_ = 0;
  bool cache_;
  std::vector<std::vector<std::int32_t>> keys_;
  std::vector<std::int32_t> scratch_;
};

// The same rule computed directly, for one unpadded row.
std::vector<std::int32_t> expected_lm(std::vector<std::int32_t> seq, std::int64_t V, int n) {
  std::vector<std::int32_t> out;
  for (int i = 0; i < n; ++i) {
    const std::int64_t sum = std::accumulate(seq.begin(), seq.end(), std::int64_t{0});
    const auto next = static_cast<std::int32_t>((sum + 3 * static_cast<std::int64_t>(seq.size() - 1)) % V);
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

ArOptions ar(std::int64_t n) {
  ArOptions o;
  o.max_new_tokens = n;
  o.pad_id = 0;
  return o;
}

TEST(ArLoop, GreedyFollowsTheModelAndStopsAtLength) {
  FakeLm m(50, false);
  const auto r = generate_autoregressive(m, {{4, 7, 9}}, ar(6));
  EXPECT_EQ(r[0].tokens, expected_lm({4, 7, 9}, 50, 6));
  EXPECT_EQ(r[0].finish_reason, "length");
}

TEST(ArLoop, CachePrefillsOnceThenFeedsOneSlotPerStep) {
  FakeLm m(50, true);
  const auto r = generate_autoregressive(m, {{4, 7, 9}}, ar(4));
  EXPECT_EQ(r[0].tokens, expected_lm({4, 7, 9}, 50, 4));
  EXPECT_EQ(m.resets, 1);
  EXPECT_EQ(m.calls, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 3}, {3, 1}, {4, 1}, {5, 1}}));
}

TEST(ArLoop, MixedLengthBatchEqualsSingleRunsWithAndWithoutCache) {
  const std::vector<std::vector<std::int32_t>> prompts{{4, 7, 9, 1, 1}, {5}, {8, 2, 33}};
  for (bool cache : {false, true}) {
    FakeLm batch(97, cache);
    const auto r = generate_autoregressive(batch, prompts, ar(7));
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      FakeLm single(97, cache);
      EXPECT_EQ(r[i].tokens, generate_autoregressive(single, {prompts[i]}, ar(7))[0].tokens) << i << cache;
      EXPECT_EQ(r[i].tokens, expected_lm(prompts[i], 97, 7)) << i << cache;
    }
  }
}

TEST(ArLoop, StopsAtEosAndOtherRowsContinue) {
  // Prompt {4,7,9} predicts 26 (= 20 + 3*2), then 5 (= (46 + 9) % 50): make 5 the eos id.
  ASSERT_EQ(expected_lm({4, 7, 9}, 50, 2), (std::vector<std::int32_t>{26, 5}));
  FakeLm m(50, true);
  auto o = ar(6);
  o.eos_ids = {5};
  const auto r = generate_autoregressive(m, {{4, 7, 9}, {2, 2}}, o);
  EXPECT_EQ(r[0].tokens, (std::vector<std::int32_t>{26, 5}));
  EXPECT_EQ(r[0].finish_reason, "eos");
  EXPECT_EQ(r[1].tokens, expected_lm({2, 2}, 50, 6));
  EXPECT_EQ(r[1].finish_reason, "length");
}

TEST(ArLoop, StopsAtAStopString) {
  FakeLm m(50, false);
  auto o = ar(6);
  o.stop_strings = {"<5>"};
  o.detokenize = [](const std::vector<std::int32_t>& ids) {
    std::string s;
    for (auto i : ids) s += "<" + std::to_string(i) + ">";
    return s;
  };
  const auto r = generate_autoregressive(m, {{4, 7, 9}}, o);
  EXPECT_EQ(r[0].tokens, (std::vector<std::int32_t>{26, 5}));
  EXPECT_EQ(r[0].finish_reason, "stop");
}

}  // namespace
}  // namespace sonde
