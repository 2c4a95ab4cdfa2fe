// CaptureSettings and the capture spec a run derives from them (run.h).
#include <sonde/error.h>
#include <sonde/hooks.h>
#include <sonde/run.h>
#include <sonde/tokenizer.h>

#include <charconv>
#include <set>

namespace sonde {

DType CaptureSettings::storage_dtype() const {
  const auto st = parse_dtype(storage);
  if (!st || (*st != DType::f32 && *st != DType::bf16 && *st != DType::f16))
    bad_setting("storage dtype", "'{}' is not f32, bf16 or f16", storage);
  return *st;
}

std::int64_t CaptureSettings::sparse_top_k() const {
  if (sae_sparse.empty()) return -1;
  if (sae_sparse == "nonzero") return 0;
  std::int64_t k = 0;
  if (sae_sparse.rfind("top:", 0) == 0) {
    const char* b = sae_sparse.data() + 4;
    const char* e = sae_sparse.data() + sae_sparse.size();
    const auto [end, ec] = std::from_chars(b, e, k);
    if (ec == std::errc() && end == e && b != e && k > 0) return k;
  }
  bad_setting("sae_sparse", "'{}' is not nonzero or top:K with K a positive integer", sae_sparse);
}

void CaptureSettings::check() const {
  sparse_top_k();
  parse_position_policy(positions);
  parse_step_policy(diffusion_capture);
  storage_dtype();
}

nlohmann::json CaptureSettings::to_json() const {
  nlohmann::json j{{"hooks", hooks}, {"positions", positions}, {"diffusion_capture", diffusion_capture},
                   {"storage_dtype", storage}, {"compress", compress}};
  if (!sae_sparse.empty()) j["sae_sparse"] = sae_sparse;  // absent when dense: earlier runs' digests hold
  return j;
}

CaptureSpec make_capture_spec(const RunModel& s, const CaptureSettings& settings, bool per_sequence_ok) {
  const auto& cfg = s.config();
  CaptureSpec spec;
  if (!settings.hooks.empty()) {
    spec.hooks = HookSelector::parse(settings.hooks).resolve(s.hook_points(), cfg.num_hidden_layers);
    if (spec.hooks.empty()) bad_setting("hooks", "'{}' selects no hook point", settings.hooks);
  }
  if (!per_sequence_ok) require_fixed_row_shapes(spec.hooks);  // before any output file exists
  spec.positions = parse_position_policy(settings.positions);
  spec.steps = parse_step_policy(settings.diffusion_capture);
  spec.record_steps = s.info().decoding == DecodingKind::MaskedDiffusion;

  // Row kind "special": the config's bos/eos/pad/mask ids and the tokenizer's special added
  // tokens (<|im_start|>, ...): researchers filter chat scaffolding out of dumps by row kind.
  std::set<std::int32_t> special;
  for (auto id : cfg.eos_token_ids) special.insert(static_cast<std::int32_t>(id));
  for (const auto& id : {cfg.bos_token_id, cfg.pad_token_id, cfg.mask_token_id})
    if (id) special.insert(static_cast<std::int32_t>(*id));
  if (const Tokenizer* tok = s.tokenizer())
    for (const auto& t : tok->added_tokens())
      if (t.special) special.insert(t.id);
  spec.is_special = [special = std::move(special)](std::int32_t t) { return special.count(t) > 0; };
  return spec;
}

}  // namespace sonde
