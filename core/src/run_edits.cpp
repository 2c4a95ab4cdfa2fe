// resolve_edits (edit_spec.h): EditSpecs checked against the model and turned into Edits.
#include <sonde/array_reader.h>
#include <sonde/edit_spec.h>
#include <sonde/error.h>
#include <sonde/hooks.h>
#include <sonde/run.h>

#include "edit_patch.h"
#include "sae_edits.h"
#include "run_internal.h"

#include <cmath>
#include <filesystem>

namespace sonde {

namespace {

std::vector<HookPoint> resolve_hooks(const RunModel& m, const EditSpec& e) {
  try {
    auto hooks = HookSelector::parse(e.hook).resolve(m.hook_points(), m.config().num_hidden_layers);
    for (const auto& h : hooks)
      if (h.per_sequence()) bad_input("hook '{}' has a row per key; it cannot be edited", h.name);
    return hooks;
  } catch (const Error& err) {
    if (err.kind() != ErrorKind::BadInput) throw;
    bad_input("{}: {}", e.where, err.what());
  }
}

EditPositions parse_positions(const EditSpec& e, const EditLimits& lim) {
  EditPositions p;
  if (e.positions.is_string()) {
    const auto s = e.positions.get<std::string>();
    p.kind = s == "prompt" ? EditPositions::Kind::Prompt : s == "generated" ? EditPositions::Kind::Generated : EditPositions::Kind::All;
    return p;
  }
  p.kind = EditPositions::Kind::List;
  p.list = e.positions.get<std::vector<std::int64_t>>();
  for (auto pos : p.list)
    if (pos >= lim.max_position)
      bad_input("{}: position {} is out of range: the run's sequences are at most {} tokens long", e.where, pos, lim.max_position);
  return p;
}

std::int64_t parse_int(const std::string& s, const EditSpec& e) {
  std::size_t used = 0;
  std::int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || v < 0) bad_input("{}: steps '{}' is not all, A-B, A or every:K", e.where, e.steps);
  return v;
}

EditSteps parse_steps(const EditSpec& e, const EditLimits& lim) {
  EditSteps st;
  if (e.steps == "all") return st;
  if (!lim.diffusion) bad_input("{}: steps '{}': only a diffusion model's generation has steps (use all)", e.where, e.steps);
  if (e.steps.rfind("every:", 0) == 0) {
    st.kind = EditSteps::Kind::Every;
    st.every = parse_int(e.steps.substr(6), e);
    if (st.every < 1) bad_input("{}: steps '{}': K must be at least 1", e.where, e.steps);
    return st;
  }
  st.kind = EditSteps::Kind::Range;
  const auto dash = e.steps.find('-');
  st.first = parse_int(e.steps.substr(0, dash), e);
  st.last = dash == std::string::npos ? st.first : parse_int(e.steps.substr(dash + 1), e);
  if (st.last < st.first || st.last >= lim.steps)
    bad_input("{}: steps '{}' are out of range: the generation has steps 0 to {}", e.where, e.steps, lim.steps - 1);
  return st;
}

// The vector of add / mean / project_out / clamp as [G, E] for a hook of R values per row.
Tensor operand(const EditSpec& e, const HookPoint& h, const Tensor& raw, std::int64_t& groups) {
  std::int64_t R = 1;
  for (auto d : h.row_shape) R *= d;
  if (raw.dtype() != DType::f32) bad_input("{}: {} holds integers; a vector must be floating point", e.where, e.source);
  const std::int64_t n = raw.shape().numel();
  const bool per_head = h.row_shape.size() == 2;
  const std::int64_t heads = per_head ? h.row_shape[0] : 1, d = R / heads;
  if (n != R && !(per_head && n == d))
    bad_input("{}: {} has {} values {}, hook '{}' has rows of {}{}", e.where, e.source, n, raw.shape().str(), h.name, R,
              per_head ? fmt::format(" ({} heads of {}: give {} or {})", heads, d, R, d) : std::string());
  if (n == d && per_head) groups = heads;
  const std::int64_t E = R / groups;
  Tensor v(DType::f32, Shape{groups, E});
  for (std::int64_t i = 0; i < groups * E; ++i) {
    const float x = raw.data<float>()[n == R ? i : i % d];
    if (!std::isfinite(x)) bad_input("{}: {} holds a non-finite value at index {}", e.where, e.source, n == R ? i : i % d);
    v.data<float>()[i] = x;
  }
  return v;
}

// Each group's slice scaled to norm 1 (BadInput for a zero slice).
void normalise(const EditSpec& e, Tensor& v) {
  const std::int64_t G = v.shape()[0], E = v.shape()[1];
  for (std::int64_t g = 0; g < G; ++g) {
    double ss = 0;
    for (std::int64_t j = 0; j < E; ++j) ss += static_cast<double>(v.data<float>()[g * E + j]) * v.data<float>()[g * E + j];
    if (!(ss > 0)) bad_input("{}: direction {} has zero norm{}", e.where, e.source, G > 1 ? fmt::format(" in head {}", g) : "");
    const double inv = 1.0 / std::sqrt(ss);
    for (std::int64_t j = 0; j < E; ++j) v.data<float>()[g * E + j] = static_cast<float>(v.data<float>()[g * E + j] * inv);
  }
}

std::shared_ptr<FilePatchRows> patch_rows(const RunModel& m, const EditSpec& e, const HookPoint& h, const EditLimits& lim) {
  std::int64_t R = 1;
  for (auto d : h.row_shape) R *= d;
  auto src = FilePatchRows::open(e.source, h.name, R, m.config().raw_json, e.where);
  src->match_steps(lim.diffusion);
  for (std::size_t i = 0; i < lim.prompt_ids.size(); ++i) {
    const auto* p = src->prompt(lim.prompt_ids[i]);
    if (!p) bad_input("{}: {} has no prompt with id '{}'", e.where, e.source, lim.prompt_ids[i]);
    // Clean and corrupted prompts differ in tokens, not in length: rows are matched by position.
    const auto want = lim.prompt_tokens.at(i).size();
    if (p->tokens.size() < want)
      bad_input("{}: prompt '{}' has {} tokens in {}, this run's has {}", e.where, lim.prompt_ids[i], p->tokens.size(),
                e.source, want);
  }
  return src;
}

Edit resolve_one(const RunModel& m, const EditSpec& e, const HookPoint& h, const EditLimits& lim) {
  Edit out;
  out.hook = h.name;
  out.scale = static_cast<float>(e.scale);
  out.value = static_cast<float>(e.value);
  out.positions = parse_positions(e, lim);
  out.steps = parse_steps(e, lim);
  const bool per_head = h.row_shape.size() == 2;
  if (!e.heads.empty()) {
    if (!per_head) bad_input("{}: heads are given but hook '{}' is not per head", e.where, h.name);
    for (auto head : e.heads)
      if (head >= h.row_shape[0]) bad_input("{}: head {} is out of range: hook '{}' has {} heads", e.where, head, h.name, h.row_shape[0]);
    out.heads = e.heads;
    out.groups = h.row_shape[0];
  }
  static const std::map<std::string, EditOp> ops{{"add", EditOp::Add},         {"scale", EditOp::Scale},
                                                 {"zero", EditOp::Zero},       {"mean", EditOp::Mean},
                                                 {"project_out", EditOp::ProjectOut}, {"clamp", EditOp::Clamp},
                                                 {"patch", EditOp::Patch},     {"host", EditOp::Host}};
  auto it = ops.find(e.op);
  if (it == ops.end()) bad_input("{}: unknown op '{}'", e.where, e.op);
  out.op = it->second;
  switch (out.op) {
    case EditOp::Add:
    case EditOp::ProjectOut:
    case EditOp::Clamp:
      out.operand = operand(e, h, read_array_source(e.source), out.groups);
      if (out.op != EditOp::Add) normalise(e, out.operand);
      break;
    case EditOp::Mean: {
      const bool stats_file = e.source.find(":/") == std::string::npos && e.source.size() > 4 &&
                              e.source.substr(e.source.size() - 4) != ".npy";
      const std::string src = stats_file ? e.source + ":/stats/" + h.name + "/mean" : e.source;
      if (stats_file && !std::filesystem::exists(e.source)) bad_input("{}: {}: no such file", e.where, e.source);
      if (stats_file && !array_reader_for(e.source)->has(e.source, "/stats/" + h.name + "/mean"))
        bad_input("{}: {} has no statistics for hook '{}' (/stats/{}/mean)", e.where, e.source, h.name, h.name);
      out.operand = operand(e, h, read_array_source(src), out.groups);
      break;
    }
    case EditOp::Patch: out.patch = patch_rows(m, e, h, lim); break;
    case EditOp::Host:
      if (!e.fn) bad_input("{}: a host edit needs a function", e.where);
      out.fn = e.fn;
      break;
    case EditOp::Scale:
    case EditOp::Zero: break;
  }
  return out;
}

}  // namespace

