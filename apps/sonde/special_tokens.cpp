#include "special_tokens.h"

#include <sonde/chat.h>

#include <nlohmann/json.hpp>

#include <algorithm>

namespace sonde::cli {

SpecialIds special_ids(bool dream, std::int64_t vocab, bool real_vocab) {
  SpecialIds s;
  if (real_vocab) {
    s.endoftext = 151643, s.im_start = 151644, s.im_end = 151645;
    if (dream) s.mask = 151666;
  } else {
    const auto v = static_cast<std::int32_t>(vocab);
    const std::int32_t first = v - (dream ? 4 : 3);
    s.endoftext = first, s.im_start = first + 1, s.im_end = first + 2;
    if (dream) s.mask = first + 3;
  }
  s.top = std::max({s.endoftext, s.im_start, s.im_end, s.mask});
  return s;
}

std::vector<std::pair<std::string, std::int32_t>> special_tokens(const SpecialIds& ids) {
  std::vector<std::pair<std::string, std::int32_t>> t{
      {"<|endoftext|>", ids.endoftext}, {"<|im_start|>", ids.im_start}, {"<|im_end|>", ids.im_end}};
  if (ids.mask >= 0) t.emplace_back("<|mask|>", ids.mask);
  return t;
}

std::string tokenizer_config_json(bool dream) {
  // ChatML, as Qwen2.5-Instruct and Dream render it; only the default system prompt differs.
  const std::string tmpl = builtin_chat_template(dream ? ChatFamily::Dream : ChatFamily::Qwen25Instruct);
  nlohmann::ordered_json c;
  c["add_bos_token"] = false;
  c["bos_token"] = nullptr;
  c["eos_token"] = "<|endoftext|>";
  c["pad_token"] = "<|endoftext|>";
  if (dream) c["mask_token"] = "<|mask|>";
  c["chat_template"] = tmpl;
  c["model_max_length"] = 32768;
  c["tokenizer_class"] = "Qwen2Tokenizer";
  return c.dump(2) + "\n";
}

}  // namespace sonde::cli
