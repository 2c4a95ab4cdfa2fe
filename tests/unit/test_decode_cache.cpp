// The cached diffusion modes (block-cache, dual-cache) of the block-wise loop on a fake forward
// that keeps a slot cache the way the model does: which forwards a block gets (a refresh at its
// first step, then ranges), which slots each recomputes, that a model without a slot cache is
// refused, and that rows move in lockstep yet decode alone as in a batch.
#include <sonde/decode.h>
#include <sonde/error.h>

#include <gtest/gtest.h>

#include <functional>

namespace sonde {
namespace {

// Logits of slot j from (position, a hash of the keys the row attends over). A slot's key is
// written by the forwards that compute it (a refresh: every slot, a range: its own) and mixes its
// id with the row's canvas as that forward saw it, as a deep layer's K depends on the whole
// sequence; a range forward thus reads stale keys outside the range, as a real K/V cache does.
class SlotCacheFake : public DecodeForward {
 public:
  using Fill = std::function<void(std::int32_t pos, std::uint64_t keys, float* row)>;
  struct Call {
    bool fill = false;
    std::int64_t first = 0, tokens = 0;
  };
  SlotCacheFake(std::int64_t V, std::int32_t mask, Fill fill, bool cache = true)
      : V_(V), mask_(mask), fill_(std::move(fill)), cache_(cache) {}
  std::int64_t vocab_size() const override { return V_; }
  bool has_slot_cache() const override { return cache_; }
  Tensor forward(const StepInput& in) override {
    calls.push_back({in.fill_cache, in.first_slot, in.tokens});
    const std::int64_t N = in.slots > 0 ? in.slots : in.tokens;
    if (in.slots == 0) {
      ids_.assign(static_cast<std::size_t>(in.batch * N), mask_);
      keys_.assign(ids_.size(), 0);
    }
    if (in.slots > 0 && static_cast<std::int64_t>(keys_.size()) != in.batch * N) throw std::runtime_error("no refresh");
    auto real = [&](std::size_t at) { return in.key_mask.empty() || in.key_mask[at] != 0; };
    Tensor out(DType::f32, Shape{in.batch, in.tokens, V_});
    for (std::int64_t r = 0; r < in.batch; ++r) {
      std::uint64_t ctx = 0;
      for (std::int64_t t = 0; t < in.tokens; ++t)
        ids_[static_cast<std::size_t>(r * N + in.first_slot + t)] = in.ids[static_cast<std::size_t>(r * in.tokens + t)];
      for (std::int64_t j = 0; j < N; ++j) {
        const auto at = static_cast<std::size_t>(r * N + j);
        if (real(at) && ids_[at] != mask_) ctx = ctx * 31 + static_cast<std::uint64_t>(ids_[at]) + 1;
      }
      for (std::int64_t t = 0; t < in.tokens; ++t) {
        const auto at = static_cast<std::size_t>(r * N + in.first_slot + t);
        keys_[at] = static_cast<std::uint64_t>(ids_[at]) * 1000003u ^ ctx;
      }
      std::uint64_t h = 0;
      for (std::int64_t j = 0; j < N; ++j) {
        const auto at = static_cast<std::size_t>(r * N + j);
        if (real(at)) h = h * 31 + keys_[at];
      }
      for (std::int64_t t = 0; t < in.tokens; ++t)
        fill_(in.positions[static_cast<std::size_t>(r * in.tokens + t)], h, out.data<float>() + (r * in.tokens + t) * V_);
    }
    return out;
  }
  std::vector<Call> calls;

