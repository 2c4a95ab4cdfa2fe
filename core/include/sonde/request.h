#pragma once
// What a run is asked to do for one prompt (design §6): the prompt as text, chat messages or
// token ids, and generation settings. Settings are typed and every field optional: a field left
// unset takes the run's default, then generation_config.json's value, then the family's default,
// resolved here and nowhere else.
#include <sonde/chat.h>
#include <sonde/decode.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sonde {

struct ModelConfig;
struct ModelInfo;
class Tokenizer;

struct GenerationSettings {
  std::optional<std::int64_t> max_new_tokens, top_k, steps;
  std::optional<double> temperature, top_p, repetition_penalty, eps, alg_temp;
  std::optional<double> eos_penalty;  // Dream-Coder's padding penalty (DiffusionOptions::eos_penalty)
  std::optional<std::string> alg;  // diffusion: origin, maskgit_plus, topk_margin, entropy, confidence_threshold
  // Diffusion decoding (decode.h): exact | block, the block size (default 32), alg
  // confidence_threshold's threshold (default 0.9), a fixed number of slots per step.
  std::optional<std::string> diffusion_mode;
  std::optional<std::int64_t> block_size, tokens_per_step;
  std::optional<std::int64_t> refresh_every;  // cached modes: a full refresh every N steps of a block
  std::optional<double> threshold;
  // LLaDA's generate() (DiffusionLoop::SemiArRemasking): its block_length, remasking
  // (low_confidence | random) and cfg_scale, under the names it gives them.
  std::optional<std::int64_t> block_length;
  std::optional<std::string> remasking;
  std::optional<double> cfg_scale;
  // Fast-dLLM v2's batch_sample (DiffusionLoop::BlockDiffusion): its sub-block size (block_size
  // and threshold are the fields above, with the meaning batch_sample gives them).
  std::optional<std::int64_t> small_block_size;
  std::optional<std::vector<std::string>> stop;   // autoregressive stop strings
  std::optional<std::uint64_t> seed;              // else the run's seed + the request's index

  // The settings of `over` where set, else these.
  GenerationSettings overridden_by(const GenerationSettings& over) const;
  // The set fields under the keys of a dataset line (max_new_tokens, temperature, ...), seed
  // included; unset fields are absent. Requests whose settings_key() agree share micro-batches.
  nlohmann::json to_json() const;
  std::string batch_key() const;  // to_json() without the seed
  // A JSON object with those keys. BadInput "field: ..." naming the key and value for an unknown
  // key or a value of the wrong type or sign.
  static GenerationSettings from_json(const nlohmann::json& object);
  // The values' meaning, the same for the command line, config files, dataset lines and Python:
  // BadInput "name: value ..." for max_new_tokens or steps < 1, a negative top_k, temperature or
  // alg_temp or eos_penalty, top_p outside (0, 1], repetition_penalty <= 0, eps outside (0, 1), an unknown alg
  // or diffusion_mode, block_size or tokens_per_step < 1, threshold outside (0, 1] or with an alg
  // other than confidence_threshold, tokens_per_step with origin or confidence_threshold,
  // refresh_every < 1 or without a cached mode, small_block_size < 1. (Dream's block_size with mode
  // exact is refused by resolve_diffusion: block diffusion takes a block_size alone.)
  void check() const;
  void check_diffusion_settings() const;  // the diffusion part of check()
  // The keys from_json accepts.
  static const std::vector<std::string>& keys();
};

struct Request {
  std::string id;                      // "" becomes the request's index
  std::string where;                   // where it came from, for messages: "line 3", "prompt 0"
  std::string text;                    // a prompt, encoded as it is
  std::vector<ChatMessage> messages;   // or a chat, rendered with the model's template
  std::vector<std::int32_t> ids;       // or token ids
  GenerationSettings settings;
  // A scored completion (RunKind::Score): text, encoded as it is, or token ids.
  std::optional<std::string> completion;
  std::vector<std::int32_t> completion_ids;
};

// The settings resolved for a model (family defaults from its info, generation_config.json).
std::int64_t resolve_max_new_tokens(const GenerationSettings& s, const ModelConfig& cfg);
// Greedy unless a temperature > 0 or generation_config's do_sample says otherwise. Stop strings
// need the tokenizer (BadInput without one); `tok` must outlive the options.
ArOptions resolve_autoregressive(const GenerationSettings& s, const ModelConfig& cfg, const Tokenizer* tok);
// Dream's defaults: steps = max_new_tokens, alg entropy, eps 1e-3, temperature 0. With `loop`
// SemiArRemasking (the model's ModelInfo::diffusion_loop) LLaDA's generate() instead: steps =
// max_new_tokens, one block, low_confidence, cfg_scale 0, temperature 0, and Fast-dLLM's
// diffusion_mode (exact, block-cache, dual-cache) and threshold; BadInput for a setting of the
// other loop (alg, eps, alg_temp, top_p, top_k, block_size, tokens_per_step, refresh_every), for
// LLaDA's with Dream's loop, and for a threshold with Dream's loop but not alg confidence_threshold.
// BlockDiffusion (Fast-dLLM v2's batch_sample): block_size (default config.json's bd_size),
// small_block_size (default 8), threshold (default 0.9), max_new_tokens, temperature (default 0:
// greedy), top_p (default 0.95, batch_sample's), top_k (default off); the stop token is the first
// eos_token_id (config.json's, else generation_config.json's); BadInput for any other setting.
DiffusionOptions resolve_diffusion(const GenerationSettings& s, const ModelConfig& cfg,
                                   DiffusionLoop loop = DiffusionLoop::DreamTimesteps);
// The same for a loaded model: its loop, and its mask token when neither config file names one
// (a plugin's published default, ModelInfo::mask_token_id).
DiffusionOptions resolve_diffusion(const GenerationSettings& s, const ModelConfig& cfg, const ModelInfo& info);
DiffusionOptions resolve_diffusion(const GenerationSettings& s, const ModelConfig& cfg, DiffusionLoop loop,
                                   std::optional<std::int64_t> model_mask);

// A completion's text, or nullopt without a tokenizer: cut before the first of the model's end
// tokens (Dream: model-spec §3.5), and an autoregressive one before its first stop string.
std::optional<std::string> completion_text(const Tokenizer* tok, const ModelInfo& info,
                                           const std::vector<std::int32_t>& ids, const std::vector<std::string>& stop);

}  // namespace sonde
