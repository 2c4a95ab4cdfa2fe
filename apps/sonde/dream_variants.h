#pragma once
// make-model --variant: the Dream-family checkpoints' own files (docs/models.md, "Dream family"),
// written over Dream-v0's shape so tests and demos meet each variant as it is published.
#include "special_tokens.h"

#include <nlohmann/json.hpp>

#include <string>

namespace sonde::cli {

// dream-v0 (the default), diffucoder or dream-coder; BadInput naming --variant otherwise, or for
// a variant with an arch other than dream.
void check_dream_variant(const std::string& arch, const std::string& variant);
// The variant's extra special token (DiffuCoder's <|dlm_pad|>, Dream-Coder's <|beginoftext|>):
// Qwen2.5's id at real size, else the slot below the four specials.
void add_variant_specials(const std::string& variant, std::int64_t vocab, bool real_vocab, SpecialIds& ids);
void apply_variant_config(const std::string& variant, const SpecialIds& ids, nlohmann::ordered_json& config);
void apply_variant_generation(const std::string& variant, const SpecialIds& ids, nlohmann::ordered_json& generation);
void apply_variant_tokenizer(const std::string& variant, nlohmann::ordered_json& tokenizer_config);

}  // namespace sonde::cli
