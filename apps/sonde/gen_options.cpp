#include "gen_options.h"

#include <sonde/error.h>
#include <sonde/sampling.h>
#include <sonde/stop_strings.h>

namespace sonde::cli {
namespace {

using nlohmann::json;

template <typename T>
std::optional<T> opt(const json& o, const char* key) {
  return o.contains(key) && !o[key].is_null() ? std::optional<T>(o[key].get<T>()) : std::nullopt;
}

}  // namespace

std::int64_t max_new_tokens(const Session& s, const json& o) {
  return opt<std::int64_t>(o, "max_new_tokens").value_or(s.config().generation.max_new_tokens.value_or(64));
}

ArOptions ar_options(const Session& s, const json& o, const std::optional<Tokenizer>& tok) {
  const auto& gen = s.config().generation;
  ArOptions a;
  a.max_new_tokens = max_new_tokens(s, o);
  a.sampling.do_sample = gen.do_sample;
  if (auto t = opt<double>(o, "temperature")) a.sampling.do_sample = *t > 0;
  a.sampling.temperature = opt<double>(o, "temperature").value_or(gen.temperature.value_or(1.0));
  if (a.sampling.temperature <= 0) a.sampling.temperature = 1.0;  // greedy ignores it
  a.sampling.top_k = opt<std::int64_t>(o, "top_k").value_or(gen.top_k.value_or(0));
  a.sampling.top_p = opt<double>(o, "top_p").value_or(gen.top_p.value_or(1.0));
  a.sampling.repetition_penalty = opt<double>(o, "repetition_penalty").value_or(gen.repetition_penalty.value_or(1.0));
  a.eos_ids = gen.eos_token_ids.empty() ? s.config().eos_token_ids : gen.eos_token_ids;
  a.pad_id = static_cast<std::int32_t>(gen.pad_token_id.value_or(a.eos_ids.empty() ? 0 : a.eos_ids[0]));
  a.stop_strings = opt<std::vector<std::string>>(o, "stop").value_or(std::vector<std::string>{});
  if (!a.stop_strings.empty() && !tok)
    bad_input("stop: {} has no tokenizer to turn tokens into text", s.config().dir.string());
  if (tok) a.detokenize = [&tok](const std::vector<std::int32_t>& ids) { return tok->decode(ids, false); };
  return a;
}

DiffusionOptions diffusion_options(const Session& s, const json& o) {
  const auto& gen = s.config().generation;
  const auto& cfg = s.config();
  DiffusionOptions d;
  d.max_new_tokens = max_new_tokens(s, o);
  d.steps = opt<std::int64_t>(o, "steps").value_or(d.max_new_tokens);
  d.eps = opt<double>(o, "eps").value_or(gen.eps.value_or(1e-3));
  d.sampling.alg = parse_diffusion_alg(opt<std::string>(o, "alg").value_or("entropy"));
  d.sampling.temperature = opt<double>(o, "temperature").value_or(gen.temperature.value_or(0.0));
  d.sampling.top_p = o.contains("top_p") ? opt<double>(o, "top_p") : gen.top_p;
  d.sampling.top_k = o.contains("top_k") ? opt<std::int64_t>(o, "top_k") : gen.top_k;
  d.alg_temp = o.contains("alg_temp") ? opt<double>(o, "alg_temp") : gen.alg_temp;
  const auto mask = cfg.mask_token_id ? cfg.mask_token_id : gen.mask_token_id;
  if (!mask) bad_input("{}: config.json has no mask_token_id", cfg.dir.string());
  d.mask_id = static_cast<std::int32_t>(*mask);
  d.pad_id = static_cast<std::int32_t>(cfg.pad_token_id.value_or(gen.pad_token_id.value_or(0)));
  return d;
}

std::optional<std::string> completion_text(const std::optional<Tokenizer>& tok, const std::vector<std::int32_t>& ids,
                                           bool diffusion, const std::vector<std::string>& stop) {
  if (!tok) return std::nullopt;
  if (!diffusion) return cut_at_stop_string(tok->decode(ids, false), stop);
  std::vector<std::int32_t> end_ids;
  for (const char* end : {"<|endoftext|>", "<|dlm_pad|>"})
    if (auto id = tok->token_id(end)) end_ids.push_back(*id);
  return tok->decode(cut_at_end_tokens(ids, end_ids), false);
}

}  // namespace sonde::cli
