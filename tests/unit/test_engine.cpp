// The step-level engine (engine.h) on a fake model whose logits depend on every key a query may
// see, in order, so a key in the wrong KV slot, a missing mask or a row read from another request
// changes them. Each request's tokens and logits are compared with decode.h's loop running that
// request alone on the same fake (no engine): staggered arrivals, chunked prefill, compaction of
// the shared cache, cancel, refusals, per-request edits and taps, diffusion, and 10,000 short
// random requests with nothing left behind.
#include <sonde/engine.h>
#include <sonde/error.h>

#include "test_scale.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <mutex>
#include <thread>

namespace sonde {
namespace {

constexpr std::int64_t kVocab = 37;
constexpr std::int64_t kMaskId = 2;  // never predicted (a model that predicts its mask id never finishes unmasking)

// Keys: k = id * 0.37 + pos * 0.011, v = id * 0.1; a query's state is sum over the keys it may
// see of v * cos(k * (1 + q)), q its own key; the hook "h" [B, T, 1] carries it (edits act there);
// logits[j] = sin(state * (j + 1)) * 4 for the vocabulary. With past > 0 the earlier keys come from
// the cache the engine gave. Causal for an autoregressive fake; bidirectional for a diffusion one.
class FakeModel : public EngineModel {
 public:
  explicit FakeModel(bool causal = true, bool kv = true) : causal_(causal), kv_(kv) {}
  std::int64_t vocab_size() const override { return kVocab; }
  bool has_kv_cache() const override { return kv_ && causal_; }
  bool has_slot_cache() const override { return false; }
  KvCache new_cache(std::int64_t batch, std::int64_t capacity) const override {
    KvCache c{batch, capacity, 0, {}, {}};
    c.k.emplace_back(DType::f32, Shape{batch, capacity, 1, 1});
    c.v.emplace_back(DType::f32, Shape{batch, capacity, 1, 1});
    return c;
  }
  void set_edits(std::vector<Edit> edits) override {
    edits_ = std::move(edits);
    ++edit_sets;
  }
  Tensor forward(const EngineBatch& b) override {
    const StepInput& in = b.step;
    ++forwards;
    max_batch = std::max(max_batch, in.batch);
    if (in.tokens > 1) max_prompt_work = std::max(max_prompt_work, in.batch * in.tokens);
    const std::int64_t B = in.batch, T = in.tokens, P = in.use_cache ? in.past : 0, S = P + T;
    if (in.use_cache && (!b.cache || b.cache->filled != P || b.cache->batch < B))
      throw std::runtime_error("fake: cache does not hold the past");
    std::vector<float> k(static_cast<std::size_t>(B * S)), v(k.size());
    for (std::int64_t r = 0; r < B; ++r) {
      for (std::int64_t u = 0; u < P; ++u) {
        k[static_cast<std::size_t>(r * S + u)] = b.cache->k[0].data<float>()[r * b.cache->capacity + u];
        v[static_cast<std::size_t>(r * S + u)] = b.cache->v[0].data<float>()[r * b.cache->capacity + u];
      }
      for (std::int64_t t = 0; t < T; ++t) {
        const auto id = in.ids[static_cast<std::size_t>(r * T + t)];
        const auto pos = in.positions[static_cast<std::size_t>(r * T + t)];
        k[static_cast<std::size_t>(r * S + P + t)] = static_cast<float>(id) * 0.37f + static_cast<float>(pos) * 0.011f;
        v[static_cast<std::size_t>(r * S + P + t)] = static_cast<float>(id) * 0.1f;
      }
    }
    if (in.use_cache) {
      for (std::int64_t r = 0; r < B; ++r)
        for (std::int64_t t = 0; t < T; ++t) {
          b.cache->k[0].data<float>()[r * b.cache->capacity + P + t] = k[static_cast<std::size_t>(r * S + P + t)];
          b.cache->v[0].data<float>()[r * b.cache->capacity + P + t] = v[static_cast<std::size_t>(r * S + P + t)];
        }
      b.cache->filled = S;
    }
    Tensor h(DType::f32, Shape{B, T, 1});
    for (std::int64_t r = 0; r < B; ++r)
      for (std::int64_t t = 0; t < T; ++t) {
        const float q = k[static_cast<std::size_t>(r * S + P + t)];
        float acc = 0;
        for (std::int64_t u = 0; u < S; ++u) {
          const bool real = in.key_mask.empty() || in.key_mask[static_cast<std::size_t>(r * S + u)];
          if (!real || (causal_ && u > P + t)) continue;
          acc += v[static_cast<std::size_t>(r * S + u)] * std::cos(k[static_cast<std::size_t>(r * S + u)] * (1 + q));
        }
        h.data<float>()[r * T + t] = acc;
      }
    if (!edits_.empty()) {  // the engine's EditCall decides the rows, as in a real graph
      std::vector<Tensor> storage;
      std::map<std::string, TensorView> feeds;
      edit_feeds(edits_, b.call, B, T, P, in.positions, in.key_mask, storage, feeds);
      for (std::size_t e = 0; e < edits_.size(); ++e) {
        const auto* sel = feeds.at("edit." + std::to_string(e) + ".sel").as<const std::uint8_t>();
        for (std::int64_t i = 0; i < B * T; ++i)
          if (sel[i]) h.data<float>()[i] += edits_[e].scale * edits_[e].operand.data<float>()[0];
      }
    }
    if (b.tap && b.taps.count("h")) b.tap("h", h.view());
    if (!in.need_logits) return Tensor();
    const bool last = in.last_logits_only && T > 1;
    const std::int64_t Tl = last ? 1 : T;
    Tensor out(DType::f32, Shape{B, Tl, kVocab});
    for (std::int64_t r = 0; r < B; ++r)
      for (std::int64_t t = 0; t < Tl; ++t) {
        const float s = h.data<float>()[r * T + (last ? T - 1 : t)];
        for (std::int64_t j = 0; j < kVocab; ++j)
          out.data<float>()[(r * Tl + t) * kVocab + j] = j == kMaskId ? -50.0f : std::sin(s * static_cast<float>(j + 1)) * 4.0f;
      }
    return out;
  }
  std::atomic<std::int64_t> forwards{0}, edit_sets{0};
  std::int64_t max_batch = 0;
  std::int64_t max_prompt_work = 0;  // the most rows x slots one forward of prompts computed

