// The logit lens (lens.h): every layer's residual stream through the final norm and the head, as
// one small graph (RmsNorm, Linear) run by the session's executor on its backend.
#include <sonde/error.h>
#include <sonde/lens.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace sonde {

namespace {

// Softmax probabilities of one row (max-subtracted, in double), its top k and the rank of `next`.
LensCell cell_of(const float* logits, std::int64_t V, std::int64_t k, std::int32_t next) {
  LensCell c;
  const float mx = *std::max_element(logits, logits + V);
  double z = 0;
  for (std::int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(logits[v]) - mx);
  const auto prob = [&](std::int64_t v) { return static_cast<float>(std::exp(static_cast<double>(logits[v]) - mx) / z); };
  std::vector<std::int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const auto kk = static_cast<std::ptrdiff_t>(std::min(k, V));
  // Ties go to the lower id, as torch.topk and argmax do on CPU.
  std::partial_sort(order.begin(), order.begin() + kk, order.end(),
                    [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (std::ptrdiff_t i = 0; i < kk; ++i) {
    c.top_ids.push_back(order[static_cast<std::size_t>(i)]);
    c.top_probs.push_back(prob(order[static_cast<std::size_t>(i)]));
  }
  c.next_id = next;
  if (next >= 0) {
    std::int64_t above = 0;
    for (std::int64_t v = 0; v < V; ++v) above += logits[v] > logits[next] || (logits[v] == logits[next] && v < next);
    c.next_rank = above;
    c.next_prob = prob(next);
  }
  return c;
}

}  // namespace

LensResult logit_lens(Session& s, const std::vector<std::int32_t>& ids, std::int64_t top_k) {
  if (top_k < 1) bad_input("top_k: must be at least 1, got {}", top_k);
  const ModelInfo& info = s.info();
  if (info.final_norm_weight.empty() || info.head_weight.empty())
    bad_input("model {} does not name its final norm and head; the logit lens needs them", info.arch);
  const std::int64_t L = s.config().num_hidden_layers, T = static_cast<std::int64_t>(ids.size()),
                     H = s.config().hidden_size, V = s.config().vocab_size;
  Tensor resid(DType::f32, Shape{1, L * T, H});
  std::set<std::string> taps;
  for (std::int64_t l = 0; l < L; ++l) taps.insert("blocks." + std::to_string(l) + ".hook_resid_post");
  ForwardInput in;
  in.tokens = T;
  in.ids = ids;
  LensResult r;
  r.logits = s.forward(in, true, taps, [&](const std::string& hook, const TensorView& v) {
    const auto l = std::stoll(hook.substr(7, hook.find('.', 7) - 7));
    const Tensor x = to_f32(v);  // [1, T, H]
    std::memcpy(resid.data<float>() + l * T * H, x.data<float>(), static_cast<std::size_t>(T * H) * sizeof(float));
  });
  r.logits.view() = r.logits.view().reshaped(Shape{T, V});

  GraphBuilder b([&](const std::string& name) { return s.backend().weight(name); });
  auto x = b.input("resid", DType::f32, Shape{1, L * T, H});
  auto xf = b.rms_norm(x, b.weight(info.final_norm_weight), static_cast<float>(info.final_norm_eps));
  b.output("logits", b.linear(xf, b.weight(info.head_weight)));
  const Graph g = b.finish();
  auto out = s.run_graph(g, {"logits"}, {{"resid", resid.view()}}).at("logits");  // [1, L*T, V]

  r.layers = L;
  r.tokens = T;
  r.top_k = std::min(top_k, V);
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t t = 0; t < T; ++t)
      r.cells.push_back(cell_of(out.data<float>() + (l * T + t) * V, V, top_k, t + 1 < T ? ids[static_cast<std::size_t>(t + 1)] : -1));
  r.last_logits = Tensor(DType::f32, Shape{T, V});
  std::memcpy(r.last_logits.data<float>(), out.data<float>() + (L - 1) * T * V, static_cast<std::size_t>(T * V) * sizeof(float));
  return r;
}

}  // namespace sonde
