// Capture policies, the diffusion state hooks, the tap store and the hand-over to a Sink.
#include "capture_internal.h"

#include <sonde/error.h>

#include <charconv>

namespace sonde {

PositionPolicy parse_position_policy(std::string_view t) {
  if (t == "all") return PositionPolicy::All;
  if (t == "prompt") return PositionPolicy::Prompt;
  if (t == "generated") return PositionPolicy::Generated;
  if (t == "last") return PositionPolicy::Last;
  bad_setting("positions", "'{}' is not one of all, prompt, generated, last", t);
}

std::string position_policy_name(PositionPolicy p) {
  switch (p) {
    case PositionPolicy::All: return "all";
    case PositionPolicy::Prompt: return "prompt";
    case PositionPolicy::Generated: return "generated";
    case PositionPolicy::Last: return "last";
  }
  return "?";
}

StepPolicy parse_step_policy(std::string_view t) {
  using K = StepPolicy::Kind;
  if (t == "commit") return {K::Commit, 1};
  if (t == "final") return {K::Final, 1};
  if (t == "all") return {K::All, 1};
  if (t.substr(0, 6) == "every:") {
    const auto num = t.substr(6);
    std::int64_t k = 0;
    const auto r = std::from_chars(num.data(), num.data() + num.size(), k);
    if (r.ec == std::errc() && r.ptr == num.data() + num.size() && k >= 1) return {K::Every, k};
    bad_setting("diffusion capture", "'{}' needs a whole number K >= 1 after 'every:'", t);
  }
  bad_setting("diffusion capture", "'{}' is not one of commit, final, all, every:K", t);
}

std::string step_policy_name(const StepPolicy& p) {
  switch (p.kind) {
    case StepPolicy::Kind::Commit: return "commit";
    case StepPolicy::Kind::Final: return "final";
    case StepPolicy::Kind::All: return "all";
    case StepPolicy::Kind::Every: return "every:" + std::to_string(p.every);
  }
  return "?";
}

std::vector<HookPoint> diffusion_state_hooks() {
  return {{"diffusion.hook_tokens", {}}, {"diffusion.hook_confidence", {}}, {"diffusion.hook_transfer", {}}};
}

bool is_diffusion_state_hook(std::string_view name) { return name.substr(0, 15) == "diffusion.hook_"; }

void write_captured(Sink& sink, const CaptureSpec& spec, const CapturedPrompt& cap, const PromptRecord& prompt) {
  write_captured(sink, spec.hooks, cap, prompt);
}

void write_captured(Sink& sink, const std::vector<HookPoint>& hooks, const CapturedPrompt& cap,
                    const PromptRecord& prompt) {
  const auto n = static_cast<std::int64_t>(cap.rows.size());
  for (const auto& h : hooks) {
    if (n == 0) break;
    const auto& values = cap.acts.at(h.name);
    Shape shape;
    shape.rank = static_cast<int>(h.row_shape.size()) + 1;
    shape[0] = n;
    for (std::size_t i = 0; i < h.row_shape.size(); ++i) shape[static_cast<int>(i) + 1] = h.row_shape[i];
    if (static_cast<std::int64_t>(values.size()) != shape.numel())
      runtime_error("capture: hook '{}' holds {} values for {} rows of shape {}", h.name, values.size(), n, shape.str());
    sink.write(TapRecord{h.name, prompt.prompt_idx}, TensorView(const_cast<float*>(values.data()), DType::f32, shape));
  }
  if (n > 0) sink.add_rows(cap.rows);
  if (!cap.steps.empty()) sink.add_steps(cap.steps);
  sink.end_prompt(prompt);
}

void require_fixed_row_shapes(const std::vector<HookPoint>& hooks) {
  for (const auto& h : hooks)
    if (h.per_sequence())
      bad_setting("hooks", "{} has one value per key, and the number of keys changes during generation; "
                "capture attention patterns with `sonde forward`", h.name);
}

namespace capture_detail {

std::int64_t row_numel(const HookPoint& h) {
  std::int64_t n = 1;
  for (auto d : h.row_shape) n *= d;
  return n;
}

TapStore::TapStore(DecodeForward& model, const CaptureSpec& spec) : model_(model), spec_(spec) {
  std::vector<std::string> names;
  require_fixed_row_shapes(spec.hooks);
  for (const auto& h : spec.hooks)
    if (!is_diffusion_state_hook(h.name)) names.push_back(h.name);
  if (names.empty()) return;  // nothing tapped: the forward runs as without capture
  model_.set_taps(names, [this](const std::string& hook, const TensorView& v) {
    values_[hook] = v.dtype == DType::f32 ? Tensor::copy_of(v) : to_f32(v);
  });
}

TapStore::~TapStore() { model_.set_taps({}, {}); }

void TapStore::append_row(CapturedPrompt& cap, std::int64_t b, std::int64_t slot, const RowRecord& rec,
                          const StateValues& state) const {
  append_row_from(cap, rec, state, [&](const HookPoint& h) { return row(h.name, b, slot); });
}

void TapStore::append_row_from(CapturedPrompt& cap, const RowRecord& rec, const StateValues& state,
                               const std::function<const float*(const HookPoint&)>& source) const {
  for (const auto& h : spec_.hooks) {
    auto& out = cap.acts[h.name];
    if (h.name == "diffusion.hook_tokens") out.push_back(state.token);
    else if (h.name == "diffusion.hook_confidence") out.push_back(state.confidence);
    else if (h.name == "diffusion.hook_transfer") out.push_back(state.transfer);
    if (is_diffusion_state_hook(h.name)) continue;
    const float* src = source(h);
    out.insert(out.end(), src, src + row_numel(h));
  }
  cap.rows.push_back(rec);
}

const float* TapStore::row(const std::string& hook, std::int64_t b, std::int64_t slot) const {
  auto it = values_.find(hook);
  if (it == values_.end()) runtime_error("capture: hook '{}' was not delivered by the forward", hook);
  const Shape& s = it->second.shape();
  const std::int64_t row = s.numel() / (s[0] * s[1]);
  return it->second.data<float>() + (b * s[1] + slot) * row;
}

RowKind prompt_kind(const CaptureSpec& spec, std::int32_t token) {
  return spec.is_special && spec.is_special(token) ? RowKind::Special : RowKind::Prompt;
}

}  // namespace capture_detail
}  // namespace sonde