 private:
  bool causal_, kv_;
  std::vector<Edit> edits_;
};

// decode.h's view of the fake for a run with no engine: one request, its own cache and steps.
class Solo : public DecodeForward {
 public:
  explicit Solo(FakeModel& m, std::vector<Edit> edits = {}) : m_(m) {
    for (auto& e : edits) e.owner = -1;
    m_.set_edits(std::move(edits));
  }
  std::int64_t vocab_size() const override { return kVocab; }
  bool has_kv_cache() const override { return m_.has_kv_cache(); }
  void reset_cache(std::int64_t batch, std::int64_t capacity) override { cache_ = m_.new_cache(batch, capacity); }
  void set_taps(const std::vector<std::string>& hooks, HookTap tap) override {
    taps_ = {hooks.begin(), hooks.end()};
    tap_ = std::move(tap);
  }
  Tensor forward(const StepInput& in) override {
    Tensor out = m_.forward(EngineBatch{in, &cache_, nullptr, call_, taps_, tap_});
    ++call_.step;
    return out;
  }
  void begin(std::int64_t prompt_len, std::string id) { call_ = EditCall{{prompt_len}, {std::move(id)}, 0, {}, {}}; }

 private:
  FakeModel& m_;
  KvCache cache_;
  EditCall call_;
  std::set<std::string> taps_;
  HookTap tap_;
};

struct Trace {
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the last-slot logits of each step
  std::string finish;
  std::vector<std::vector<float>> taps;    // "h" of each forward, flattened
};

EngineRequest ar_request(std::vector<std::int32_t> prompt, std::int64_t new_tokens, std::uint64_t seed, bool sample) {
  EngineRequest q;
  q.prompt = std::move(prompt);
  q.ar.max_new_tokens = new_tokens;
  q.ar.seeds = {seed};
  q.ar.sampling.do_sample = sample;
  q.ar.sampling.temperature = 0.8;
  q.ar.eos_ids = {3};
  return q;
}

Trace solo_ar(FakeModel& m, const EngineRequest& q) {
  Solo fwd(m, q.edits);
  fwd.begin(static_cast<std::int64_t>(q.prompt.size()), q.id);
  Trace t;
  if (!q.hooks.empty())
    fwd.set_taps(q.hooks, [&](const std::string&, const TensorView& v) {
      t.taps.emplace_back(v.as<const float>(), v.as<const float>() + v.numel());
    });
  const auto c = generate_autoregressive(fwd, {q.prompt}, q.ar, [&](const ArStep& s) {
    t.logits.emplace_back(s.logits.data<float>(), s.logits.data<float>() + kVocab);
  });
  t.tokens = c[0].tokens;
  t.finish = c[0].finish_reason;
  return t;
}

// Submits requests[i] before engine step arrive[i] and records each one's stream.
std::vector<Trace> run_engine(Engine& engine, std::vector<EngineRequest> requests, const std::vector<std::int64_t>& arrive,
                              std::vector<std::shared_ptr<EngineHandle>>* handles = nullptr) {
  std::vector<Trace> out(requests.size());
  std::vector<std::shared_ptr<EngineHandle>> hs(requests.size());
  std::size_t next = 0;
  for (std::int64_t step = 0;; ++step) {
    for (; next < requests.size() && arrive[next] <= step; ++next) {
      Trace& t = out[next];
      EngineRequest q = requests[next];
      q.on_token = [&t](std::int64_t, std::int32_t, const Tensor& logits) {
        t.logits.emplace_back(logits.data<float>(), logits.data<float>() + kVocab);
      };
      if (!q.hooks.empty())
        q.tap = [&t](const std::string&, const TensorView& v) {
          const Tensor c = Tensor::copy_of(v);
          t.taps.emplace_back(c.data<float>(), c.data<float>() + c.shape().numel());
        };
      hs[next] = engine.submit(std::move(q));
    }
    const bool busy = engine.step();
    if (!busy && next == requests.size()) break;
  }
  for (std::size_t i = 0; i < hs.size(); ++i) {
    const EngineResult r = hs[i]->wait();
    EXPECT_EQ(r.error, "") << "request " << i;
    out[i].tokens = r.tokens;
    out[i].finish = r.finish_reason;
  }
  if (handles) *handles = hs;
  return out;
}

void expect_same(const Trace& solo, const Trace& got, std::size_t i) {
  EXPECT_EQ(solo.tokens, got.tokens) << "request " << i;
  EXPECT_EQ(solo.finish, got.finish) << "request " << i;
  ASSERT_EQ(solo.logits.size(), got.logits.size()) << "request " << i;
  for (std::size_t s = 0; s < solo.logits.size(); ++s)
    ASSERT_EQ(solo.logits[s], got.logits[s]) << "request " << i << " step " << s;  // bit for bit
  EXPECT_EQ(solo.taps, got.taps) << "request " << i;
}

std::vector<std::int32_t> ids(std::mt19937& rng, std::int64_t n) {
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back(4 + static_cast<std::int32_t>(rng() % (kVocab - 4)));
  return out;
}

TEST(Engine, StaggeredArrivalsGiveEachRequestItsSoloBits) {
  std::mt19937 rng(5);
  std::vector<EngineRequest> reqs;
  std::vector<std::int64_t> arrive;
  for (int i = 0; i < 14; ++i) {
    reqs.push_back(ar_request(ids(rng, 1 + static_cast<std::int64_t>(rng() % 30)), 1 + static_cast<std::int64_t>(rng() % 24),
                              100 + static_cast<std::uint64_t>(i), i % 2 == 1));
    arrive.push_back(i == 0 ? 0 : arrive.back() + static_cast<std::int64_t>(rng() % 5));
  }
  reqs[3].ar.stop_strings = {"x"};  // stop strings need a detokenizer: ids 4..9 read as "x"
  reqs[3].ar.detokenize = [](const std::vector<std::int32_t>& t) {
    std::string s;
    for (auto id : t) s += id < 10 ? 'x' : 'a';
    return s;
  };
  reqs[5].hooks = {"h"};
  reqs[5].ar.feed_last = true;
  FakeModel m;
  std::vector<Trace> solo;
  for (const auto& q : reqs) solo.push_back(solo_ar(m, q));
  // Small slots, chunks and context: requests wait, prompts arrive in chunks, the cache compacts.
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 4, 64, 64, 7});
  const auto got = run_engine(engine, reqs, arrive);
  for (std::size_t i = 0; i < reqs.size(); ++i) expect_same(solo[i], got[i], i);
  EXPECT_EQ(m.max_batch, 4);
  std::set<std::string> finishes;
  for (const auto& t : solo) finishes.insert(t.finish);
  EXPECT_TRUE(finishes.count("eos") && finishes.count("length") && finishes.count("stop"));
  const auto st = engine.stats();
  EXPECT_EQ(st.running + st.waiting + st.kv_rows + st.threads, 0);
  EXPECT_EQ(st.finished, 14);
}

