// A batch's new keys and values go into its KV cache in place (issue 27): the decode forward's
// Concat of the cached past with the new slot is written over the cache's rows, a strided view, so
// the past is not copied every step, and the threaded attention reads that strided past where it
// is. Checked on every backend: the op contract (a Concat into rows that lie apart, an Attention
// over keys whose rows lie apart, bit for bit what the dense inputs give), and that the engine's
// batched decode forwards place every Concat (the executor's count in ExecProfile), with each
// request's tokens and logits equal to its solo run.
#include <sonde/engine.h>
#include <sonde/exec_profile.h>
#include <sonde/session_decode.h>

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

Tensor filled(const Shape& s, std::uint32_t seed) {
  Tensor t(DType::f32, s);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (std::int64_t i = 0; i < s.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Node node(OpKind op, const Shape& s) {
  Node n;
  n.op = op;
  n.shape = s;
  n.names = {std::string(op_name(op))};
  return n;
}

// The first `slots` slots of the first `rows` rows of a [B, cap, h, d] buffer: rows cap slots apart.
TensorView rows_of(const Tensor& t, std::int64_t rows, std::int64_t slots) {
  TensorView v = t.view();
  v.shape[0] = rows;
  v.shape[1] = slots;
  return v;
}

TEST(KvInPlace, AConcatIntoACachesRowsAndAnAttentionOverThemGiveTheDenseBits) {
  const auto dir = made_model("qwen2", "tiny", 41);
  constexpr std::int64_t B = 3, cap = 40, P = 29, T = 1, h = 2, d = 16, nh = 4;
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto s = Session::open(SessionOptions{dir.string(), backend, 2, plugin_root().string()});
    Backend& be = s->backend();
    // The cache of 4 rows holds a past of P slots in its first 3; the slots after P + T are
    // sentinels that the concat must leave alone.
    Tensor cache = filled(Shape{B + 1, cap, h, d}, 7);
    const Tensor before = Tensor::copy_of(cache.view());
    const Tensor fresh = filled(Shape{B, T, h, d}, 8);
    const Node cat = node(OpKind::Concat, Shape{B, P + T, h, d});
    const TensorView past = rows_of(cache, B, P), out = rows_of(cache, B, P + T);
    ASSERT_FALSE(out.contiguous());
    be.run(cat, std::vector<TensorView>{past, fresh.view()}, out);
    be.sync();
    for (std::int64_t b = 0; b < B + 1; ++b)
      for (std::int64_t u = 0; u < cap; ++u) {
        const float* got = cache.data<float>() + (b * cap + u) * h * d;
        const bool is_new = b < B && u >= P && u < P + T;
        const float* want = is_new ? fresh.data<float>() + (b * T + u - P) * h * d : before.data<float>() + (b * cap + u) * h * d;
        ASSERT_EQ(std::memcmp(got, want, h * d * sizeof(float)), 0) << "row " << b << " slot " << u;
      }
    // The attention over the cache's rows in place equals the one over dense copies, bit for bit;
    // a left-padding mask (row 1 starts at slot 9) as the engine's shared cache has.
    const Tensor q = filled(Shape{B, T, nh, d}, 9);
    Tensor mask(DType::u8, Shape{B, P + T});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t u = 0; u < P + T; ++u) mask.data<std::uint8_t>()[b * (P + T) + u] = b == 1 && u < 9 ? 0 : 1;
    Node attn = node(OpKind::Attention, Shape{B, T, nh, d});
    attn.params.causal = true;
    const Tensor dense = Tensor::copy_of(out);
    Tensor strided_out(DType::f32, attn.shape), dense_out(DType::f32, attn.shape);
    be.run(attn, std::vector<TensorView>{q.view(), out, out, mask.view()}, strided_out.view());
    be.run(attn, std::vector<TensorView>{q.view(), dense.view(), dense.view(), mask.view()}, dense_out.view());
    be.sync();
    ASSERT_EQ(std::memcmp(strided_out.view().data, dense_out.view().data, dense_out.view().nbytes()), 0);
  }
}

// The session's model with each batched decode forward's graph nodes counted in `profile`.
class Counted : public ForwardingEngineModel {
 public:
  Counted(Session& s, ExecProfile& p) : ForwardingEngineModel(session_engine_model(s)), s_(s), p_(p) {}
  Tensor forward(const EngineBatch& b) override {
    const bool batched_decode = b.step.tokens == 1 && b.step.batch > 1 && b.step.past > 0;
    if (batched_decode) ++batched;
    s_.set_profile(batched_decode ? &p_ : nullptr);
    Tensor out = inner_->forward(b);
    s_.set_profile(nullptr);
    return out;
  }
  std::int64_t batched = 0;

 private:
  Session& s_;
  ExecProfile& p_;
};

TEST(KvInPlace, TheEnginesBatchedDecodeForwardsWriteTheirNewSlotIntoTheCacheCopyingNoPast) {
  const auto dir = made_model("qwen2", "tiny", 42);
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto s = Session::open(SessionOptions{dir.string(), backend, 2, plugin_root().string()});
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 3; ++i) {
      EngineRequest q;
      q.prompt = std::vector<std::int32_t>(static_cast<std::size_t>(5 + 7 * i), 100 + i);
      q.ar.max_new_tokens = 6 + i;
      q.ar.sampling.do_sample = false;
      reqs.push_back(q);
    }
    std::vector<std::vector<float>> solo_logits;
    std::vector<std::vector<std::int32_t>> solo_tokens;
    for (const auto& q : reqs) {
      SessionDecodeForward fwd(*s);
      const auto c = generate_autoregressive(fwd, {q.prompt}, q.ar, [&](const ArStep& st) {
        solo_logits.emplace_back(st.logits.data<float>(), st.logits.data<float>() + st.logits.shape().numel());
      });
      solo_tokens.push_back(c[0].tokens);
    }
    ExecProfile profile;
    Counted model(*s, profile);
    Engine engine(model, EngineOptions{DecodingKind::Autoregressive, 4, 64, 64, 256});
    std::vector<std::shared_ptr<EngineHandle>> hs;
    std::vector<std::vector<std::vector<float>>> per(reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      EngineRequest q = reqs[i];
      q.on_token = [&per, i](std::int64_t, std::int32_t, const Tensor& l) {
        per[i].emplace_back(l.data<float>(), l.data<float>() + l.shape().numel());
      };
      hs.push_back(engine.submit(std::move(q)));
    }
    engine.run_until_idle();
    std::vector<std::vector<float>> all;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(hs[i]->wait().tokens, solo_tokens[i]) << "request " << i;
      all.insert(all.end(), per[i].begin(), per[i].end());
    }
    if (backend != "cpu-blas") {
      EXPECT_TRUE(all == solo_logits) << "logits differ from the solo runs";
    }
    ASSERT_GT(model.batched, 0) << "no decode forward ran more than one row";
    std::int64_t concats = 0, placed = 0;
    for (const auto& n : profile.nodes())
      if (n.op == OpKind::Concat) {
        concats += n.runs;
        placed += n.placed;
      }
    // Two per layer (keys, values) in every batched decode forward, each written into the cache.
    EXPECT_EQ(concats, model.batched * 2 * s->config().num_hidden_layers);
    EXPECT_EQ(placed, concats) << "a batched decode forward's KV concat got a buffer of its own: its past was copied";
  }
}

}  // namespace
}  // namespace sonde::test
