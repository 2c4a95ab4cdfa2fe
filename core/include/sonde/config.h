#pragma once
// config.json and generation_config.json as plain data. Parsing validates every field a model
// needs and names the file, the field and the value on error.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sonde {

struct GenerationConfig {
  std::vector<std::int64_t> eos_token_ids;
  std::optional<std::int64_t> bos_token_id, pad_token_id, mask_token_id;
  std::optional<std::int64_t> max_new_tokens;
  bool do_sample = false;
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<std::int64_t> top_k;
  // Dream's diffusion defaults
  std::optional<std::int64_t> steps;
  std::optional<double> eps, alg_temp;
  // Dream-Coder's padding penalty (docs/models.md, "Dream family"); absent in Dream-v0's file.
  std::optional<double> eos_penalty;
  std::string alg;
  std::string raw_json;  // "{}" when the file is absent
};

struct ModelConfig {
  std::filesystem::path dir;
  std::string model_type;  // "qwen2", "Dream"
  std::vector<std::string> architectures;
  std::int64_t hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0,
               num_key_value_heads = 0, head_dim = 0, intermediate_size = 0, vocab_size = 0,
               max_position_embeddings = 0;
  double rms_norm_eps = 0, rope_theta = 0;
  bool tie_word_embeddings = false;
  std::string hidden_act, torch_dtype;
  std::optional<std::int64_t> bos_token_id, pad_token_id, mask_token_id;
  std::vector<std::int64_t> eos_token_ids;
  // Block-diffusion models (Fast-dLLM v2): the attention block of the block-causal mask, which is
  // also the default generation block (DiffusionOptions::block_size).
  std::optional<std::int64_t> bd_size;
  std::string raw_json;
  GenerationConfig generation;

  // Reads dir/config.json (required) and dir/generation_config.json (optional).
  static ModelConfig load(const std::filesystem::path& dir);
  // Parses config text; `label` names the file in errors.
  static ModelConfig parse(const std::string& json_text, const std::string& label);
};

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& label);

}  // namespace sonde