TEST(Engine, OneDecodeForwardServesEveryRunningSequence) {
  FakeModel m;
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 8, 64, 128, 256});
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(ar_request({5, 6, 7, static_cast<std::int32_t>(8 + i)}, 10, 1, false));
  for (auto& q : reqs) q.ar.eos_ids.clear();
  const auto got = run_engine(engine, reqs, {0, 0, 0, 0, 0});
  // One forward prefills the five prompts together (they fit the step's budget), then nine decode
  // steps of one forward each serve all five.
  EXPECT_EQ(m.forwards.load(), 1 + 9);
  for (const auto& t : got) EXPECT_EQ(t.tokens.size(), 10u);
}

// The step loop's time breakdown counts what each kind of forward did: prompt tokens without the
// padding, one decode row per running sequence a step.
TEST(Engine, StatsCountPrefillTokensAndDecodeRows) {
  FakeModel m;
  // A chunk of 7: the 4-token prompt goes whole in step 0; the 12-token one in chunks 3 (what is
  // left of step 0's budget), 7, 2.
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 8, 64, 128, 7});
  std::vector<EngineRequest> reqs{ar_request({5, 6, 7, 8}, 6, 1, false),
                                  ar_request({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 3, 1, false)};
  for (auto& q : reqs) q.ar.eos_ids.clear();
  const auto got = run_engine(engine, reqs, {0, 0});
  ASSERT_EQ(got[0].tokens.size(), 6u);
  ASSERT_EQ(got[1].tokens.size(), 3u);
  const auto st = engine.stats();
  EXPECT_EQ(st.prefill_tokens, 16);
  EXPECT_EQ(st.prefill_forwards, 4);
  // Decode rows: the first request's 5 tokens after its first; the second's 2, which start at step
  // 3 beside the first's.
  EXPECT_EQ(st.decode_rows, 5 + 2);
  EXPECT_EQ(st.decode_forwards, 5);
  EXPECT_EQ(st.forwards, st.prefill_forwards + st.decode_forwards);
  EXPECT_GT(st.prefill_s, 0);
  EXPECT_GT(st.decode_s, 0);
  EXPECT_EQ(st.other_forward_s, 0);
  EXPECT_GE(st.wait_s, 0);
}

