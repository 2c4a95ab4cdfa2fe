#include "capture_setup.h"

#include <sonde/error.h>
#include <sonde/hooks.h>
#include <sonde/tokenizer.h>

#include <set>

namespace sonde::cli {

void add_capture_options(po::options_description& desc, CaptureOptions& o) {
  desc.add_options()
      ("hooks", po::value(&o.hooks), "hooks to capture: names, aliases, globs, ranges, comma-separated")
      ("positions", po::value(&o.positions)->default_value("all"), "all, prompt, generated or last")
      ("diffusion-capture", po::value(&o.diffusion_capture)->default_value("commit"),
       "diffusion steps captured: commit, final, all or every:K")
      ("storage-dtype", po::value(&o.storage)->default_value("f32"), "f32, bf16 or f16")
      ("compress", po::bool_switch(&o.compress), "shuffle + deflate the activations (smaller files, slower writes)");
}

DType storage_dtype(const std::string& name) {
  const auto st = parse_dtype(name);
  if (!st || (*st != DType::f32 && *st != DType::bf16 && *st != DType::f16))
    bad_input("--storage-dtype: '{}' is not f32, bf16 or f16", name);
  return *st;
}

void check_capture_options(const CaptureOptions& o) {
  parse_position_policy(o.positions);
  parse_step_policy(o.diffusion_capture);
  storage_dtype(o.storage);
}

CaptureSpec make_capture_spec(Session& s, const CaptureOptions& o) {
  const auto& cfg = s.config();
  CaptureSpec spec;
  if (!o.hooks.empty()) spec.hooks = HookSelector::parse(o.hooks).resolve(s.hook_points(), cfg.num_hidden_layers);
  require_fixed_row_shapes(spec.hooks);  // before any output file exists
  spec.positions = parse_position_policy(o.positions);
  spec.steps = parse_step_policy(o.diffusion_capture);
  spec.record_steps = s.info().decoding == DecodingKind::MaskedDiffusion;
  spec.is_special = special_token_test(s);
  return spec;
}

std::function<bool(std::int32_t)> special_token_test(const Session& s) {
  const auto& cfg = s.config();
  std::set<std::int32_t> special;
  for (auto id : cfg.eos_token_ids) special.insert(static_cast<std::int32_t>(id));
  for (const auto& id : {cfg.bos_token_id, cfg.pad_token_id, cfg.mask_token_id})
    if (id) special.insert(static_cast<std::int32_t>(*id));
  // The tokenizer's special added tokens too (<|im_start|>, <|im_end|>, ...): researchers filter
  // chat scaffolding out of activation dumps by row kind.
  if (Tokenizer::available(s.model_dir()))
    for (const auto& t : Tokenizer::load(s.model_dir()).added_tokens())
      if (t.special) special.insert(t.id);
  return [special](std::int32_t t) { return special.count(t) > 0; };
}

nlohmann::json capture_config(const CaptureOptions& o) {
  return {{"hooks", o.hooks}, {"positions", o.positions}, {"diffusion_capture", o.diffusion_capture},
          {"storage_dtype", o.storage}, {"compress", o.compress}};
}

}  // namespace sonde::cli
