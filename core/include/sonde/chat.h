#pragma once
// Chat templates of the ChatML family (Qwen2.5-Instruct, Dream / DiffuCoder-Instruct), rendered
// natively: not a Jinja engine. A template is recognised by its ChatML markers and its default
// system prompt; anything else is rejected with BadInput.
#include <string>
#include <string_view>
#include <vector>

namespace sonde {

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
};

enum class ChatFamily {
  Qwen25Instruct,  // default system: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
  Dream,           // default system: "You are a helpful assistant." (Dream, DiffuCoder)
};

// Which family a tokenizer_config.json chat_template belongs to; BadInput if unrecognised.
ChatFamily detect_chat_family(std::string_view template_text);

std::string apply_chat_template(const std::vector<ChatMessage>& messages, ChatFamily family,
                                bool add_generation_prompt);
std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                std::string_view template_text, bool add_generation_prompt);

// A Jinja chat_template for tokenizer_config.json that Hugging Face renders exactly as
// apply_chat_template(messages, family, ...) does (used by make-model).
std::string builtin_chat_template(ChatFamily family);

}  // namespace sonde