// Holds the running rows' decode forward until a watched request has its first token (or 5 s).
class FirstTokenWatch : public FakeModel {
 public:
  std::atomic<bool> watching{false}, first_token{false}, held{false}, came_during_decode{false};
  Tensor forward(const EngineBatch& b) override {
    const StepInput& in = b.step;
    if (watching && in.use_cache && in.tokens == 1 && in.past > 0) {
      held = true;
      for (int i = 0; i < 500 && !first_token; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      came_during_decode = came_during_decode || first_token;
    }
    return FakeModel::forward(b);
  }
};

TEST(Engine, ANewRequestsFirstTokenDoesNotWaitForTheRunningRowsDecode) {
  // Time to first token is the prompt's prefill alone: the step runs the prompts first and hands
  // a finished prompt back to its loop at once, which samples while the decode forward runs.
  FirstTokenWatch m;
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 4, 64, 128, 256});
  EngineRequest a = ar_request({5, 6, 7, 8}, 12, 1, false), b = ar_request({9, 10, 11}, 4, 2, false);
  a.ar.eos_ids.clear();
  b.ar.eos_ids.clear();
  b.on_token = [&m](std::int64_t step, std::int32_t, const Tensor&) {
    if (step == 0) m.first_token = true;
  };
  auto ha = engine.submit(a);
  for (int i = 0; i < 3; ++i) engine.step();  // a is decoding
  auto hb = engine.submit(b);
  m.watching = true;
  engine.step();  // b's prompt and a's decode
  m.watching = false;
  engine.run_until_idle();
  EXPECT_TRUE(m.held.load());
  EXPECT_TRUE(m.came_during_decode.load()) << "b's first token came only after the decode forward of the step";
  EXPECT_EQ(ha->wait().tokens, solo_ar(m, a).tokens);
  EXPECT_EQ(hb->wait().tokens, solo_ar(m, b).tokens);
}

// Submits `arrive[i]` before step i, steps until idle, and gives the order in which the requests
// had their first token.
std::vector<std::size_t> first_token_order(Engine& engine, std::vector<EngineRequest> reqs, const std::vector<std::int64_t>& arrive,
                                           std::vector<std::shared_ptr<EngineHandle>>& hs) {
  std::mutex mu;
  std::vector<std::size_t> order;
  std::size_t next = 0;
  for (std::int64_t step = 0;; ++step) {
    for (; next < reqs.size() && arrive[next] <= step; ++next) {
      reqs[next].on_token = [&mu, &order, next](std::int64_t i, std::int32_t, const Tensor&) {
        if (i != 0) return;
        std::lock_guard lk(mu);
        order.push_back(next);
      };
      hs.push_back(engine.submit(reqs[next]));
    }
    if (!engine.step() && next == reqs.size()) break;
  }
  for (auto& h : hs) EXPECT_EQ(h->wait().error, "");
  return order;
}

