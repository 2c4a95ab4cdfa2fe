#include "batch_gen.h"

#include "gen_options.h"

#include <sonde/chat.h>
#include <sonde/error.h>

#include <algorithm>

namespace sonde::cli {
namespace {

using nlohmann::json;

template <typename T>
std::optional<T> opt(const json& o, const char* key) {
  return o.contains(key) ? std::optional<T>(o[key].get<T>()) : std::nullopt;
}

// The prompt's tokens; `text` receives the text they encode (the rendered chat for messages).
std::vector<std::int32_t> tokenize(const BatchRequest& r, const std::optional<Tokenizer>& tok, const Session& s,
                                   std::string& text) {
  if (!r.ids.empty()) return r.ids;
  if (!tok) bad_input("line {}: {} has no tokenizer; give \"ids\"", r.line, s.config().dir.string());
  text = r.text;
  if (!r.messages.is_null()) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : r.messages) msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    text = apply_chat_template(msgs, tok->chat_template(), true);
  }
  auto ids = tok->encode(text);
  if (ids.empty()) bad_input("line {}: the prompt encodes to no tokens", r.line);
  return ids;
}

}  // namespace

PreparedRequest prepare_request(const BatchRequest& r, std::int64_t prompt_idx, const json& defaults,
                                std::uint64_t base_seed, Session& s, const std::optional<Tokenizer>& tok) {
  PreparedRequest p;
  p.prompt_idx = prompt_idx;
  p.request = &r;
  p.ids = tokenize(r, tok, s, p.text);
  const auto& cfg = s.config();
  for (auto id : p.ids)
    if (id >= cfg.vocab_size) bad_input("line {}: token id {} is outside the vocabulary [0, {})", r.line, id, cfg.vocab_size);
  p.options = defaults;
  for (const auto& [k, v] : r.options.items()) p.options[k] = v;
  p.seed = p.options.contains("seed") ? p.options["seed"].get<std::uint64_t>() : base_seed + static_cast<std::uint64_t>(prompt_idx);
  p.options.erase("seed");
  const auto total = static_cast<std::int64_t>(p.ids.size()) + max_new_tokens(s, p.options);
  if (max_new_tokens(s, p.options) < 1) bad_input("line {}: max_new_tokens must be at least 1", r.line);
  if (total > cfg.max_position_embeddings)
    bad_input("line {}: {} prompt tokens + {} new tokens exceed max_position_embeddings {}", r.line, p.ids.size(),
              max_new_tokens(s, p.options), cfg.max_position_embeddings);
  if (s.info().decoding == DecodingKind::MaskedDiffusion) {
    if (auto st = opt<std::int64_t>(p.options, "steps"); st && *st < 1) bad_input("line {}: steps must be at least 1", r.line);
    if (auto a = opt<std::string>(p.options, "alg")) parse_diffusion_alg(*a);
  }
  p.key = p.options.dump();
  return p;
}

std::vector<RequestResult> run_micro_batch(Session& s, DecodeForward& fwd, const std::optional<Tokenizer>& tok,
                                           const std::vector<const PreparedRequest*>& batch, const CaptureSpec& spec) {
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::int64_t> idx;
  std::vector<std::uint64_t> seeds;
  for (const auto* p : batch) {
    prompts.push_back(p->ids);
    idx.push_back(p->prompt_idx);
    seeds.push_back(p->seed);
  }
  const json& o = batch.front()->options;
  std::vector<RequestResult> out(batch.size());
  if (s.info().decoding == DecodingKind::MaskedDiffusion) {
    DiffusionOptions d = diffusion_options(s, o);
    d.seeds = seeds;
    auto res = diffusion_generate_captured(fwd, prompts, d, spec, idx);
    for (std::size_t r = 0; r < batch.size(); ++r) {
      out[r].completion = res.result.completions[r];
      out[r].text = completion_text(tok, out[r].completion, /*diffusion=*/true, {}).value_or("");
      out[r].finish_reason = "length";
      if (!res.captured.empty()) out[r].captured = std::move(res.captured[r]);
    }
    return out;
  }
  ArOptions a = ar_options(s, o, tok);
  a.seeds = seeds;
  auto res = generate_autoregressive_captured(fwd, prompts, a, spec, idx);
  for (std::size_t r = 0; r < batch.size(); ++r) {
    out[r].completion = res.completions[r].tokens;
    out[r].text = completion_text(tok, out[r].completion, /*diffusion=*/false, a.stop_strings).value_or("");
    out[r].finish_reason = res.completions[r].finish_reason;
    if (!res.captured.empty()) out[r].captured = std::move(res.captured[r]);
  }
  return out;
}

}  // namespace sonde::cli
