#include "special_tokens.h"

#include <sonde/chat.h>

#include <nlohmann/json.hpp>

#include <algorithm>

namespace sonde::cli {

SpecialIds special_ids(const std::string& arch, std::int64_t vocab, bool real_vocab) {
  const bool dream = arch == "dream", fdv2 = arch == "fast_dllm_v2";
  SpecialIds s;
  s.mask_name = fdv2 ? "|<MASK>|" : "<|mask|>";
  s.llada = arch == "llada";
  if (s.llada) {
    // LLaDA-8B's tokenizer: <|startoftext|> 126080, <|endoftext|> 126081, <|mdm_mask|> 126336,
    // <|eot_id|> 126348; small vocabularies put the four at the top.
    const auto first = static_cast<std::int32_t>(vocab) - 4;
    s.endoftext = real_vocab ? 126081 : first, s.im_start = real_vocab ? 126080 : first + 1;
    s.im_end = real_vocab ? 126348 : first + 2, s.mask = real_vocab ? 126336 : first + 3;
  } else if (real_vocab) {
    s.endoftext = 151643, s.im_start = 151644, s.im_end = 151645;
    if (dream) s.mask = 151666;
    if (fdv2) s.mask = 151665;  // Fast-dLLM v2's |<MASK>|, batch_sample's mask_id
  } else {
    const auto v = static_cast<std::int32_t>(vocab);
    const std::int32_t first = v - (dream || fdv2 ? 4 : 3);
    s.endoftext = first, s.im_start = first + 1, s.im_end = first + 2;
    if (dream || fdv2) s.mask = first + 3;
  }
  s.top = std::max({s.endoftext, s.im_start, s.im_end, s.mask});
  return s;
}

std::vector<std::pair<std::string, std::int32_t>> special_tokens(const SpecialIds& ids) {
  if (ids.llada)
    return {{"<|endoftext|>", ids.endoftext}, {"<|startoftext|>", ids.im_start}, {"<|eot_id|>", ids.im_end},
            {"<|mdm_mask|>", ids.mask}};
  std::vector<std::pair<std::string, std::int32_t>> t{
      {"<|endoftext|>", ids.endoftext}, {"<|im_start|>", ids.im_start}, {"<|im_end|>", ids.im_end}};
  if (ids.mask >= 0) t.emplace_back(ids.mask_name, ids.mask);
  if (ids.extra.second >= 0) t.push_back(ids.extra);
  return t;
}

std::string tokenizer_config_json(const std::string& arch) {
  const bool dream = arch == "dream";
  if (arch == "llada") {  // no chat template: LLaDA-8B-Base has none
    nlohmann::ordered_json c;
    c["add_bos_token"] = false;
    c["bos_token"] = "<|startoftext|>";
    c["eos_token"] = "<|endoftext|>";
    c["pad_token"] = "<|endoftext|>";
    c["mask_token"] = "<|mdm_mask|>";
    c["model_max_length"] = 4096;
    c["tokenizer_class"] = "PreTrainedTokenizerFast";
    return c.dump(2) + "\n";
  }
  // ChatML, as Qwen2.5-Instruct and Dream render it; only the default system prompt differs.
  const std::string tmpl = builtin_chat_template(dream ? ChatFamily::Dream : ChatFamily::Qwen25Instruct);
  nlohmann::ordered_json c;
  c["add_bos_token"] = false;
  c["bos_token"] = nullptr;
  c["eos_token"] = "<|endoftext|>";
  c["pad_token"] = "<|endoftext|>";
  if (dream) c["mask_token"] = "<|mask|>";
  if (arch == "fast_dllm_v2") c["mask_token"] = "|<MASK>|";
  c["chat_template"] = tmpl;
  c["model_max_length"] = 32768;
  c["tokenizer_class"] = "Qwen2Tokenizer";
  return c.dump(2) + "\n";
}

}  // namespace sonde::cli