TEST(Engine, AShortPromptIsPrefilledBeforeALongerOneThatCameFirst) {
  // Shortest remaining prompt first: the 3-token prompt fits the step's budget of 8 whole and is
  // served in the first step; in arrival order it would wait for the 40-token prompt's five chunks.
  FakeModel m;
  std::mt19937 rng(11);
  EngineRequest lng = ar_request(ids(rng, 40), 3, 1, false), shrt = ar_request(ids(rng, 3), 3, 2, false);
  lng.ar.eos_ids.clear();
  shrt.ar.eos_ids.clear();
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 4, 64, 64, 8});
  std::vector<std::shared_ptr<EngineHandle>> hs;
  EXPECT_EQ(first_token_order(engine, {lng, shrt}, {0, 0}, hs), (std::vector<std::size_t>{1, 0}));
  EXPECT_EQ(hs[0]->wait().tokens, solo_ar(m, lng).tokens);
  EXPECT_EQ(hs[1]->wait().tokens, solo_ar(m, shrt).tokens);
}

TEST(Engine, APromptForwardComputesNoMoreThanTheStepsBudgetPaddingIncluded) {
  // 2 + 9 prompt tokens fit a budget of 12, but padded into one forward they would compute
  // 2 x 9 = 18 slots: the 9-token prompt gets a forward of its own.
  FakeModel m;
  std::mt19937 rng(13);
  EngineRequest a = ar_request(ids(rng, 2), 4, 1, false), b = ar_request(ids(rng, 9), 4, 2, false);
  a.ar.eos_ids.clear();
  b.ar.eos_ids.clear();
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 4, 64, 64, 12});
  const auto got = run_engine(engine, {a, b}, {0, 0});
  EXPECT_EQ(m.max_prompt_work, 9);
  expect_same(solo_ar(m, a), got[0], 0);
  expect_same(solo_ar(m, b), got[1], 1);
}

TEST(Engine, ALongPromptIsNotStarvedByShortOnesThatKeepComing) {
  // A new 8-token prompt before every step takes the whole budget of 8 if length alone decides;
  // aged by the steps it waited, the 40-token prompt goes ahead of the short ones after
  // 40 / 8 = 5 steps and is in after five more: its first token comes before the 12th short one's.
  FakeModel m;
  std::mt19937 rng(12);
  std::vector<EngineRequest> reqs{ar_request(ids(rng, 40), 1, 1, false)};
  std::vector<std::int64_t> arrive{0};
  for (int i = 0; i < 30; ++i) {
    reqs.push_back(ar_request(ids(rng, 8), 1, 2 + static_cast<std::uint64_t>(i), false));
    arrive.push_back(i);
  }
  for (auto& q : reqs) q.ar.eos_ids.clear();
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 8, 64, 64, 8});
  std::vector<std::shared_ptr<EngineHandle>> hs;
  const auto order = first_token_order(engine, reqs, arrive, hs);
  ASSERT_EQ(order.size(), reqs.size());
  const auto at = std::find(order.begin(), order.end(), 0u) - order.begin();
  EXPECT_GE(at, 3) << "the long prompt went first: shorter ones were not preferred";
  EXPECT_LE(at, 11) << "the long prompt waited behind " << at << " short ones";
  EXPECT_EQ(hs[0]->wait().tokens, solo_ar(m, reqs[0]).tokens);
}

TEST(Engine, TheSharedCacheMovesBackWhenItsMaskedSlotsCostMoreThanTheMove) {
  // A 40-token and a 4-token prompt end at one slot of the shared cache. While both run nothing
  // moves (no masked slot before the longest row). When the long one leaves, the short row has
  // 36 masked slots before it: one forward's copy of them (1 x 36) outweighs moving its own
  // slots (about 6), so it moves back and later forwards read only its own slots. Its tokens and
  // logits stay its solo run's bit for bit, so the move kept every key in place.
  FakeModel m;
  std::mt19937 rng(21);
  EngineRequest lng = ar_request(ids(rng, 40), 2, 1, false), shrt = ar_request(ids(rng, 4), 30, 2, false);
  lng.ar.eos_ids.clear();
  shrt.ar.eos_ids.clear();
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 2, 64, 128, 64});
  Trace got;
  EngineRequest q = shrt;
  q.on_token = [&got](std::int64_t, std::int32_t, const Tensor& logits) {
    got.logits.emplace_back(logits.data<float>(), logits.data<float>() + kVocab);
  };
  auto hl = engine.submit(lng);
  auto hs = engine.submit(q);
  std::int64_t both_compactions = -1, alone_filled = -1;
  while (engine.step()) {
    const auto st = engine.stats();
    if (st.kv_rows == 2) both_compactions = st.kv_compactions;
    if (st.kv_rows == 1) alone_filled = st.kv_filled;
  }
  EXPECT_EQ(both_compactions, 0) << "rows moved although none had a masked slot to drop";
  EXPECT_GT(alone_filled, 0);
  EXPECT_LT(alone_filled, 40) << "the short row still ends past the long row's 40 slots";
  EXPECT_GE(engine.stats().kv_compactions, 1);
  const EngineResult r = hs->wait();
  got.tokens = r.tokens;
  got.finish = r.finish_reason;
  EXPECT_EQ(hl->wait().tokens, solo_ar(m, lng).tokens);
  expect_same(solo_ar(m, shrt), got, 1);
}

