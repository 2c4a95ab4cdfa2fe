// RunKind::Lens (run.h): the logit lens of one request (lens.h) into every sink as arrays
// (docs/hdf5-layout.md): /lens/top_ids, top_probs [L, T, K], next_rank, next_prob [L, T], /logits,
// /lens/last_layer_logits, /input_ids; with LensSettings::diffusion a leading step dimension,
// /lens/steps and /sequence.
#include <sonde/error.h>
#include <sonde/lens.h>

#include "run_internal.h"

namespace sonde::run_detail {
namespace {

struct LensArrays {
  Tensor top_ids, top_probs, rank, prob;
};

// S results of L x T cells with K tokens each, as [S, L, T, K] and [S, L, T] (S = 1 drops the
// leading dimension).
LensArrays arrays(const std::vector<const LensResult*>& per_step) {
  const auto S = static_cast<std::int64_t>(per_step.size());
  const auto& f = *per_step.front();
  const std::int64_t L = f.layers, T = f.tokens, K = f.top_k;
  const bool one = S == 1;
  LensArrays a{Tensor(DType::i32, one ? Shape{L, T, K} : Shape{S, L, T, K}),
               Tensor(DType::f32, one ? Shape{L, T, K} : Shape{S, L, T, K}), Tensor(DType::i64, one ? Shape{L, T} : Shape{S, L, T}),
               Tensor(DType::f32, one ? Shape{L, T} : Shape{S, L, T})};
  for (std::int64_t st = 0; st < S; ++st) {
    const auto& r = *per_step[static_cast<std::size_t>(st)];
    for (std::int64_t i = 0; i < L * T; ++i) {
      const auto& c = r.cells[static_cast<std::size_t>(i)];
      const std::int64_t cell = st * L * T + i;
      for (std::int64_t k = 0; k < K; ++k) {
        a.top_ids.data<std::int32_t>()[cell * K + k] = c.top_ids[static_cast<std::size_t>(k)];
        a.top_probs.data<float>()[cell * K + k] = c.top_probs[static_cast<std::size_t>(k)];
      }
      a.rank.data<std::int64_t>()[cell] = c.next_rank;
      a.prob.data<float>()[cell] = c.next_prob;
    }
  }
  return a;
}

void write_cells(Sink& sink, const LensArrays& a) {
  sink.write_array("/lens/top_ids", a.top_ids.view());
  sink.write_array("/lens/top_probs", a.top_probs.view());
  sink.write_array("/lens/next_rank", a.rank.view());
  sink.write_array("/lens/next_prob", a.prob.view());
}

}  // namespace

void run_lens(RunModel& s, const PreparedRequest& p, const RunOptions& o, Outputs& out, RunResult& res) {
  Session& session = *s.session();
  std::vector<std::int32_t> ids = p.ids;
  if (o.lens.diffusion) {
    const auto d = resolve_diffusion(p.settings, s.config(), s.info());
    DiffusionLens lens = logit_lens_diffusion(session, ids, d, o.lens.top_k);
    std::vector<const LensResult*> steps;
    for (const auto& r : lens.per_step) steps.push_back(&r);
    if (!out.sinks().empty()) {
      const LensArrays a = arrays(steps);
      Tensor step_ids(DType::i64, Shape{static_cast<std::int64_t>(lens.steps.size())});
      for (std::size_t i = 0; i < lens.steps.size(); ++i) step_ids.data<std::int64_t>()[i] = lens.steps[i];
      for (auto& sink : out.sinks()) {
        sink->write_array("/sequence", TensorView(lens.sequence.data(), DType::i32, Shape{static_cast<std::int64_t>(lens.sequence.size())}));
        sink->write_array("/lens/steps", step_ids.view());
        write_cells(*sink, a);
      }
    }
    res.lens_steps = std::move(lens);
  } else {
    LensResult r = logit_lens(session, ids, o.lens.top_k);
    if (!out.sinks().empty()) {
      const LensArrays a = arrays({&r});
      for (auto& sink : out.sinks()) {
        sink->write_array("/input_ids", TensorView(ids.data(), DType::i32, Shape{static_cast<std::int64_t>(ids.size())}));
        write_cells(*sink, a);
        sink->write_array("/logits", r.logits.view());
        sink->write_array("/lens/last_layer_logits", r.last_logits.view());
      }
    }
    res.lens = std::move(r);
  }
  RequestResult r;
  r.index = p.index;
  r.id = p.id;
  r.text = p.text;
  r.prompt_ids = p.ids;
  r.finish_reason = "lens";
  res.results.push_back(std::move(r));
  res.totals = RunTotals{1, static_cast<std::int64_t>(p.ids.size()), 0, 0};
  out.close();
}

}  // namespace sonde::run_detail
