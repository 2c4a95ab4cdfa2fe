#pragma once
// The generation settings of one request, shared by `sonde generate` and `sonde batch`. A
// request is a JSON object with the keys of a batch input line (design §6): max_new_tokens,
// temperature, top_k, top_p, repetition_penalty, stop, steps, eps, alg, alg_temp. A missing key
// takes generation_config.json's value, then the family's default.
#include <sonde/decode.h>
#include <sonde/session.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sonde::cli {

std::int64_t max_new_tokens(const Session& s, const nlohmann::json& request);
// Greedy unless a temperature > 0 or generation_config's do_sample says otherwise.
ArOptions ar_options(const Session& s, const nlohmann::json& request, const std::optional<Tokenizer>& tok);
// Dream's defaults: steps = max_new_tokens, alg entropy, eps 1e-3, temperature 0.
DiffusionOptions diffusion_options(const Session& s, const nlohmann::json& request);

// A completion's text, or nullopt without a tokenizer: Dream's is cut at the first <|endoftext|>
// or <|dlm_pad|> (model-spec §3.5); an autoregressive one ends before its first stop string.
std::optional<std::string> completion_text(const std::optional<Tokenizer>& tok, const std::vector<std::int32_t>& ids,
                                           bool diffusion, const std::vector<std::string>& stop);

}  // namespace sonde::cli
