#include <sonde/config.h>
#include <sonde/error.h>
#include <sonde/hooks.h>
#include <sonde/model.h>
#include <sonde/request.h>
#include <sonde/sampling.h>
#include <sonde/stop_strings.h>
#include <sonde/tokenizer.h>

#include <algorithm>
#include <cmath>

namespace sonde {
namespace {

using nlohmann::json;

template <typename T>
void set_if(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

template <typename T>
void take(std::optional<T>& into, const std::optional<T>& from) {
  if (from) into = from;
}

[[noreturn]] void bad_value(const std::string& key, const json& v) {
  bad_input("field \"{}\": bad value {}", key, v.dump());
}

std::int64_t whole(const std::string& key, const json& v) {
  if (!(v.is_number_integer() || v.is_number_unsigned()) || v.get<std::int64_t>() < 0) bad_value(key, v);
  return v.get<std::int64_t>();
}

double number(const std::string& key, const json& v) {
  if (!v.is_number()) bad_value(key, v);
  return v.get<double>();
}

}  // namespace

const std::vector<std::string>& GenerationSettings::keys() {
  static const std::vector<std::string> names{"max_new_tokens", "temperature", "top_p", "top_k", "repetition_penalty",
                                              "seed", "steps", "alg", "alg_temp", "eps", "eos_penalty", "stop",
                                              "diffusion_mode", "block_size", "threshold", "tokens_per_step",
                                              "refresh_every", "block_length", "remasking", "cfg_scale",
                                              "small_block_size"};
  return names;
}

GenerationSettings GenerationSettings::overridden_by(const GenerationSettings& o) const {
  GenerationSettings s = *this;
  take(s.max_new_tokens, o.max_new_tokens);
  take(s.top_k, o.top_k);
  take(s.steps, o.steps);
  take(s.temperature, o.temperature);
  take(s.top_p, o.top_p);
  take(s.repetition_penalty, o.repetition_penalty);
  take(s.eps, o.eps);
  take(s.alg_temp, o.alg_temp);
  take(s.eos_penalty, o.eos_penalty);
  take(s.alg, o.alg);
  take(s.stop, o.stop);
  take(s.seed, o.seed);
  take(s.diffusion_mode, o.diffusion_mode);
  take(s.block_size, o.block_size);
  take(s.threshold, o.threshold);
  take(s.tokens_per_step, o.tokens_per_step);
  take(s.refresh_every, o.refresh_every);
  take(s.block_length, o.block_length);
  take(s.remasking, o.remasking);
  take(s.cfg_scale, o.cfg_scale);
  take(s.small_block_size, o.small_block_size);
  return s;
}

json GenerationSettings::to_json() const {
  json j = json::object();
  set_if(j, "max_new_tokens", max_new_tokens);
  set_if(j, "top_k", top_k);
  set_if(j, "steps", steps);
  set_if(j, "temperature", temperature);
  set_if(j, "top_p", top_p);
  set_if(j, "repetition_penalty", repetition_penalty);
  set_if(j, "eps", eps);
  set_if(j, "alg_temp", alg_temp);
  set_if(j, "eos_penalty", eos_penalty);
  set_if(j, "alg", alg);
  set_if(j, "stop", stop);
  set_if(j, "seed", seed);
  set_if(j, "diffusion_mode", diffusion_mode);
  set_if(j, "block_size", block_size);
  set_if(j, "threshold", threshold);
  set_if(j, "tokens_per_step", tokens_per_step);
  set_if(j, "refresh_every", refresh_every);
  set_if(j, "block_length", block_length);
  set_if(j, "remasking", remasking);
  set_if(j, "cfg_scale", cfg_scale);
  set_if(j, "small_block_size", small_block_size);
  return j;
}

std::string GenerationSettings::batch_key() const {
  json j = to_json();
  j.erase("seed");
  return j.dump();
}

GenerationSettings GenerationSettings::from_json(const json& o) {
  if (!o.is_object()) bad_input("generation settings: expected a JSON object, got {}", o.dump());
  GenerationSettings s;
  for (const auto& [key, v] : o.items()) {
    if (key == "max_new_tokens") s.max_new_tokens = whole(key, v);
    else if (key == "top_k") s.top_k = whole(key, v);
    else if (key == "steps") s.steps = whole(key, v);
    else if (key == "seed") s.seed = static_cast<std::uint64_t>(whole(key, v));
    else if (key == "temperature") s.temperature = number(key, v);
    else if (key == "top_p") s.top_p = number(key, v);
    else if (key == "repetition_penalty") s.repetition_penalty = number(key, v);
    else if (key == "eps") s.eps = number(key, v);
    else if (key == "alg_temp") s.alg_temp = number(key, v);
    else if (key == "eos_penalty") s.eos_penalty = number(key, v);
    else if (key == "block_size") s.block_size = whole(key, v);
    else if (key == "tokens_per_step") s.tokens_per_step = whole(key, v);
    else if (key == "refresh_every") s.refresh_every = whole(key, v);
    else if (key == "threshold") s.threshold = number(key, v);
    else if (key == "block_length") s.block_length = whole(key, v);
    else if (key == "small_block_size") s.small_block_size = whole(key, v);
    else if (key == "cfg_scale") s.cfg_scale = number(key, v);
    else if (key == "alg" || key == "diffusion_mode" || key == "remasking") {
      if (!v.is_string()) bad_value(key, v);
      (key == "alg" ? s.alg : key == "remasking" ? s.remasking : s.diffusion_mode) = v.get<std::string>();
    } else if (key == "stop") {
      if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) bad_value(key, v);
      s.stop = v.get<std::vector<std::string>>();
    } else {
      bad_input("unknown field \"{}\"{}", key, did_you_mean(key, keys(), 2));
    }
  }
  return s;
}

void GenerationSettings::check() const {
  const auto finite = [](const char* name, double v) {
    if (!std::isfinite(v)) bad_input("{}: {} is not a finite number", name, v);
    return v;
  };
  if (max_new_tokens && *max_new_tokens < 1) bad_input("max_new_tokens: {} is less than 1", *max_new_tokens);
  if (steps && *steps < 1) bad_input("steps: {} is less than 1", *steps);
  if (top_k && *top_k < 0) bad_input("top_k: {} is negative", *top_k);
  if (temperature && finite("temperature", *temperature) < 0) bad_input("temperature: {} is negative", *temperature);
  if (alg_temp && finite("alg_temp", *alg_temp) < 0) bad_input("alg_temp: {} is negative", *alg_temp);
  if (eos_penalty && finite("eos_penalty", *eos_penalty) < 0) bad_input("eos_penalty: {} is negative", *eos_penalty);
  if (top_p && !(finite("top_p", *top_p) > 0 && *top_p <= 1)) bad_input("top_p: {} is outside (0, 1]", *top_p);
  if (repetition_penalty && !(finite("repetition_penalty", *repetition_penalty) > 0))
    bad_input("repetition_penalty: {} is not positive", *repetition_penalty);
  if (eps && !(finite("eps", *eps) > 0 && *eps < 1)) bad_input("eps: {} is outside (0, 1)", *eps);
  if (alg) parse_diffusion_alg(*alg);
  if (block_length && *block_length < 1) bad_input("block_length: {} is less than 1", *block_length);
  if (remasking) parse_remasking(*remasking);
  if (cfg_scale && finite("cfg_scale", *cfg_scale) < 0) bad_input("cfg_scale: {} is negative", *cfg_scale);
  check_diffusion_settings();
}

void GenerationSettings::check_diffusion_settings() const {
  const auto mode = parse_diffusion_mode(diffusion_mode.value_or("exact"));
  const auto a = parse_diffusion_alg(alg.value_or("entropy"));
  if (block_size && *block_size < 1) bad_input("block_size: {} is less than 1", *block_size);
  if (small_block_size && *small_block_size < 1) bad_input("small_block_size: {} is less than 1", *small_block_size);
  if (threshold && !(std::isfinite(*threshold) && *threshold > 0 && *threshold <= 1))
    bad_input("threshold: {} is outside (0, 1]", *threshold);
  // Without an alg the model decides: LLaDA's loop takes a threshold alone (resolve_diffusion
  // refuses it for Dream's without alg confidence_threshold).
  if (threshold && alg && a != DiffusionAlg::ConfidenceThreshold)
    bad_input("threshold: {} needs alg confidence_threshold, not {}", *threshold, diffusion_alg_name(a));
  if (tokens_per_step && *tokens_per_step < 1) bad_input("tokens_per_step: {} is less than 1", *tokens_per_step);
  if (tokens_per_step && (a == DiffusionAlg::Origin || a == DiffusionAlg::ConfidenceThreshold))
    bad_input("tokens_per_step: {} needs alg maskgit_plus, topk_margin or entropy, not {}", *tokens_per_step,
              diffusion_alg_name(a));
  if (refresh_every && *refresh_every < 1) bad_input("refresh_every: {} is less than 1", *refresh_every);
  if (refresh_every && !diffusion_mode_cached(mode))
    bad_input("refresh_every: {} needs diffusion_mode block-cache or dual-cache, not {}", *refresh_every,
              diffusion_mode_name(mode));
  if (alg_temp && *alg_temp > 0 && a == DiffusionAlg::ConfidenceThreshold)
    bad_input("alg_temp: {} is not used by alg confidence_threshold (it commits by threshold, not by drawing)", *alg_temp);
}

std::int64_t resolve_max_new_tokens(const GenerationSettings& s, const ModelConfig& cfg) {
  return s.max_new_tokens.value_or(cfg.generation.max_new_tokens.value_or(64));
}

ArOptions resolve_autoregressive(const GenerationSettings& s, const ModelConfig& cfg, const Tokenizer* tok) {
  const auto& gen = cfg.generation;
  ArOptions a;
  a.max_new_tokens = resolve_max_new_tokens(s, cfg);
  a.sampling.do_sample = s.temperature ? *s.temperature > 0 : gen.do_sample;
  a.sampling.temperature = s.temperature.value_or(gen.temperature.value_or(1.0));
  if (a.sampling.temperature <= 0) a.sampling.temperature = 1.0;  // greedy ignores it
  a.sampling.top_k = s.top_k.value_or(gen.top_k.value_or(0));
  a.sampling.top_p = s.top_p.value_or(gen.top_p.value_or(1.0));
  a.sampling.repetition_penalty = s.repetition_penalty.value_or(gen.repetition_penalty.value_or(1.0));
  a.eos_ids = gen.eos_token_ids.empty() ? cfg.eos_token_ids : gen.eos_token_ids;
  a.pad_id = static_cast<std::int32_t>(gen.pad_token_id.value_or(a.eos_ids.empty() ? 0 : a.eos_ids[0]));
  a.stop_strings = s.stop.value_or(std::vector<std::string>{});
  if (!a.stop_strings.empty() && !tok) bad_input("stop: {} has no tokenizer to turn tokens into text", cfg.dir.string());
  if (tok) a.detokenize = [tok](const std::vector<std::int32_t>& ids) { return tok->decode(ids, false); };
  return a;
}

namespace {

// LLaDA's generate(): its own settings, and a clear refusal of Dream's (which it has no use for).
void resolve_remasking(const GenerationSettings& s, DiffusionOptions& d) {
  const std::pair<const char*, bool> dream_only[] = {
      {"alg", s.alg.has_value()}, {"eps", s.eps.has_value()}, {"alg_temp", s.alg_temp.has_value()},
      {"eos_penalty", s.eos_penalty.has_value()},
      {"top_p", s.top_p.has_value()}, {"top_k", s.top_k.has_value()}, {"block_size", s.block_size.has_value()},
      {"tokens_per_step", s.tokens_per_step.has_value()}, {"refresh_every", s.refresh_every.has_value()}};
  for (const auto& [name, set] : dream_only)
    if (set)
      bad_input("{}: is a setting of Dream's diffusion_generate; this model generates as LLaDA's generate() (steps, "
                "block_length, remasking, cfg_scale, temperature; Fast-dLLM's diffusion_mode and threshold)",
                name);
  d.remasking_threshold = s.threshold;
  d.loop = DiffusionLoop::SemiArRemasking;
  d.block_length = s.block_length.value_or(d.max_new_tokens);
  d.remasking = parse_remasking(s.remasking.value_or("low_confidence"));
  d.cfg_scale = s.cfg_scale.value_or(0.0);
  d.sampling.temperature = s.temperature.value_or(0.0);
  d.sampling.top_p.reset();
  d.sampling.top_k.reset();
  d.alg_temp.reset();
  d.eos_penalty = 0;  // LLaDA's generate() has no padding penalty (generation_config's is Dream-Coder's)
}

// Fast-dLLM v2's batch_sample: block_size, small_block_size, threshold, max_new_tokens, and its
// sampling (temperature, top_p; top_k as Dream's, which the published code does not have).
DiffusionOptions resolve_block_diffusion(const GenerationSettings& s, const ModelConfig& cfg, DiffusionOptions d) {
  const std::pair<const char*, bool> others[] = {
      {"steps", s.steps.has_value()}, {"alg", s.alg.has_value()}, {"eps", s.eps.has_value()},
      {"alg_temp", s.alg_temp.has_value()}, {"eos_penalty", s.eos_penalty.has_value()},
      {"diffusion_mode", s.diffusion_mode.has_value()}, {"tokens_per_step", s.tokens_per_step.has_value()},
      {"refresh_every", s.refresh_every.has_value()}, {"block_length", s.block_length.has_value()},
      {"remasking", s.remasking.has_value()}, {"cfg_scale", s.cfg_scale.has_value()}};
  for (const auto& [name, set] : others)
    if (set)
      bad_input("{}: is not a setting of this model's generation, Fast-dLLM v2's block diffusion (block_size, "
                "small_block_size, threshold, max_new_tokens, temperature, top_p, top_k)",
                name);
  d.loop = DiffusionLoop::BlockDiffusion;
  d.attention_block = cfg.bd_size.value_or(0);
  d.block_size = s.block_size.value_or(cfg.bd_size.value_or(32));
  d.small_block_size = s.small_block_size.value_or(8);  // the published evaluation's default
  d.threshold = s.threshold.value_or(0.9);
  // batch_sample's defaults (temperature 0, top_p 0.95), not generation_config.json's: the
  // published file is Qwen2.5-Instruct's sampling for autoregressive decoding (0.7, 0.8, top_k 20).
  d.sampling.temperature = s.temperature.value_or(0.0);
  d.sampling.top_p = s.top_p.value_or(0.95);
  d.sampling.top_k = s.top_k;
  d.alg_temp.reset();
  d.eos_penalty = 0;
  // batch_sample's stop_token (151645, <|im_end|>) is the published config.json's eos_token_id.
  const auto& eos = cfg.eos_token_ids.empty() ? cfg.generation.eos_token_ids : cfg.eos_token_ids;
  if (eos.empty()) bad_input("{}: config.json has no eos_token_id (the stop token of block diffusion)", cfg.dir.string());
  d.stop_id = static_cast<std::int32_t>(eos.front());
  return d;
}

}  // namespace

DiffusionOptions resolve_diffusion(const GenerationSettings& s, const ModelConfig& cfg, DiffusionLoop loop) {
  return resolve_diffusion(s, cfg, loop, std::nullopt);
}

DiffusionOptions resolve_diffusion(const GenerationSettings& s, const ModelConfig& cfg, const ModelInfo& info) {
  return resolve_diffusion(s, cfg, info.diffusion_loop,
                           info.mask_token_id >= 0 ? std::optional<std::int64_t>(info.mask_token_id) : std::nullopt);
}

DiffusionOptions resolve_diffusion(const GenerationSettings& s, const ModelConfig& cfg, DiffusionLoop loop,
                                   std::optional<std::int64_t> model_mask) {
  const auto& gen = cfg.generation;
  DiffusionOptions d;
  d.max_new_tokens = resolve_max_new_tokens(s, cfg);
  if (loop == DiffusionLoop::DreamTimesteps) {
    const std::pair<const char*, bool> llada_only[] = {{"block_length", s.block_length.has_value()},
                                                       {"remasking", s.remasking.has_value()},
                                                       {"cfg_scale", s.cfg_scale.has_value()}};
    for (const auto& [name, set] : llada_only)
      if (set) bad_input("{}: is a setting of LLaDA's generate(); this model does not generate that way", name);
    if (s.threshold && parse_diffusion_alg(s.alg.value_or("entropy")) != DiffusionAlg::ConfidenceThreshold)
      bad_input("threshold: {} needs alg confidence_threshold, not {}", *s.threshold, s.alg.value_or("entropy"));
    if (s.block_size && parse_diffusion_mode(s.diffusion_mode.value_or("exact")) == DiffusionMode::Exact)
      bad_input("block_size: {} needs diffusion_mode block (exact mode has one block, the whole generation)", *s.block_size);
  }
  if (loop != DiffusionLoop::BlockDiffusion && s.small_block_size)
    bad_input("small_block_size: is a setting of Fast-dLLM v2's block diffusion; this model does not generate that way");
  d.steps = s.steps.value_or(d.max_new_tokens);
  d.eps = s.eps.value_or(gen.eps.value_or(1e-3));
  d.sampling.alg = parse_diffusion_alg(s.alg.value_or("entropy"));
  d.sampling.temperature = s.temperature.value_or(gen.temperature.value_or(0.0));
  d.sampling.top_p = s.top_p ? s.top_p : gen.top_p;
  d.sampling.top_k = s.top_k ? s.top_k : gen.top_k;
  d.alg_temp = s.alg_temp ? s.alg_temp : gen.alg_temp;
  if (gen.eos_penalty && !(std::isfinite(*gen.eos_penalty) && *gen.eos_penalty >= 0))
    bad_input("{}: field 'eos_penalty' is {}: it must be a finite number >= 0", (cfg.dir / "generation_config.json").string(),
              *gen.eos_penalty);
  d.eos_penalty = s.eos_penalty.value_or(gen.eos_penalty.value_or(0.0));
  d.mode = parse_diffusion_mode(s.diffusion_mode.value_or("exact"));
  d.block_size = s.block_size.value_or(d.block_size);
  d.threshold = s.threshold.value_or(d.threshold);
  d.tokens_per_step = s.tokens_per_step.value_or(0);
  d.refresh_every = s.refresh_every.value_or(0);
  const auto mask = cfg.mask_token_id ? cfg.mask_token_id : gen.mask_token_id ? gen.mask_token_id : model_mask;
  if (!mask) bad_input("{}: config.json has no mask_token_id", cfg.dir.string());
  d.mask_id = static_cast<std::int32_t>(*mask);
  d.pad_id = static_cast<std::int32_t>(cfg.pad_token_id.value_or(gen.pad_token_id.value_or(0)));
  if (loop == DiffusionLoop::SemiArRemasking) resolve_remasking(s, d);
  if (loop == DiffusionLoop::BlockDiffusion) return resolve_block_diffusion(s, cfg, d);
  return d;
}

std::optional<std::string> completion_text(const Tokenizer* tok, const ModelInfo& info,
                                           const std::vector<std::int32_t>& ids, const std::vector<std::string>& stop) {
  if (!tok) return std::nullopt;
  std::vector<std::int32_t> end_ids;
  for (const auto& end : info.end_tokens)
    if (auto id = tok->token_id(end)) end_ids.push_back(*id);
  const std::string text = tok->decode(end_ids.empty() ? ids : cut_at_end_tokens(ids, end_ids), false);
  return stop.empty() ? text : cut_at_stop_string(text, stop);
}

}  // namespace sonde
