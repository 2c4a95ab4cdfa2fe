// Block mode, confidence_threshold and tokens_per_step of the diffusion loop on fake forwards:
// the block layout and step split, which slots a step may commit, the threshold rule, and that a
// row decodes the same alone and in a batch whose rows leave their blocks at different steps.
#include <sonde/decode.h>
#include <sonde/error.h>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace sonde {
namespace {

// Logits of row r, slot j from a function of (position id, the row's committed ids), so rows
// depend on their own canvas and not on their place in a batch or its padding.
class ContentFake : public DecodeForward {
 public:
  using Fill = std::function<void(std::int32_t pos, std::int64_t content, float* row)>;
  ContentFake(std::int64_t V, std::int32_t mask, Fill fill) : V_(V), mask_(mask), fill_(std::move(fill)) {}
  std::int64_t vocab_size() const override { return V_; }
  Tensor forward(const StepInput& in) override {
    ++calls;
    Tensor t(DType::f32, Shape{in.batch, in.tokens, V_});
    for (std::int64_t r = 0; r < in.batch; ++r) {
      // Unsigned: the hash wraps on long rows, and signed overflow is undefined (UBSan).
      std::uint64_t content = 0;
      for (std::int64_t j = 0; j < in.tokens; ++j) {
        const auto at = static_cast<std::size_t>(r * in.tokens + j);
        const bool real = in.key_mask.empty() || in.key_mask[at];
        if (real && in.ids[at] != mask_) content = content * 31 + static_cast<std::uint64_t>(in.ids[at]) + 1;
      }
      for (std::int64_t j = 0; j < in.tokens; ++j)
        fill_(in.positions[static_cast<std::size_t>(r * in.tokens + j)], static_cast<std::int64_t>(content), t.data<float>() + (r * in.tokens + j) * V_);
    }
    return t;
  }
  int calls = 0;

 private:
  std::int64_t V_;
  std::int32_t mask_;
  Fill fill_;
};

DiffusionOptions block_opts(std::int64_t new_tokens, std::int64_t steps, std::int64_t block, DiffusionAlg alg) {
  DiffusionOptions o;
  o.mode = DiffusionMode::Block;
  o.block_size = block;
  o.max_new_tokens = new_tokens;
  o.steps = steps;
  o.sampling.alg = alg;
  o.mask_id = 7;
  o.pad_id = 6;
  return o;
}

struct Recorded {
  std::vector<std::vector<std::int64_t>> transfer;  // row 0
  std::vector<std::int64_t> block;                  // row 0
  std::vector<std::vector<double>> confidence;      // row 0
  std::vector<bool> last;
};

DiffusionCallback record(Recorded& rec, std::int64_t N) {
  return [&rec, N](const DiffusionStep& s) {
    rec.transfer.push_back(s.transfer[0]);
    rec.block.push_back(s.block[0]);
    rec.confidence.emplace_back(s.confidence.begin(), s.confidence.begin() + N);
    rec.last.push_back(s.last);
  };
}

// Confidence on token 1 grows with the position: each block fills right to left.
void rising(std::int32_t pos, std::int64_t, float* row) { row[1] = 0.5f * static_cast<float>(pos); }

TEST(DiffusionBlocks, LayoutAndStepSplit) {
  auto o = block_opts(40, 40, 16, DiffusionAlg::Entropy);
  auto b = diffusion_blocks(o);
  ASSERT_EQ(b.size(), 3u);  // 16, 16 and a shorter last block of 8
  EXPECT_EQ(b[0].start, 0);
  EXPECT_EQ(b[2].start, 32);
  EXPECT_EQ(b[2].length, 8);
  EXPECT_EQ(b[0].steps, 16);  // steps = tokens: one step per slot
  EXPECT_EQ(b[2].steps, 8);
  o.steps = 5;  // floor(5*16/40) = 2, floor(5*32/40) = 4, 5
  b = diffusion_blocks(o);
  EXPECT_EQ(b[0].steps, 2);
  EXPECT_EQ(b[1].steps, 2);
  EXPECT_EQ(b[2].steps, 1);
  o.steps = 7;  // floor(7*16/40) = 2, floor(7*32/40) = 5, 7: rounded down at each block's end
  b = diffusion_blocks(o);
  EXPECT_EQ(b[0].steps, 2);
  EXPECT_EQ(b[1].steps, 3);
  EXPECT_EQ(b[2].steps, 2);
  o.sampling.alg = DiffusionAlg::ConfidenceThreshold;
  EXPECT_EQ(diffusion_blocks(o)[0].steps, 0);  // not scheduled
  o.mode = DiffusionMode::Exact;
  b = diffusion_blocks(o);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].length, 40);
}

