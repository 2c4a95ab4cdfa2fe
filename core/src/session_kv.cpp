// KV-cached forwards (model-spec §1.3): the graph reads earlier slots' K/V as inputs
// ("past_k.{i}", "past_v.{i}", strided views into the cache) and the taps of this call's
// attn.hook_rot_k / attn.hook_v are copied into the cache at slots [filled, filled + T).
#include <sonde/error.h>
#include <sonde/session.h>

#include <algorithm>

#include "plan_cache.h"

#include <cstring>

namespace sonde {
namespace {

// Copies x [B, T, nkv, d] into cache rows [B, from .. from+T) of a [B, cap, nkv, d] buffer.
void append_rows(Tensor& cache, const TensorView& x, std::int64_t from) {
  const Tensor dense = x.contiguous() && x.dtype == DType::f32 ? Tensor() : to_f32(x);
  const TensorView& src = dense.empty() ? x : dense.view();
  const std::int64_t B = src.shape[0], T = src.shape[1], row = src.shape[2] * src.shape[3];
  const std::int64_t cap = cache.shape()[1];
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(cache.data<float>() + (b * cap + from) * row, src.as<const float>() + b * T * row,
                static_cast<std::size_t>(T * row) * sizeof(float));
}

// Copies rows [from, from + n) of every batch row of src into dst at [to, to + n); both are
// [B, cap, nkv, d] caches.
void copy_rows(Tensor& dst, std::int64_t to, const Tensor& src, std::int64_t from, std::int64_t n) {
  const std::int64_t B = src.shape()[0], row = src.shape()[2] * src.shape()[3];
  const std::int64_t scap = src.shape()[1], dcap = dst.shape()[1];
  for (std::int64_t b = 0; b < B && n > 0; ++b)
    std::memcpy(dst.data<float>() + (b * dcap + to) * row, src.data<float>() + (b * scap + from) * row,
                static_cast<std::size_t>(n * row) * sizeof(float));
}

// The first `past` slots of the first `batch` rows of a [B, cap, nkv, d] cache as a
// [batch, past, nkv, d] strided view.
TensorView past_view(const Tensor& cache, std::int64_t past, std::int64_t batch) {
  TensorView v = cache.view();
  v.shape[0] = batch;
  v.shape[1] = past;  // strides stay those of the full buffer
  return v;
}

// The Concat nodes that put a layer's cached keys (or values) before this call's.
std::vector<PlannedGraph::KvConcat> kv_concats(const Graph& g, const std::vector<std::string>& past_k,
                                               const std::vector<std::string>& past_v) {
  std::map<int, std::pair<std::size_t, bool>> past;  // Input node -> (layer, is V)
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (std::size_t l = 0; l < past_k.size() && g.nodes[i].op == OpKind::Input; ++l) {
      if (g.nodes[i].params.ref == past_k[l]) past[static_cast<int>(i)] = {l, false};
      if (g.nodes[i].params.ref == past_v[l]) past[static_cast<int>(i)] = {l, true};
    }
  std::vector<PlannedGraph::KvConcat> out;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == OpKind::Concat)
      if (auto it = past.find(g.nodes[i].inputs[0]); it != past.end())
        out.push_back({static_cast<int>(i), it->second.first, it->second.second});
  return out;
}

}  // namespace

KvCache Session::new_kv_cache(std::int64_t batch, std::int64_t capacity) const {
  const std::int64_t d = config_.head_dim ? config_.head_dim : config_.hidden_size / config_.num_attention_heads;
  const std::int64_t kv = info_.cache_kv_heads ? info_.cache_kv_heads : config_.num_key_value_heads;
  KvCache c{batch, capacity, 0, {}, {}};
  for (std::int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    c.k.emplace_back(DType::f32, Shape{batch, capacity, kv, d});
    c.v.emplace_back(DType::f32, Shape{batch, capacity, kv, d});
  }
  return c;
}

bool Session::is_past_input(const std::string& ref) const {
  const auto& k = info_.past_k;
  const auto& v = info_.past_v;
  return std::find(k.begin(), k.end(), ref) != k.end() || std::find(v.begin(), v.end(), ref) != v.end();
}

// The graph of an earlier call alike but for its past length, now for `past` slots: the cached
// K/V inputs and the mask grow, and every shape after them follows.
void Session::reshape_past(PlannedGraph& pg, const ForwardInput& in, std::int64_t past) const {
  const std::int64_t d = config_.head_dim ? config_.head_dim : config_.hidden_size / config_.num_attention_heads;
  const Shape kv{in.batch, past, info_.cache_kv_heads ? info_.cache_kv_heads : config_.num_key_value_heads, d};
  pg.past = -1;  // a throw below leaves shapes half done; the next call redoes them
  pg.graph.reshape_inputs([&](const std::string& ref, Shape& shape) {
    if (is_past_input(ref)) shape = kv;
    if (ref == "mask") shape = Shape{in.batch, past + in.tokens};
  });
  pg.past = past;
}

Tensor Session::forward_cached(const ForwardInput& in, KvCache& cache) { return forward_cached(in, cache, {}, {}); }