 private:
  std::int64_t V_;
  std::int32_t mask_;
  Fill fill_;
  bool cache_;
  std::vector<std::int32_t> ids_;   // [B, N]: each slot's id at its last write
  std::vector<std::uint64_t> keys_;  // [B, N]
};

DiffusionOptions cache_opts(DiffusionMode mode, std::int64_t new_tokens, std::int64_t steps, std::int64_t block) {
  DiffusionOptions o;
  o.mode = mode;
  o.block_size = block;
  o.max_new_tokens = new_tokens;
  o.steps = steps;
  o.sampling.alg = DiffusionAlg::MaskgitPlus;
  o.mask_id = 7;
  o.pad_id = 6;
  return o;
}

// Confidence on token 1 grows with the position, whatever the keys.
void rising_slot(std::int32_t pos, std::uint64_t, float* row) { row[1] = 0.5f * static_cast<float>(pos); }

void hashed(std::int32_t pos, std::uint64_t keys, float* row) {
  const auto h = keys * 2654435761u + static_cast<std::uint64_t>(pos) * 40503u;
  for (int v = 0; v < 7; ++v) row[v] = static_cast<float>((h >> (v * 3)) % 11) * 0.7f;
}

TEST(DiffusionCache, RefreshAtEachBlockStartThenRanges) {
  // Prompt of 2, 12 new tokens in blocks of 4, 2 steps per block: N = 14, blocks at slots 2, 6, 10.
  for (auto mode : {DiffusionMode::BlockCache, DiffusionMode::DualCache}) {
    SlotCacheFake m(8, 7, rising_slot);
    std::vector<std::int64_t> recomputed;
    diffusion_generate(m, {{1, 2}}, cache_opts(mode, 12, 6, 4), [&](const DiffusionStep& s) { recomputed.push_back(s.recomputed[0]); });
    ASSERT_EQ(m.calls.size(), 6u);
    const bool dual = mode == DiffusionMode::DualCache;
    for (std::size_t i = 0; i < 6; i += 2) {
      EXPECT_TRUE(m.calls[i].fill) << i;
      EXPECT_EQ(m.calls[i].tokens, 14) << i;
      EXPECT_EQ(recomputed[i], 14);
      const std::int64_t lo = 2 + 4 * static_cast<std::int64_t>(i / 2);
      EXPECT_FALSE(m.calls[i + 1].fill);
      EXPECT_EQ(m.calls[i + 1].first, lo - 1);  // the slot before the block predicts its first slot
      EXPECT_EQ(m.calls[i + 1].tokens, dual ? 5 : 14 - (lo - 1));
      EXPECT_EQ(recomputed[i + 1], m.calls[i + 1].tokens);
    }
  }
}

TEST(DiffusionCache, EqualsBlockModeWhenLogitsIgnoreTheKeys) {
  // The cache only changes which keys a slot sees; logits that do not look at them give block
  // mode's commits exactly, step for step.
  for (auto mode : {DiffusionMode::BlockCache, DiffusionMode::DualCache}) {
    SlotCacheFake plain(8, 7, rising_slot), cached(8, 7, rising_slot);
    std::vector<std::vector<std::int64_t>> a, b;
    diffusion_generate(plain, {{1, 2}}, cache_opts(DiffusionMode::Block, 12, 6, 4), [&](const DiffusionStep& s) { a.push_back(s.transfer[0]); });
    diffusion_generate(cached, {{1, 2}}, cache_opts(mode, 12, 6, 4), [&](const DiffusionStep& s) { b.push_back(s.transfer[0]); });
    EXPECT_EQ(a, b);
  }
}

TEST(DiffusionCache, StaleKeysChangeTheResultAsTheApproximationSays) {
  // Logits that hash the keys: block mode sees every commit at once, the cached modes only after
  // a refresh or inside their range; the fake must notice (else the test above proves nothing).
  auto run = [](DiffusionMode mode) {
    SlotCacheFake m(8, 7, hashed);
    auto o = cache_opts(mode, 12, 12, 4);
    return diffusion_generate(m, {{1, 2}}, o).completions[0];
  };
  const auto block = run(DiffusionMode::Block);
  EXPECT_TRUE(run(DiffusionMode::BlockCache) != block || run(DiffusionMode::DualCache) != block);
}

TEST(DiffusionCache, RefusedWithoutASlotCache) {
  SlotCacheFake m(8, 7, rising_slot, /*cache=*/false);
  try {
    diffusion_generate(m, {{1, 2}}, cache_opts(DiffusionMode::DualCache, 8, 8, 4));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("dual-cache"), std::string::npos) << e.what();
  }
}

// Under a threshold rows fill their blocks at different steps; with a cache they wait for each
// other at block ends (the cache's boundary is the batch's), and each still gets its result alone.
TEST(DiffusionCache, LockstepRowDecodesAloneAsInABatch) {
  for (auto mode : {DiffusionMode::BlockCache, DiffusionMode::DualCache})
    for (auto alg : {DiffusionAlg::ConfidenceThreshold, DiffusionAlg::TopkMargin}) {
      auto o = cache_opts(mode, 12, 6, 5);
      o.sampling.alg = alg;
      o.sampling.temperature = 0.8;
      if (alg == DiffusionAlg::ConfidenceThreshold) o.threshold = 0.3;
      else o.tokens_per_step = 2;
      o.seeds = {11, 12};
      SlotCacheFake m(8, 7, hashed);
      std::int64_t waits = 0;
      const auto both = diffusion_generate(m, {{1, 2, 3, 4}, {5}}, o, [&](const DiffusionStep& s) {
        for (std::size_t r = 0; r < 2; ++r) waits += s.block[r] >= 0 && s.transfer[r].empty();
        if (s.block[0] >= 0 && s.block[1] >= 0) { EXPECT_EQ(s.block[0], s.block[1]); }  // one block for the batch
      });
      if (alg == DiffusionAlg::ConfidenceThreshold) { EXPECT_GT(waits, 0) << "the case should make a row wait"; }
      for (std::size_t r = 0; r < 2; ++r) {
        auto one = o;
        one.seeds = {o.seeds[r]};
        const std::vector<std::int32_t> prompt(both.sequences[r].begin(), both.sequences[r].end() - 12);
        SlotCacheFake alone_model(8, 7, hashed);
        const auto alone = diffusion_generate(alone_model, {prompt}, one);
        EXPECT_EQ(alone.completions[0], both.completions[r])
            << diffusion_mode_name(mode) << " alg " << static_cast<int>(alg) << " row " << r;
      }
    }
}

TEST(DiffusionCache, ModeNames) {
  EXPECT_EQ(parse_diffusion_mode("block-cache"), DiffusionMode::BlockCache);
  EXPECT_EQ(parse_diffusion_mode("dual-cache"), DiffusionMode::DualCache);
  EXPECT_EQ(diffusion_mode_name(DiffusionMode::DualCache), "dual-cache");
  EXPECT_EQ(diffusion_cache_name(DiffusionMode::BlockCache), "prefix");
  EXPECT_EQ(diffusion_cache_name(DiffusionMode::Block), "none");
  EXPECT_THROW(parse_diffusion_mode("prefix-cache"), Error);
}

}  // namespace
}  // namespace sonde