TEST(Engine, SteeredAndUnsteeredRequestsShareAForwardAndEachEqualsItsSoloRun) {
  FakeModel m;
  Edit steer;
  steer.hook = "h";
  steer.op = EditOp::Add;
  steer.scale = 2.5f;
  steer.operand = Tensor(DType::f32, Shape{1, 1});
  steer.operand.data<float>()[0] = 0.7f;
  steer.positions.kind = EditPositions::Kind::Generated;
  EngineRequest plain = ar_request({9, 10, 11, 12}, 12, 7, false), steered = plain;
  plain.ar.eos_ids.clear();
  steered.ar.eos_ids.clear();
  steered.edits = {steer};
  const Trace solo_plain = solo_ar(m, plain), solo_steered = solo_ar(m, steered);
  ASSERT_NE(solo_plain.logits, solo_steered.logits);  // the edit changes the run
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 4, 64, 64, 64});
  const auto before = m.forwards.load();
  const auto got = run_engine(engine, {plain, steered, plain}, {0, 0, 3});
  expect_same(solo_plain, got[0], 0);
  expect_same(solo_steered, got[1], 1);
  expect_same(solo_plain, got[2], 2);
  EXPECT_LT(m.forwards.load() - before, 3 * 12);  // they did share forwards
}

TEST(Engine, CancelInTheMiddleFreesTheSlotAndLeavesOthersAlone) {
  FakeModel m;
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    reqs.push_back(ar_request({5, static_cast<std::int32_t>(6 + i), 7}, 20, static_cast<std::uint64_t>(i), true));
    reqs.back().ar.eos_ids.clear();
  }
  std::vector<Trace> solo;
  for (const auto& q : reqs) solo.push_back(solo_ar(m, q));
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 2, 64, 64, 64});
  std::vector<std::shared_ptr<EngineHandle>> h;
  for (const auto& q : reqs) h.push_back(engine.submit(q));
  for (int s = 0; s < 5; ++s) engine.step();
  EXPECT_EQ(engine.stats().running, 2);
  EXPECT_EQ(engine.stats().waiting, 1);
  EXPECT_TRUE(engine.cancel(h[0]->id()));
  EXPECT_FALSE(h[0]->done());  // a running request ends at the next step
  engine.step();
  EXPECT_TRUE(h[0]->done());
  EXPECT_EQ(h[0]->wait().finish_reason, "cancelled");
  EXPECT_EQ(engine.stats().kv_rows, 2);  // the third took the freed row at once
  EXPECT_EQ(engine.stats().waiting, 0);
  engine.run_until_idle();
  EXPECT_FALSE(engine.cancel(h[0]->id()));
  for (int i = 1; i < 3; ++i) EXPECT_EQ(h[static_cast<std::size_t>(i)]->wait().tokens, solo[static_cast<std::size_t>(i)].tokens);
  // Tokens streamed before the cancel are the first tokens of its solo run.
  std::vector<std::int32_t> streamed;
  while (auto e = h[0]->next()) streamed.push_back(e->token);
  ASSERT_FALSE(streamed.empty());
  EXPECT_EQ(streamed, std::vector<std::int32_t>(solo[0].tokens.begin(), solo[0].tokens.begin() + static_cast<std::ptrdiff_t>(streamed.size())));
  EXPECT_EQ(engine.stats().kv_rows, 0);
}

