#include "dream_variants.h"

#include <sonde/error.h>

#include <algorithm>

namespace sonde::cli {

void check_dream_variant(const std::string& arch, const std::string& variant) {
  if (variant != "dream-v0" && variant != "diffucoder" && variant != "dream-coder")
    bad_input("--variant: unknown variant '{}' (dream-v0, diffucoder, dream-coder)", variant);
  if (variant != "dream-v0" && arch != "dream")
    bad_input("--variant: '{}' is a Dream-family variant and needs --arch dream, not {}", variant, arch);
}

void add_variant_specials(const std::string& variant, std::int64_t vocab, bool real_vocab, SpecialIds& ids) {
  // Small vocabularies: the specials sit at vocab - 4 .. vocab - 1, the variant's one just below.
  const auto below = static_cast<std::int32_t>(vocab) - 5;
  if (variant == "diffucoder") {
    ids.extra = {"<|dlm_pad|>", real_vocab ? 151667 : below};  // model-spec §1.1 (its added_tokens.json)
  } else if (variant == "dream-coder") {
    ids.extra = {"<|beginoftext|>", real_vocab ? 151665 : below};
  } else {
    return;
  }
  ids.top = std::max(ids.top, ids.extra.second);
}

void apply_variant_config(const std::string& variant, const SpecialIds& ids, nlohmann::ordered_json& c) {
  // DiffuCoder-7B-Instruct's config.json keeps bos = eos = pad = <|endoftext|> (Dream-v0's).
  if (variant != "dream-coder") return;
  // Dream-Coder-v0-*-7B: bos <|beginoftext|> 151665 and a 32768-token context (model-spec §1.1).
  c["bos_token_id"] = ids.extra.second;
  c["max_position_embeddings"] = 32768;
}

void apply_variant_generation(const std::string& variant, const SpecialIds& ids, nlohmann::ordered_json& g) {
  if (variant == "diffucoder") {
    // apple/DiffuCoder-7B-Instruct's model card (and apple/ml-diffucoder's README): entropy
    // ordering, alg_temp 0, temperature 0.4, top_p 0.95 (the Base card: 0.2).
    g["alg"] = "entropy";
    g["alg_temp"] = 0.0;
    g["temperature"] = 0.4;
    g["top_p"] = 0.95;
  } else if (variant == "dream-coder") {
    // DreamLM/Dream-Coder README.md, the demos' "consistent sampling parameters": temperature
    // 0.1, alg entropy, top_p 1.0, alg_temp 0.0, eos_penalty 3.0 (its Quickstart: top_p 0.95, no
    // eos_penalty).
    g["bos_token_id"] = ids.extra.second;
    g["alg"] = "entropy";
    g["alg_temp"] = 0.0;
    g["temperature"] = 0.1;
    g["top_p"] = 1.0;
    g["eos_penalty"] = 3.0;
  }
}

void apply_variant_tokenizer(const std::string& variant, nlohmann::ordered_json& t) {
  if (variant == "diffucoder") t["pad_token"] = "<|dlm_pad|>";  // its tokenizer pads with the added token
  if (variant == "dream-coder") {
    t["add_bos_token"] = false;  // published: the BOS is never prepended (Dream-Coder's lm_eval add_bos_token=False)
    t["bos_token"] = "<|beginoftext|>";
  }
}

}  // namespace sonde::cli
