// A denoising step runs the final norm and the LM head on the slots it reads alone
// (StepInput::logits_from, logits_to): its rows must be the full head's (bit for bit on a
// batch-invariant backend), a tapped or edited head keeps every slot, and whole generations of
// every diffusion loop and mode equal those whose forwards run the head at every slot. The
// full-head runs are the independent side here; tests/reference's goldens check both against
// PyTorch (the model tests of generation).
#include <sonde/decode.h>
#include <sonde/edits.h>
#include <sonde/session.h>
#include <sonde/session_decode.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

// Two rows of 8 slots, the second left-padded by 3.
ForwardInput canvas() {
  ForwardInput in;
  in.batch = 2;
  in.tokens = 8;
  in.ids = {161, 136, 882, 183, 188, 154, 925, 17, 0, 0, 0, 776, 1012, 1190, 44, 9};
  in.positions = {0, 1, 2, 3, 4, 5, 6, 7, 1, 1, 1, 0, 1, 2, 3, 4};
  in.mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1};
  return in;
}

// Slots [from, to) of `full` [B, T, V] against `part` [B, to - from, V].
void expect_rows(const Tensor& full, const Tensor& part, std::int64_t from, std::int64_t to, bool exact) {
  const std::int64_t B = full.shape()[0], T = full.shape()[1], V = full.shape()[2], n = to - from;
  ASSERT_EQ(part.shape(), (Shape{B, n, V}));
  for (std::int64_t r = 0; r < B; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      const float* want = full.data<float>() + (r * T + from + j) * V;
      const float* got = part.data<float>() + (r * n + j) * V;
      if (exact) {
        EXPECT_EQ(std::memcmp(want, got, static_cast<std::size_t>(V) * sizeof(float)), 0) << "row " << r << " slot " << from + j;
        continue;
      }
      double err = 0, scale = 0;
      for (std::int64_t v = 0; v < V; ++v) {
        err = std::max(err, static_cast<double>(std::abs(want[v] - got[v])));
        scale = std::max(scale, static_cast<double>(std::abs(want[v])));
      }
      EXPECT_LE(err / scale, 1e-5) << "row " << r << " slot " << from + j;
    }
}

TEST(HeadSlots, RowsAreTheFullHeadsRows) {
  for (const std::string arch : {"dream", "llada"}) {
    const auto model = made_model(arch, "tiny", 23);
    for (const auto& backend : built_backends()) {
      SCOPED_TRACE(arch + " on " + backend);
      auto session = Session::open(SessionOptions{model.string(), backend, 1, plugin_root().string()});
      const bool exact = backend != "cpu-blas";
      ForwardInput in = canvas();
      const Tensor full = session->forward(in, true, {}, {});
      ASSERT_EQ(full.shape(), (Shape{2, 8, session->config().vocab_size}));
      in.logits_from = 2;
      in.logits_to = 6;
      expect_rows(full, session->forward(in, true, {}, {}), 2, 6, exact);
      // A cached mode's refresh (a whole-canvas forward that fills the slot cache) alike.
      KvCache cache = session->new_kv_cache(2, 8);
      expect_rows(full, session->forward_cached(in, cache, {}, {}), 2, 6, exact);
      in.logits_from = 7;
      in.logits_to = 8;
      expect_rows(full, session->forward(in, true, {}, {}), 7, 8, exact);
    }
  }
}

TEST(HeadSlots, ATappedOrEditedHeadKeepsEverySlot) {
  const auto model = made_model("dream", "tiny", 23);
  auto session = Session::open(SessionOptions{model.string(), "reference", 1, plugin_root().string()});
  const std::int64_t V = session->config().vocab_size;
  ForwardInput in = canvas();
  in.logits_from = 2;
  in.logits_to = 6;
  for (const std::string hook : {"hook_logits", "ln_final.hook_out"}) {
    SCOPED_TRACE(hook);
    Shape seen;
    const Tensor logits = session->forward(in, true, {hook}, [&](const std::string& h, const TensorView& v) {
      if (h == hook) seen = v.shape;
    });
    EXPECT_EQ(seen[1], 8);
    EXPECT_EQ(logits.shape(), (Shape{2, 8, V}));
  }
  Edit at_head;
  at_head.hook = "ln_final.hook_out";
  at_head.op = EditOp::Scale;
  at_head.scale = 2.0f;
  session->set_edits({at_head});
  EXPECT_EQ(session->forward(in, true, {}, {}).shape(), (Shape{2, 8, V}));
  // An edit before the head still lets it run on the range alone, on the edited residual.
  Edit before = at_head;
  before.hook = "blocks.0.hook_resid_post";
  session->set_edits({before});
  ForwardInput all = canvas();
  const Tensor full = session->forward(all, true, {}, {});
  expect_rows(full, session->forward(in, true, {}, {}), 2, 6, true);
}

