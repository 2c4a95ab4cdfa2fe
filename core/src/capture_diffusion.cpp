// Diffusion capture (design §5): the forward of step i sees the canvas before the step; once
// the step has chosen its slots, the step policy picks the rows of that forward. `final` runs
// one more forward over the final canvas. /steps gets each prompt's canvas after every step.
// Under a K/V cache (block-cache, dual-cache) a step's forward computes only a range of slots;
// rows of the other slots were not computed in that step and are not captured (their cached
// K/V are older), so every captured row is one its step computed; /steps/n_recomputed says how
// many. Committed slots always lie in the computed range, so `commit` loses nothing.
#include "capture_internal.h"

#include <sonde/error.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace sonde {
namespace {

using capture_detail::AfterForward;
using capture_detail::StateValues;
using capture_detail::TapStore;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct DiffusionCapture {
  const CaptureSpec& spec;
  const DiffusionOptions& o;
  const std::vector<std::vector<std::int32_t>>& prompts;
  const std::vector<std::int64_t>& prompt_idx;
  const TapStore* store;  // null when no hooks are selected
  std::vector<CapturedPrompt>& out;
  std::int64_t T = 0, N = 0;      // padded prompt width, canvas width
  StepInput input;                // the latest forward's input
  StepInput full;                 // the latest full forward's input (all slots)
  std::vector<std::int32_t> canvas;  // [B, N] after the latest step
  std::int64_t steps_done = 0;       // block modes without a schedule end when the canvas is full

  std::int64_t pad(std::size_t r) const { return T - static_cast<std::int64_t>(prompts[r].size()); }

  bool position_wanted(std::size_t r, std::int64_t j) const {
    switch (spec.positions) {
      case PositionPolicy::All: return j >= pad(r);
      case PositionPolicy::Prompt: return j >= pad(r) && j < T;
      case PositionPolicy::Generated: return j >= T;
      case PositionPolicy::Last: return j == N - 1;
    }
    return false;
  }

  bool step_wanted(std::int64_t i, bool last) const {
    switch (spec.steps.kind) {
      case StepPolicy::Kind::All: return true;
      case StepPolicy::Kind::Every: return i % spec.steps.every == 0 || last;
      default: return false;
    }
  }

  void record_step(const DiffusionStep& st) {
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const auto b = st.canvas.begin() + static_cast<std::int64_t>(r) * N;
      out[r].steps.push_back(StepRecord{prompt_idx[r], static_cast<std::int32_t>(st.step), st.t,
                                        static_cast<std::int32_t>(st.transfer[r].size()),
                                        std::vector<std::int32_t>(b + pad(r), b + N),
                                        static_cast<std::int32_t>(st.block[r]),
                                        static_cast<std::int32_t>(st.recomputed[r])});
    }
  }

  // Slot j's row in the latest forward: j - first in a cached range forward, -1 if outside it.
  std::int64_t forward_row(std::int64_t j) const {
    const std::int64_t first = input.slots > 0 ? input.first_slot : 0;
    return j >= first && j < first + input.tokens ? j - first : -1;
  }

  // The row of slot j of prompt r in the forward of step `step` (canvas before: input.ids), when
  // that forward computed it.
  void add_row(std::size_t r, std::int64_t j, std::int32_t step, bool committed, double confidence) {
    const std::int64_t q = forward_row(j);
    if (q < 0) return;  // served from the cache: not computed in this step
    const auto at = static_cast<std::size_t>(static_cast<std::int64_t>(r) * N + j);
    const std::int32_t tok = canvas[at];
    const bool was_masked = input.ids[static_cast<std::size_t>(static_cast<std::int64_t>(r) * input.tokens + q)] == o.mask_id;
    RowKind kind = j < T ? capture_detail::prompt_kind(spec, tok) : RowKind::Generated;
    if (committed) kind = RowKind::Committed;
    else if (was_masked) kind = RowKind::Masked;
    const RowRecord rec{prompt_idx[r], static_cast<std::int32_t>(j - pad(r)), tok, step, kind};
    store->append_row(out[r], static_cast<std::int64_t>(r), q, rec,
                      StateValues{static_cast<float>(tok), static_cast<float>(confidence), committed ? 1.0f : 0.0f});
  }

  void on_step(const DiffusionStep& st) {
    canvas = st.canvas;
    steps_done = st.step + 1;
    if (spec.record_steps) record_step(st);
    if (!store) return;
    const bool commit = spec.steps.kind == StepPolicy::Kind::Commit;
    if (!commit && !step_wanted(st.step, st.last)) return;
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      auto transfer = st.transfer[r];
      std::sort(transfer.begin(), transfer.end());
      for (std::int64_t j = 0; j < N; ++j) {
        const bool committed = std::binary_search(transfer.begin(), transfer.end(), j);
        if ((commit && !committed) || !position_wanted(r, j)) continue;
        add_row(r, j, static_cast<std::int32_t>(st.step), committed,
                st.confidence[static_cast<std::size_t>(static_cast<std::int64_t>(r) * N + j)]);
      }
    }
  }

  // `final`: one forward over the final canvas, rows labelled with step = the number of steps run.
  void final_forward(DecodeForward& model) {
    input = full;  // a plain forward over every slot, whatever the mode
    input.fill_cache = false;
    input.ids = canvas;
    model.forward(input);
    for (std::size_t r = 0; r < prompts.size(); ++r)
      for (std::int64_t j = 0; j < N; ++j)
        if (position_wanted(r, j)) add_row(r, j, static_cast<std::int32_t>(steps_done), false, kNaN);
  }
};

}  // namespace

DiffusionCaptureResult diffusion_generate_captured(DecodeForward& model,
                                                   const std::vector<std::vector<std::int32_t>>& prompts,
                                                   const DiffusionOptions& o, const CaptureSpec& spec,
                                                   const std::vector<std::int64_t>& prompt_idx,
                                                   const DiffusionCallback& on_step) {
  if (prompt_idx.size() != prompts.size())
    runtime_error("capture: {} prompt indices for {} prompts", prompt_idx.size(), prompts.size());
  DiffusionCaptureResult res;
  if (!spec.active()) {
    res.result = diffusion_generate(model, prompts, o, on_step);
    return res;
  }
  res.captured.resize(prompts.size());
  std::optional<TapStore> store;
  if (!spec.hooks.empty()) store.emplace(model, spec);
  std::int64_t T = 0;
  for (const auto& p : prompts) T = std::max<std::int64_t>(T, static_cast<std::int64_t>(p.size()));
  DiffusionCapture cap{spec, o, prompts, prompt_idx, store ? &*store : nullptr, res.captured, T, T + o.max_new_tokens, {}, {}, {}, 0};
  AfterForward fwd(model, [&](const StepInput& in) {
    cap.input = in;
    if (in.slots == 0) cap.full = in;
  });
  res.result = diffusion_generate(fwd, prompts, o, [&](const DiffusionStep& st) {
    cap.on_step(st);
    if (on_step) on_step(st);
  });
  if (store && spec.steps.kind == StepPolicy::Kind::Final) cap.final_forward(model);
  return res;
}

}  // namespace sonde