Tensor Session::forward_cached(const ForwardInput& in, KvCache& cache, const std::set<std::string>& taps,
                               const Executor::Tap& tap, bool need_logits) {
  check_ids(in);
  const std::int64_t P = cache.filled, T = in.tokens;
  // A cache of more rows serves a batch of its first in.batch rows (the engine's shared cache).
  if (in.batch > cache.batch) runtime_error("forward_cached: batch {} but the cache holds {}", in.batch, cache.batch);
  if (P + T > cache.capacity) runtime_error("forward_cached: {} + {} slots exceed the cache capacity {}", P, T, cache.capacity);
  if (static_cast<std::int64_t>(in.positions.size()) != in.batch * T)
    runtime_error("forward_cached: {} positions for {} ids", in.positions.size(), in.batch * T);
  if (!in.mask.empty() && static_cast<std::int64_t>(in.mask.size()) != in.batch * (P + T))
    runtime_error("forward_cached: {} mask entries for {} keys", in.mask.size(), in.batch * (P + T));

  const auto head = head_rows(in, need_logits, taps);  // not a structured binding: clang 14 cannot capture one
  const std::int64_t lfrom = head.first, lto = head.second;
  PlannedGraph& pg = plans_->get(PlanKey{true, in.batch, T, !in.mask.empty(), need_logits, P > 0, lfrom, lto}, taps, [&] {
    auto made = build_planned(BatchShape{in.batch, T, !in.mask.empty(), need_logits, P, lfrom, lto},
                              [&](const std::string& h) { return kv_hooks_.count(h) > 0 || taps.count(h) > 0; });
    made->kv_concats = kv_concats(made->graph, info_.past_k, info_.past_v);
    return made;
  });
  if (pg.past != P) reshape_past(pg, in, P);

  const Shape bt{in.batch, T};
  std::map<std::string, TensorView> feeds{
      {"ids", TensorView(const_cast<std::int32_t*>(in.ids.data()), DType::i32, bt)},
      {"positions", TensorView(const_cast<std::int32_t*>(in.positions.data()), DType::i32, bt)},
  };
  if (!in.mask.empty())
    feeds["mask"] = TensorView(const_cast<std::uint8_t*>(in.mask.data()), DType::u8, Shape{in.batch, P + T});
  for (std::size_t i = 0; P > 0 && i < info_.past_k.size(); ++i) {
    feeds[info_.past_k[i]] = past_view(cache.k[i], P, in.batch);
    feeds[info_.past_v[i]] = past_view(cache.v[i], P, in.batch);
  }
  // Each layer's keys and values, past then new, are written where they belong: the cache's
  // first P + T slots of each row (a strided view for a batch: a Concat's output need only be
  // dense within a row), so the past is not copied again every step, nor densified for the
  // attention on a backend that reads a strided past (threaded).
  std::vector<Tensor> edit_storage;
  if (!edits_.empty())
    edit_feeds(edits_, in.edit ? *in.edit : EditCall{}, in.batch, T, P, in.positions, in.mask, edit_storage, feeds);
  std::vector<std::pair<int, TensorView>> placed;
  for (std::size_t i = 0; P > 0 && i < pg.kv_concats.size(); ++i) {
    const auto& c = pg.kv_concats[i];
    placed.emplace_back(c.node, past_view(c.is_v ? cache.v[c.layer] : cache.k[c.layer], P + T, in.batch));
  }
  auto out = executor_->run(pg.plan, feeds, [&](const std::string& hook, const TensorView& v) {
    if (auto it = kv_hooks_.find(hook); it != kv_hooks_.end()) {
      const auto [layer, is_v] = it->second;
      append_rows(is_v ? cache.v[layer] : cache.k[layer], v, P);
    }
    if (tap && taps.count(hook)) tap(hook, v);
  }, placed);
  cache.filled = P + T;
  return need_logits ? out.at("logits") : Tensor();
}

// A range reaching the end of the sequence has the AR layout: the cached slots [0, first) are the
// past, the range the new slots. A middle range (dual cache) is given its keys as [0, first),
// then [end, N), then its own rows: the attention is bidirectional and each cached K was rotated
// at its own absolute position, so the order of the keys changes nothing but the order of the
// softmax's sums (the mask is permuted alike). The copy costs (N - T) rows per layer, far less
// than the forward it saves.
Tensor Session::forward_range(const ForwardInput& in, KvCache& cache, std::int64_t first, KvCache& scratch,
                              const std::set<std::string>& taps, const Executor::Tap& tap, bool need_logits) {
  const std::int64_t N = cache.filled, T = in.tokens, end = first + T, B = in.batch;
  if (first < 0 || T < 1 || end > N)
    runtime_error("forward_range: slots [{}, {}) outside the cached sequence of {}", first, end, N);
  if (!in.mask.empty() && static_cast<std::int64_t>(in.mask.size()) != B * N)
    runtime_error("forward_range: {} mask entries for {} x {} slots", in.mask.size(), B, N);
  if (end == N) {
    cache.filled = first;
    return forward_cached(in, cache, taps, tap, need_logits);
  }
  const std::int64_t outside = N - T;
  if (scratch.batch != B || scratch.capacity != N || scratch.k.size() != cache.k.size()) scratch = new_kv_cache(B, N);
  for (std::size_t l = 0; l < cache.k.size(); ++l)
    for (auto [dst, src] : {std::pair{&scratch.k[l], &cache.k[l]}, std::pair{&scratch.v[l], &cache.v[l]}}) {
      copy_rows(*dst, 0, *src, 0, first);
      copy_rows(*dst, first, *src, end, N - end);
    }
  ForwardInput fi = in;
  if (!in.mask.empty())
    for (std::int64_t b = 0; b < B; ++b) {
      const auto row = in.mask.begin() + b * N;
      auto out = fi.mask.begin() + b * N;
      out = std::copy(row, row + first, out);
      out = std::copy(row + end, row + N, out);
      std::copy(row + first, row + end, out);
    }
  scratch.filled = outside;
  Tensor logits = forward_cached(fi, scratch, taps, tap, need_logits);
  for (std::size_t l = 0; l < cache.k.size(); ++l) {
    copy_rows(cache.k[l], first, scratch.k[l], outside, T);
    copy_rows(cache.v[l], first, scratch.v[l], outside, T);
  }
  return logits;
}

}  // namespace sonde