TEST(Engine, RefusesWithAClearErrorBeyondTheWaitingBoundAndTheContext) {
  FakeModel m;
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 1, 2, 16, 8});
  engine.submit(ar_request({5, 6}, 4, 0, false));
  engine.submit(ar_request({5, 6}, 4, 0, false));
  try {
    EngineRequest q = ar_request({5, 6}, 4, 0, false);
    q.id = "third";
    engine.submit(q);
    FAIL() << "a third waiting request was queued";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("max_waiting 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'third'"), std::string::npos) << e.what();
  }
  try {
    engine.submit(ar_request({5, 6, 7, 8, 9, 10}, 11, 0, false));
    FAIL() << "a request over max_context was queued";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_context of 16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine.submit(ar_request({}, 4, 0, false)), Error);
  EngineRequest both = ar_request({5, 6}, 2, 0, false);
  both.hooks = {"h"};
  both.capture.record_steps = true;
  try {
    engine.submit(both);
    FAIL() << "a request with raw taps and a capture was queued";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not both"), std::string::npos) << e.what();
  }
  engine.run_until_idle();
  EXPECT_EQ(engine.stats().finished, 2);
}

// A front end's view: take() with a timeout returns what has come (nothing before the engine
// steps), events carry their delivery times in order, wait_for() times out while the request
// runs, and on_end is called exactly once whether the request finishes, is cancelled while
// waiting, or is cancelled while running.
TEST(Engine, TimedTakeAndWaitAndOnEndOnEveryPath) {
  FakeModel m;
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 1, 4, 64, 8});
  std::atomic<int> ends[3] = {0, 0, 0};
  std::vector<std::shared_ptr<EngineHandle>> hs;
  for (int i = 0; i < 3; ++i) {
    EngineRequest q = ar_request({5, 6, 7}, 6, 0, false);
    q.ar.eos_ids.clear();
    q.on_end = [&ends, i] { ++ends[i]; };
    hs.push_back(engine.submit(std::move(q)));
  }
  EXPECT_TRUE(hs[0]->take(0.01).empty());  // nothing runs until a step
  EXPECT_FALSE(hs[0]->wait_for(0.01).has_value());
  EXPECT_TRUE(engine.cancel(hs[1]->id()));  // waiting: ends at once
  EXPECT_EQ(ends[1].load(), 1);
  EXPECT_EQ(hs[1]->wait_for(0)->finish_reason, "cancelled");
  engine.step();
  engine.step();
  engine.step();
  const auto first = hs[0]->take(0);
  ASSERT_GE(first.size(), 2u);  // the prefill's token and one decode step's (the next may be sampled)
  EXPECT_EQ(first[0].step, 0);
  EXPECT_EQ(first[1].step, 1);
  EXPECT_GT(first[0].at, 0.0);
  EXPECT_LE(first[0].at, first[1].at);
  EXPECT_EQ(hs[0]->first_at(), first[0].at);
  EXPECT_FALSE(hs[0]->wait_for(0.01).has_value());
  engine.run_until_idle();
  const auto rest = hs[0]->take(0);
  EXPECT_EQ(first.size() + rest.size(), 6u);
  for (const auto& e : rest) EXPECT_GE(e.at, first.back().at);
  EXPECT_TRUE(hs[0]->take(0.01).empty());  // the end is not an event take() returns
  ASSERT_TRUE(hs[0]->wait_for(0).has_value());
  EXPECT_EQ(hs[0]->wait_for(0)->finish_reason, "length");
  EXPECT_EQ(ends[0].load(), 1);
  // The third ran after the first; cancelled while running, it ends at the next step.
  EngineRequest q = ar_request({5, 6, 7}, 40, 0, false);
  std::atomic<int> fourth{0};
  q.on_end = [&fourth] { ++fourth; };
  auto h = engine.submit(std::move(q));
  engine.step();
  EXPECT_EQ(fourth.load(), 0);
  EXPECT_TRUE(engine.cancel(h->id()));
  engine.run_until_idle();
  EXPECT_EQ(fourth.load(), 1);
  EXPECT_EQ(h->wait().finish_reason, "cancelled");
  EXPECT_EQ(ends[2].load(), 1);
  EXPECT_EQ(hs[2]->wait().finish_reason, "length");
}

