// ChatML rendering of the Qwen2.5 / Dream templates without tools (their non-tool branch):
//   system turn (given, or the family's default), then each turn as
//   "<|im_start|>{role}\n{content}<|im_end|>\n", consecutive tool turns folded into one user turn
//   of <tool_response> blocks, then "<|im_start|>assistant\n" when a generation prompt is asked for.
#include "sonde/chat.h"

#include "sonde/error.h"

namespace sonde {
namespace {

constexpr std::string_view kQwenSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr std::string_view kDreamSystem = "You are a helpful assistant.";

std::string_view default_system(ChatFamily family) {
  return family == ChatFamily::Qwen25Instruct ? kQwenSystem : kDreamSystem;
}

void turn(std::string& out, std::string_view role, std::string_view content) {
  out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
}

void tool_turn(std::string& out, const std::vector<ChatMessage>& m, std::size_t i) {
  if (i == 0 || m[i - 1].role != "tool") out += "<|im_start|>user";
  out.append("\n<tool_response>\n").append(m[i].content).append("\n</tool_response>");
  if (i + 1 == m.size() || m[i + 1].role != "tool") out += "<|im_end|>\n";
}

}  // namespace

ChatFamily detect_chat_family(std::string_view t) {
  if (t.find("<|im_start|>") == std::string_view::npos)
    bad_input("chat template is not ChatML (no <|im_start|>); only the Qwen2.5 and Dream templates are supported");
  // The default system prompt appears in the template as "<|im_start|>system\n<default><|im_end|>".
  auto has_default = [&](std::string_view text) {
    return t.find("<|im_start|>system\\n" + std::string(text) + "<|im_end|>") != std::string_view::npos;
  };
  if (has_default(kQwenSystem)) return ChatFamily::Qwen25Instruct;
  if (has_default(kDreamSystem)) return ChatFamily::Dream;
  bad_input("chat template is ChatML but its default system prompt is neither Qwen2.5-Instruct's (\"{}\") nor "
            "Dream's (\"{}\"); this template is not supported",
            kQwenSystem, kDreamSystem);
}

std::string apply_chat_template(const std::vector<ChatMessage>& messages, ChatFamily family,
                                bool add_generation_prompt) {
  if (messages.empty()) bad_input("chat: no messages (the template needs at least one)");
  std::string out;
  const bool own_system = messages[0].role == "system";
  turn(out, "system", own_system ? std::string_view(messages[0].content) : default_system(family));
  for (std::size_t i = own_system ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || m.role == "assistant" || m.role == "system") turn(out, m.role, m.content);
    else if (m.role == "tool") tool_turn(out, messages, i);
    else bad_input("chat: message {} has role '{}'; expected system, user, assistant or tool", i, m.role);
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string apply_chat_template(const std::vector<ChatMessage>& messages, std::string_view template_text,
                                bool add_generation_prompt) {
  return apply_chat_template(messages, detect_chat_family(template_text), add_generation_prompt);
}

std::string builtin_chat_template(ChatFamily family) {
  const std::string system(default_system(family));
  return "{%- if messages[0]['role'] == 'system' %}\n"
         "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
         "{%- else %}\n"
         "    {{- '<|im_start|>system\\n" + system + "<|im_end|>\\n' }}\n"
         "{%- endif %}\n"
         "{%- for message in messages %}\n"
         "    {%- if message.role == 'tool' %}\n"
         "        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\n"
         "        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}\n"
         "        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
         "    {%- elif not (message.role == 'system' and loop.first) %}\n"
         "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
         "    {%- endif %}\n"
         "{%- endfor %}\n"
         "{%- if add_generation_prompt %}\n"
         "    {{- '<|im_start|>assistant\\n' }}\n"
         "{%- endif %}\n";
}

}  // namespace sonde