TEST(DiffusionBlocks, LinearCountsInsideABlock) {
  std::vector<std::int64_t> ks;
  for (std::int64_t j = 0; j < 4; ++j) ks.push_back(block_unmask_count(10, 4, j));
  EXPECT_EQ(ks, (std::vector<std::int64_t>{2, 3, 2, 3}));
  for (std::int64_t j = 0; j < 8; ++j) EXPECT_EQ(block_unmask_count(8, 8, j), 1);
}

TEST(DiffusionBlockMode, CommitsOnlyInsideTheCurrentBlock) {
  ContentFake m(8, 7, rising);
  Recorded rec;
  const std::int64_t T = 2, N = T + 12;
  diffusion_generate(m, {{1, 2}}, block_opts(12, 6, 4, DiffusionAlg::MaskgitPlus), record(rec, N));
  ASSERT_EQ(rec.transfer.size(), 6u);  // 3 blocks of 4 slots, 2 steps each, 2 slots per step
  EXPECT_EQ(m.calls, 6);
  EXPECT_EQ(rec.block, (std::vector<std::int64_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(rec.transfer[0], (std::vector<std::int64_t>{5, 4}));  // the block's rightmost first
  EXPECT_EQ(rec.transfer[1], (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(rec.transfer[2], (std::vector<std::int64_t>{9, 8}));
  EXPECT_EQ(rec.transfer[5], (std::vector<std::int64_t>{11, 10}));
  EXPECT_FALSE(std::isnan(rec.confidence[0][5]));
  EXPECT_TRUE(std::isnan(rec.confidence[0][6]));  // beyond the block: no confidence
  EXPECT_TRUE(std::isnan(rec.confidence[2][5]));  // a full block: none either
  EXPECT_TRUE(rec.last[5]);
  EXPECT_FALSE(rec.last[4]);
}

TEST(DiffusionBlockMode, OriginFillsEveryBlockByItsLastStep) {
  ContentFake m(8, 7, rising);
  Recorded rec;
  auto o = block_opts(12, 9, 4, DiffusionAlg::Origin);
  o.seeds = {5};
  const auto r = diffusion_generate(m, {{1, 2}}, o, record(rec, 14));
  for (auto t : r.completions[0]) EXPECT_NE(t, 7);
  EXPECT_EQ(rec.block, (std::vector<std::int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
  for (std::size_t i = 0; i < rec.transfer.size(); ++i)
    for (auto j : rec.transfer[i]) EXPECT_EQ((j - 2) / 4, rec.block[i]) << "step " << i << " slot " << j;
}

TEST(DiffusionThreshold, CommitsEverySlotAboveItAndAlwaysTheBest) {
  // Positions 2..5 are sure of token 3 (p ~ 0.99), 6..9 are not (p ~ 0.2): the first step commits
  // the four sure slots of the first block (slots 3..6 after the shift), later steps one at a time.
  ContentFake m(8, 7, [](std::int32_t pos, std::int64_t, float* row) {
    if (pos >= 2 && pos <= 5) row[3] = 8.0f;
    else row[pos % 5] = 0.5f;
  });
  Recorded rec;
  auto o = block_opts(8, 8, 8, DiffusionAlg::ConfidenceThreshold);
  o.threshold = 0.9;
  diffusion_generate(m, {{1, 2, 4}}, o, record(rec, 11));
  ASSERT_GE(rec.transfer.size(), 2u);
  EXPECT_EQ(rec.transfer[0], (std::vector<std::int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(rec.transfer[1].size(), 1u);  // none above: the most confident alone
  EXPECT_EQ(rec.transfer.size(), 5u);     // 4 + 1 + 1 + 1 + 1
  EXPECT_EQ(m.calls, 5);
  EXPECT_TRUE(rec.last.back());
}

TEST(DiffusionThreshold, ThresholdOneCommitsOneSlotPerStep) {
  ContentFake m(8, 7, rising);
  Recorded rec;
  auto o = block_opts(8, 8, 4, DiffusionAlg::ConfidenceThreshold);
  o.threshold = 1.0;
  diffusion_generate(m, {{1, 2}}, o, record(rec, 10));
  ASSERT_EQ(rec.transfer.size(), 8u);
  for (const auto& t : rec.transfer) EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(rec.block, (std::vector<std::int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(DiffusionTokensPerStep, FixedCountPerStepAndBlock) {
  ContentFake m(8, 7, rising);
  Recorded rec;
  auto o = block_opts(10, 10, 5, DiffusionAlg::Entropy);
  o.tokens_per_step = 2;
  diffusion_generate(m, {{1, 2}}, o, record(rec, 12));
  std::vector<std::size_t> sizes;
  for (const auto& t : rec.transfer) sizes.push_back(t.size());
  EXPECT_EQ(sizes, (std::vector<std::size_t>{2, 2, 1, 2, 2, 1}));  // blocks of 5: 2 + 2 + 1
  EXPECT_EQ(m.calls, 6);
  o.mode = DiffusionMode::Exact;  // the whole generation is one block
  m.calls = 0;
  diffusion_generate(m, {{1, 2}}, o);
  EXPECT_EQ(m.calls, 5);
}

// Rows leave their blocks at different steps under a threshold; each row must still get what it
// gets alone (seeded sampling, different prompt lengths so the batch left-pads one of them).
TEST(DiffusionThreshold, ARowDecodesAloneAsInABatch) {
  auto fill = [](std::int32_t pos, std::int64_t content, float* row) {
    const auto h = static_cast<std::uint64_t>(content) * 2654435761u + static_cast<std::uint64_t>(pos) * 40503u;
    for (int v = 0; v < 7; ++v) row[v] = static_cast<float>((h >> (v * 3)) % 11) * 0.7f;
  };
  for (auto alg : {DiffusionAlg::ConfidenceThreshold, DiffusionAlg::TopkMargin, DiffusionAlg::Origin}) {
    auto o = block_opts(12, 6, 5, alg);
    o.sampling.temperature = 0.8;
    if (alg == DiffusionAlg::ConfidenceThreshold) o.threshold = 0.3;
    ContentFake m(8, 7, fill);
    o.seeds = {11, 12};
    const auto both = diffusion_generate(m, {{1, 2, 3, 4}, {5}}, o);
    for (std::size_t r = 0; r < 2; ++r) {
      auto one = o;
      one.seeds = {o.seeds[r]};
      const std::vector<std::int32_t> prompt(both.sequences[r].begin(), both.sequences[r].end() - 12);
      const auto alone = diffusion_generate(m, {prompt}, one);
      EXPECT_EQ(alone.completions[0], both.completions[r]) << "alg " << static_cast<int>(alg) << " row " << r;
    }
  }
}

TEST(DiffusionOptionsCheck, RefusesWhatNoLoopCanRun) {
  auto o = block_opts(64, 64, 32, DiffusionAlg::Entropy);
  EXPECT_NO_THROW(check_diffusion_options(o));
  o.steps = 1;  // two blocks need two steps
  EXPECT_THROW(check_diffusion_options(o), Error);
  o.steps = 64;
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    o.threshold = bad;
    EXPECT_THROW(check_diffusion_options(o), Error) << bad;
  }
  o.threshold = 1.0;
  o.tokens_per_step = 4;
  o.sampling.alg = DiffusionAlg::Origin;
  EXPECT_THROW(check_diffusion_options(o), Error);
  o.sampling.alg = DiffusionAlg::Entropy;
  EXPECT_NO_THROW(check_diffusion_options(o));
  o.block_size = 0;
  EXPECT_THROW(check_diffusion_options(o), Error);
}

}  // namespace
}  // namespace sonde