TEST(Engine, TenThousandShortRandomRequestsLeaveNoSlotRowOrThreadBehind) {
  FakeModel m;
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 8, 64, 24, 16});
  std::mt19937 rng(11);
  std::vector<std::shared_ptr<EngineHandle>> hs;
  std::int64_t cancelled = 0, steps = 0;
  while (hs.size() < 10000) {
    const auto n = static_cast<std::int64_t>(rng() % 6);
    for (std::int64_t i = 0; i < n && hs.size() < 10000; ++i) {
      EngineRequest q = ar_request(ids(rng, 1 + static_cast<std::int64_t>(rng() % 8)), 1 + static_cast<std::int64_t>(rng() % 6),
                                   rng(), rng() % 2 == 0);
      q.events = false;
      try {
        hs.push_back(engine.submit(std::move(q)));
      } catch (const Error&) {
        break;  // the waiting queue is full: step first
      }
      if (rng() % 10 == 0) cancelled += engine.cancel(hs.back()->id()) ? 1 : 0;
    }
    engine.step();
    ++steps;
    if (rng() % 7 == 0 && !hs.empty()) engine.cancel(hs[rng() % hs.size()]->id());
  }
  engine.run_until_idle();
  std::int64_t done = 0;
  for (const auto& h : hs) done += h->done() ? 1 : 0;
  EXPECT_EQ(done, 10000);
  const auto st = engine.stats();
  EXPECT_EQ(st.submitted, 10000);
  EXPECT_EQ(st.finished, 10000);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.waiting, 0);
  EXPECT_EQ(st.kv_rows, 0);
  EXPECT_EQ(st.threads, 0);
  EXPECT_GT(cancelled, 0);
}

TEST(Engine, DiffusionRequestsOfOtherLengthsAndStepsShareForwardsAndKeepTheirSoloBits) {
  FakeModel m(/*causal=*/false);
  std::mt19937 rng(3);
  std::vector<EngineRequest> reqs;
  std::vector<std::int64_t> arrive;
  const DiffusionAlg algs[] = {DiffusionAlg::Origin, DiffusionAlg::MaskgitPlus, DiffusionAlg::TopkMargin, DiffusionAlg::Entropy,
                               DiffusionAlg::ConfidenceThreshold};
  for (int i = 0; i < 10; ++i) {
    EngineRequest q;
    q.prompt = ids(rng, 2 + static_cast<std::int64_t>(rng() % 9));
    q.diffusion.max_new_tokens = 4 + static_cast<std::int64_t>(rng() % 9);
    q.diffusion.steps = q.diffusion.max_new_tokens;
    q.diffusion.mask_id = static_cast<std::int32_t>(kMaskId);
    q.diffusion.sampling.alg = algs[i % 5];
    q.diffusion.sampling.temperature = i % 3 == 0 ? 0.0 : 0.7;
    if (i % 4 == 1) {
      q.diffusion.mode = DiffusionMode::Block;
      q.diffusion.block_size = 3;
    }
    q.diffusion.threshold = 0.2;
    q.diffusion.seeds = {static_cast<std::uint64_t>(40 + i)};
    reqs.push_back(q);
    arrive.push_back(static_cast<std::int64_t>(i) * 2);
  }
  std::vector<std::vector<std::int32_t>> solo;
  std::int64_t solo_forwards = 0;
  for (const auto& q : reqs) {
    Solo fwd(m);
    const auto before = m.forwards.load();
    solo.push_back(diffusion_generate(fwd, {q.prompt}, q.diffusion).completions.at(0));
    solo_forwards += m.forwards.load() - before;
  }
  Engine engine(m, EngineOptions{DecodingKind::MaskedDiffusion, 4, 64, 64, 64});
  const auto before = m.forwards.load();
  const auto got = run_engine(engine, reqs, arrive);
  for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i].tokens, solo[i]) << "request " << i;
  EXPECT_LT(m.forwards.load() - before, solo_forwards);  // requests at different steps shared forwards
  EXPECT_GT(m.max_batch, 1);
}

// Under ThreadSanitizer in CI: submitters and cancellers on 8 threads against the engine's own loop.
TEST(Engine, SubmitAndCancelFromEightThreadsAgainstARunningEngine) {
  FakeModel m;
  Engine engine(m, EngineOptions{DecodingKind::Autoregressive, 4, 1000, 32, 16});
  engine.start();
  std::atomic<std::int64_t> finished{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::shared_ptr<EngineHandle>> mine;
      for (int i = 0; i < 40; ++i) {
        mine.push_back(engine.submit(ar_request(ids(rng, 1 + static_cast<std::int64_t>(rng() % 6)), 1 + static_cast<std::int64_t>(rng() % 8),
                                                rng(), true)));
        if (rng() % 3 == 0) engine.cancel(mine[rng() % mine.size()]->id());
      }
      for (auto& h : mine) {
        while (h->next()) {
        }
        const auto r = h->wait();
        if (r.finish_reason != "error") ++finished;
      }
    });
  for (auto& t : threads) t.join();
  engine.stop();
  EXPECT_EQ(finished.load(), 8 * 40);
  const auto st = engine.stats();
  EXPECT_EQ(st.running + st.waiting + st.kv_rows + st.threads, 0);
}

}  // namespace
}  // namespace sonde