std::vector<Edit> resolve_edits(const RunModel& m, const std::vector<EditSpec>& specs, const EditLimits& lim) {
  std::vector<Edit> out;
  for (const auto& e : specs) {
    if (e.op == "sae_feature") {
      out.push_back(sae_feature_edit(m.saes(), m.config().num_hidden_layers, e, parse_positions(e, lim), parse_steps(e, lim)));
      continue;
    }
    for (const auto& h : resolve_hooks(m, e)) out.push_back(resolve_one(m, e, h, lim));
  }
  return out;
}

}  // namespace sonde

namespace sonde {

void RunModel::set_edits(std::vector<Edit> edits) {
  if (!edits.empty()) bad_input("this model does not take edits");
}

namespace run_detail {

std::vector<Edit> run_edits(const RunModel& s, const RunOptions& o, const std::vector<PreparedRequest>& prepared) {
  if (o.edits.empty()) return {};
  EditLimits lim;
  lim.diffusion = o.kind == RunKind::Generate && s.info().decoding == DecodingKind::MaskedDiffusion;
  const bool final_capture = parse_step_policy(o.capture.diffusion_capture).kind == StepPolicy::Kind::Final;
  for (const auto& p : prepared) {
    std::int64_t len = static_cast<std::int64_t>(p.ids.size());
    if (o.kind == RunKind::Generate) len += resolve_max_new_tokens(p.settings, s.config());
    lim.max_position = std::max(lim.max_position, len);
    if (lim.diffusion)
      lim.steps = std::max(lim.steps, resolve_diffusion(p.settings, s.config(), s.info()).steps + (final_capture ? 1 : 0));
    lim.prompt_ids.push_back(p.id);
    lim.prompt_tokens.push_back(p.ids);
  }
  return resolve_edits(s, o.edits, lim);
}

}  // namespace run_detail
}  // namespace sonde
