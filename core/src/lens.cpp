// The logit lens (lens.h): every layer's residual stream through the final norm and the head, as
// one small graph (RmsNorm, Linear) run by the session's executor on its backend.
#include <sonde/error.h>
#include <sonde/capture.h>
#include <sonde/lens.h>
#include <sonde/session_decode.h>

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

namespace {

// The lens of residual streams resid [1, L*T, H] (layer-major), `next[t]` the token after slot t.
void lens_cells(Session& s, const Tensor& resid, std::int64_t L, std::int64_t T, const std::vector<std::int32_t>& next,
                std::int64_t top_k, LensResult& r) {
  const ModelInfo& info = s.info();
  const std::int64_t H = s.config().hidden_size, V = s.config().vocab_size;
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
      r.cells.push_back(cell_of(out.data<float>() + (l * T + t) * V, V, top_k, next[static_cast<std::size_t>(t)]));
  r.last_logits = Tensor(DType::f32, Shape{T, V});
  std::memcpy(r.last_logits.data<float>(), out.data<float>() + (L - 1) * T * V, static_cast<std::size_t>(T * V) * sizeof(float));
}

void check_lens(const Session& s, std::int64_t top_k) {
  if (top_k < 1) bad_input("top_k: must be at least 1, got {}", top_k);
  if (s.info().final_norm_weight.empty() || s.info().head_weight.empty())
    bad_input("model {} does not name its final norm and head; the logit lens needs them", s.info().arch);
}

std::string resid_hook(std::int64_t l) { return "blocks." + std::to_string(l) + ".hook_resid_post"; }

}  // namespace

LensResult logit_lens(Session& s, const std::vector<std::int32_t>& ids, std::int64_t top_k) {
  check_lens(s, top_k);
  const std::int64_t L = s.config().num_hidden_layers, T = static_cast<std::int64_t>(ids.size()),
                     H = s.config().hidden_size, V = s.config().vocab_size;
  Tensor resid(DType::f32, Shape{1, L * T, H});
  std::set<std::string> taps;
  for (std::int64_t l = 0; l < L; ++l) taps.insert(resid_hook(l));
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
  std::vector<std::int32_t> next;
  for (std::int64_t t = 0; t < T; ++t) next.push_back(t + 1 < T ? ids[static_cast<std::size_t>(t + 1)] : -1);
  lens_cells(s, resid, L, T, next, top_k, r);
  return r;
}

DiffusionLens logit_lens_diffusion(Session& s, const std::vector<std::int32_t>& prompt, const DiffusionOptions& d,
                                   std::int64_t top_k) {
  check_lens(s, top_k);
  if (d.loop == DiffusionLoop::BlockDiffusion)  // each step's forward computes one block, not the canvas
    bad_input("lens: block diffusion's steps compute one block each, not every slot of the canvas; a diffusion lens "
              "needs the whole canvas per step");
  const std::int64_t L = s.config().num_hidden_layers, H = s.config().hidden_size;
  CaptureSpec spec;
  const auto points = s.hook_points();
  for (std::int64_t l = 0; l < L; ++l)
    for (const auto& h : points)
      if (h.name == resid_hook(l)) spec.hooks.push_back(h);
  spec.positions = PositionPolicy::All;
  spec.steps = StepPolicy{StepPolicy::Kind::All, 1};
  spec.is_special = [](std::int32_t) { return false; };
  SessionDecodeForward fwd(s);
  auto cap = diffusion_generate_captured(fwd, {prompt}, d, spec, {0});
  DiffusionLens out;
  out.sequence = cap.result.sequences.at(0);
  const auto& rows = cap.captured.at(0).rows;
  const auto N = static_cast<std::int64_t>(out.sequence.size());
  for (std::size_t from = 0; from < rows.size();) {  // the rows of one step: every slot, in order
    std::size_t to = from;
    while (to < rows.size() && rows[to].step == rows[from].step) ++to;
    const auto T = static_cast<std::int64_t>(to - from);
    if (T != N) runtime_error("lens: step {} captured {} slots of {}", rows[from].step, T, N);
    Tensor resid(DType::f32, Shape{1, L * T, H});
    for (std::int64_t l = 0; l < L; ++l) {
      const auto& acts = cap.captured.at(0).acts.at(resid_hook(l));
      std::memcpy(resid.data<float>() + l * T * H, acts.data() + from * static_cast<std::size_t>(H),
                  static_cast<std::size_t>(T * H) * sizeof(float));
    }
    std::vector<std::int32_t> next;
    for (std::int64_t t = 0; t < T; ++t) next.push_back(t + 1 < T ? out.sequence[static_cast<std::size_t>(t + 1)] : -1);
    LensResult r;
    lens_cells(s, resid, L, T, next, top_k, r);
    out.steps.push_back(rows[from].step);
    out.per_step.push_back(std::move(r));
    from = to;
  }
  return out;
}

}  // namespace sonde
