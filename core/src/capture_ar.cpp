// Autoregressive capture: forward 0 is the prefill over the left-padded prompts (prompt rows,
// step -1); forward k >= 1 reads, in its last column, the tokens chosen at step k - 1 (their
// generated rows). ArOptions::feed_last adds the forward that reads the final tokens.
#include "capture_internal.h"

#include <sonde/error.h>

#include <algorithm>

namespace sonde {
namespace {

using capture_detail::AfterForward;
using capture_detail::StateValues;
using capture_detail::TapStore;

struct ArCapture {
  const CaptureSpec& spec;
  const std::vector<std::vector<std::int32_t>>& prompts;
  const std::vector<std::int64_t>& prompt_idx;
  const TapStore& store;
  std::vector<CapturedPrompt>& out;
  std::vector<std::vector<std::int32_t>> step_tokens;  // per step: each row's new token, -1 if done
  std::int64_t forwards = 0;

  void prefill(const StepInput& in) {
    if (spec.positions == PositionPolicy::Generated) return;
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const auto len = static_cast<std::int64_t>(prompts[r].size());
      const std::int64_t pad = in.tokens - len;
      const std::int64_t first = spec.positions == PositionPolicy::Last ? len - 1 : 0;
      for (std::int64_t p = first; p < len; ++p) {
        const std::int32_t tok = prompts[r][static_cast<std::size_t>(p)];
        const RowRecord rec{prompt_idx[r], static_cast<std::int32_t>(p), tok, -1, capture_detail::prompt_kind(spec, tok)};
        store.append_row(out[r], static_cast<std::int64_t>(r), pad + p, rec, StateValues{});
      }
    }
  }

  void generated(const StepInput& in, std::int64_t step) {
    if (spec.positions != PositionPolicy::All && spec.positions != PositionPolicy::Generated) return;
    const auto& tokens = step_tokens.at(static_cast<std::size_t>(step));
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      if (tokens[r] < 0) continue;  // the row had finished before this step
      const auto pos = static_cast<std::int32_t>(static_cast<std::int64_t>(prompts[r].size()) + step);
      const RowRecord rec{prompt_idx[r], pos, tokens[r], static_cast<std::int32_t>(step), RowKind::Generated, 1,
                          static_cast<std::int32_t>(step)};
      store.append_row(out[r], static_cast<std::int64_t>(r), in.tokens - 1, rec, StateValues{});
    }
  }

  void after_forward(const StepInput& in) {
    if (forwards == 0) prefill(in);
    else generated(in, forwards - 1);
    ++forwards;
  }
};

}  // namespace

ArCaptureResult generate_autoregressive_captured(DecodeForward& model,
                                                 const std::vector<std::vector<std::int32_t>>& prompts,
                                                 ArOptions o, const CaptureSpec& spec,
                                                 const std::vector<std::int64_t>& prompt_idx,
                                                 const ArCallback& on_step) {
  if (prompt_idx.size() != prompts.size())
    runtime_error("capture: {} prompt indices for {} prompts", prompt_idx.size(), prompts.size());
  ArCaptureResult res;
  if (spec.active()) res.captured.resize(prompts.size());
  if (spec.hooks.empty()) {  // nothing to tap: the plain loop, at no extra cost
    res.completions = generate_autoregressive(model, prompts, o, on_step);
    return res;
  }
  TapStore store(model, spec);
  ArCapture cap{spec, prompts, prompt_idx, store, res.captured, {}, 0};
  const bool wants_generated = spec.positions == PositionPolicy::All || spec.positions == PositionPolicy::Generated;
  o.feed_last = o.feed_last || wants_generated;
  AfterForward fwd(model, [&](const StepInput& in) { cap.after_forward(in); });
  res.completions = generate_autoregressive(fwd, prompts, o, [&](const ArStep& st) {
    cap.step_tokens.push_back(st.new_tokens);
    if (on_step) on_step(st);
  });
  return res;
}

}  // namespace sonde
