#pragma once
// Special token ids of make-model checkpoints. Real-size presets use Qwen2.5's ids (model-spec
// §1.1); small vocabularies put the specials at the top, as the shared golden models do.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sonde::cli {

// LLaDA (llada) names its three text specials <|endoftext|>, <|startoftext|> and <|eot_id|> and
// its mask <|mdm_mask|>; the fields keep Qwen's names for the same roles (eos, bos/start, end of turn).
struct SpecialIds {
  std::int32_t endoftext = 0, im_start = 0, im_end = 0, mask = -1;
  std::int32_t top = 0;  // the highest special id
  bool llada = false;
  std::string mask_name = "<|mask|>";  // Fast-dLLM v2: |<MASK>|
  std::pair<std::string, std::int32_t> extra{"", -1};  // a Dream variant's own special (dream_variants.h)
};

// arch: qwen2, dream, llada or fast_dllm_v2.
SpecialIds special_ids(const std::string& arch, std::int64_t vocab, bool real_vocab);
std::vector<std::pair<std::string, std::int32_t>> special_tokens(const SpecialIds& ids);
std::string tokenizer_config_json(const std::string& arch);

}  // namespace sonde::cli