// The session's forwards, as the loop asks for them or with the head at every slot; the rows of
// logits each returned.
class HeadRecorder : public DecodeForward {
 public:
  HeadRecorder(Session& s, bool every_slot) : inner_(s), every_slot_(every_slot) {}
  std::int64_t vocab_size() const override { return inner_.vocab_size(); }
  bool has_kv_cache() const override { return inner_.has_kv_cache(); }
  void reset_cache(std::int64_t batch, std::int64_t capacity) override { inner_.reset_cache(batch, capacity); }
  bool has_slot_cache() const override { return inner_.has_slot_cache(); }
  Tensor forward(const StepInput& in) override {
    StepInput x = in;
    if (every_slot_) x.logits_from = x.logits_to = 0;
    Tensor t = inner_.forward(x);
    if (!t.empty()) fewer += t.shape()[1] < in.tokens;
    ++forwards;
    return t;
  }
  int forwards = 0, fewer = 0;  // forwards, and those whose head ran on fewer slots than they computed

 private:
  SessionDecodeForward inner_;
  bool every_slot_;
};

struct Case {
  std::string name;
  DiffusionOptions o;
};

std::vector<Case> cases(const Session& s) {
  DiffusionOptions base;
  base.loop = s.info().diffusion_loop;
  base.mask_id = static_cast<std::int32_t>(s.info().mask_token_id);
  base.pad_id = static_cast<std::int32_t>(s.config().pad_token_id.value_or(0));
  base.max_new_tokens = 12;
  base.steps = 6;
  base.seeds = {3, 4};
  std::vector<Case> out;
  if (base.loop == DiffusionLoop::SemiArRemasking) {
    base.block_length = 4;
    out.push_back({"low_confidence", base});
    auto random = base;
    random.remasking = Remasking::Random;
    random.sampling.temperature = 0.7;
    out.push_back({"random, gumbel", random});
    auto cfg = base;
    cfg.cfg_scale = 1.5;
    out.push_back({"cfg", cfg});
    auto dual = base;
    dual.mode = DiffusionMode::DualCache;
    dual.remasking_threshold = 0.01;
    out.push_back({"dual cache, threshold", dual});
    return out;
  }
  base.sampling.alg = DiffusionAlg::Entropy;
  out.push_back({"exact, entropy", base});
  auto origin = base;
  origin.sampling.alg = DiffusionAlg::Origin;
  origin.sampling.temperature = 0.5;
  out.push_back({"exact, origin", origin});
  auto block = base;
  block.mode = DiffusionMode::Block;
  block.block_size = 4;
  out.push_back({"block", block});
  auto dual = block;
  dual.mode = DiffusionMode::DualCache;
  dual.tokens_per_step = 2;
  out.push_back({"dual cache, 2 a step", dual});
  return out;
}

TEST(HeadSlots, GenerationsEqualThoseWithTheHeadAtEverySlot) {
  for (const std::string arch : {"dream", "llada"}) {
    const auto model = made_model(arch, "tiny", 29);
    const auto built = built_backends();
    for (const std::string backend : {"reference", "threaded"}) {
      if (std::find(built.begin(), built.end(), backend) == built.end()) continue;
      auto session = Session::open(SessionOptions{model.string(), backend, 2, plugin_root().string()});
      for (const auto& c : cases(*session)) {
        SCOPED_TRACE(arch + " on " + backend + ": " + c.name);
        const std::vector<std::vector<std::int32_t>> prompts{{5, 17, 99, 310, 42}, {7, 8}};
        HeadRecorder ranged(*session, false), every(*session, true);
        const auto got = diffusion_generate(ranged, prompts, c.o);
        const auto want = diffusion_generate(every, prompts, c.o);
        EXPECT_EQ(got.sequences, want.sequences);
        EXPECT_EQ(ranged.forwards, every.forwards);
        EXPECT_EQ(every.fewer, 0);
        EXPECT_GT(ranged.fewer, 0) << "no forward ran the head on fewer slots than it computed";
      }
    }
  }
}

}  // namespace
}  // namespace sonde::test
