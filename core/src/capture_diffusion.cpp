// Diffusion capture (design §5): the forward of step i sees the canvas before the step; once
// the step has chosen its slots, the step policy picks the rows of that forward. `final` runs
// one more forward over the final canvas. /steps gets each prompt's canvas after every step.
// Under a K/V cache (block-cache, dual-cache) a step's forward computes only a range of slots.
// The other slots' rows, when the step policy selects them (all, every:K), are the values the
// model last computed for the slot (at the block's refresh or a later step), the activations
// whose K/V this step attended to, marked fresh = 0 with the step that computed them
// (/rows/computed_step). To have them, each prompt keeps the last computed row of every selected
// forward hook per slot while the generation runs. Committed slots always lie in the computed
// range, so `commit` needs no such copy.
#include "capture_internal.h"

#include <sonde/error.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

namespace sonde {
namespace {

using capture_detail::AfterForward;
using capture_detail::StateValues;
using capture_detail::TapStore;

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

// One prompt's last computed values per slot: per forward hook [N, row] floats, and the step
// whose forward computed each slot (-1: none yet).
struct LastComputed {
  std::map<std::string, std::vector<float>> values;
  std::vector<std::int32_t> step;
};

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
  std::vector<std::int32_t> before;  // [B, N] before the latest step (the forward's canvas)
  std::int64_t steps_done = 0;       // block modes without a schedule end when the canvas is full
  std::vector<LastComputed> last;    // per prompt; empty unless stale rows can be selected

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

  // Under a cache and a policy that selects every slot of a step: keep the rows this step's
  // forward computed, for the later steps that read their K/V from the cache.
  void keep_computed(std::int32_t step) {
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      auto& lc = last[r];
      for (std::int64_t j = 0; j < N; ++j) {
        const std::int64_t q = forward_row(j);
        if (q < 0 || !position_wanted(r, j)) continue;
        lc.step[static_cast<std::size_t>(j)] = step;
        for (const auto& h : spec.hooks) {
          if (is_diffusion_state_hook(h.name)) continue;
          const std::int64_t n = capture_detail::row_numel(h);
          const float* src = store->row(h.name, static_cast<std::int64_t>(r), q);
          std::copy(src, src + n, lc.values[h.name].begin() + j * n);
        }
      }
    }
  }

  void start_keeping() {
    last.assign(prompts.size(), {});
    for (auto& lc : last) {
      lc.step.assign(static_cast<std::size_t>(N), -1);
      for (const auto& h : spec.hooks)
        if (!is_diffusion_state_hook(h.name))
          lc.values[h.name].assign(static_cast<std::size_t>(N * capture_detail::row_numel(h)), 0.0f);
    }
  }

  // The row of slot j of prompt r at step `step` (canvas before: `before`): from the step's
  // forward when it computed the slot, else (cached modes) the slot's last computed values.
  void add_row(std::size_t r, std::int64_t j, std::int32_t step, bool committed, double confidence) {
    const std::int64_t q = forward_row(j);
    if (q < 0 && last.empty()) return;  // not computed and nothing kept (cannot happen for commit)
    const auto at = static_cast<std::size_t>(static_cast<std::int64_t>(r) * N + j);
    const std::int32_t tok = canvas[at];
    RowKind kind = j < T ? capture_detail::prompt_kind(spec, tok) : RowKind::Generated;
    if (committed) kind = RowKind::Committed;
    else if (before[at] == o.mask_id) kind = RowKind::Masked;
    RowRecord rec{prompt_idx[r], static_cast<std::int32_t>(j - pad(r)), tok, step, kind, 1, step};
    const StateValues state{static_cast<float>(tok), static_cast<float>(confidence), committed ? 1.0f : 0.0f};
    if (q >= 0) {
      store->append_row(out[r], static_cast<std::int64_t>(r), q, rec, state);
      return;
    }
    const auto& lc = last[r];
    rec.fresh = 0;
    rec.computed_step = lc.step[static_cast<std::size_t>(j)];
    if (rec.computed_step < 0) runtime_error("capture: slot {} of prompt {} was never computed before step {}", j, prompt_idx[r], step);
    store->append_row_from(out[r], rec, state, [&](const HookPoint& h) {
      return lc.values.at(h.name).data() + j * capture_detail::row_numel(h);
    });
  }

  void on_step(const DiffusionStep& st) {
    before = canvas.empty() ? full.ids : canvas;
    canvas = st.canvas;
    steps_done = st.step + 1;
    if (spec.record_steps) record_step(st);
    if (!store) return;
    const bool commit = spec.steps.kind == StepPolicy::Kind::Commit;
    if (!last.empty()) keep_computed(static_cast<std::int32_t>(st.step));
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
    before = canvas;
    model.forward(input);
    for (std::size_t r = 0; r < prompts.size(); ++r)
      for (std::int64_t j = 0; j < N; ++j)
        if (position_wanted(r, j)) add_row(r, j, static_cast<std::int32_t>(steps_done), false, kNaNf);
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
  DiffusionCapture cap{spec, o, prompts, prompt_idx, store ? &*store : nullptr, res.captured, T, diffusion_canvas_width(o, T), {}, {}, {}, {}, 0, {}};
  const bool every_slot = spec.steps.kind == StepPolicy::Kind::All || spec.steps.kind == StepPolicy::Kind::Every;
  if (store && every_slot && diffusion_mode_cached(o.mode)) cap.start_keeping();
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
