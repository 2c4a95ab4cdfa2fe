// ChatML rendering. Expected strings were produced by rendering Dream's real chat_template
// (../shared/fixtures/qwen2.5-tokenizer/dream/tokenizer_config.json) with Python jinja2 when this
// test was written; Qwen2.5-Instruct's differ only in the default system text (fixture README).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "sonde/chat.h"
#include "sonde/error.h"
#include "sonde/tokenizer.h"
#include "qwen_tokenizer.h"
#include "test_paths.h"

namespace sonde {
namespace {

const std::vector<ChatMessage> kHi = {{"user", "hi"}};
const std::vector<ChatMessage> kWithSystem = {{"system", "S"}, {"user", "q"}, {"assistant", "a"}, {"user", "q2"}};
const std::vector<ChatMessage> kTools = {
    {"user", "q"}, {"tool", "r1"}, {"tool", "r2"}, {"assistant", "x"}, {"system", "late"}};

TEST(ChatTemplate, DreamRendersLikeItsJinjaTemplate) {
  EXPECT_EQ(apply_chat_template(kHi, ChatFamily::Dream, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(apply_chat_template(kHi, ChatFamily::Dream, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(kWithSystem, ChatFamily::Dream, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(kTools, ChatFamily::Dream, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\nx<|im_end|>\n<|im_start|>system\nlate<|im_end|>\n");
}

TEST(ChatTemplate, QwenUsesItsOwnDefaultSystem) {
  EXPECT_EQ(apply_chat_template(kHi, ChatFamily::Qwen25Instruct, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(kWithSystem, ChatFamily::Qwen25Instruct, false),
            apply_chat_template(kWithSystem, ChatFamily::Dream, false));
}

// Qwen2.5-Instruct's template is Dream's with its own default system text (fixture README).
void expect_family_detected(const std::string& dream) {
  EXPECT_EQ(detect_chat_family(dream), ChatFamily::Dream);
  std::string qwen = dream;
  const std::string from = "You are a helpful assistant.", to = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  for (auto pos = qwen.find(from); pos != std::string::npos; pos = qwen.find(from, pos + to.size()))
    qwen.replace(pos, from.size(), to);
  EXPECT_EQ(detect_chat_family(qwen), ChatFamily::Qwen25Instruct);
  EXPECT_EQ(apply_chat_template(kHi, dream, true), apply_chat_template(kHi, ChatFamily::Dream, true));
}

TEST(ChatTemplate, DetectsTheFamilyFromTemplateText) { expect_family_detected(test::own_dream_chat_template()); }

// Dream-v0-Instruct-7B's upstream template (../shared's tokenizer_config.json).
TEST(ChatTemplateShared, DetectsTheFamilyFromTheUpstreamTemplate) {
  std::ifstream in(test::shared_tokenizer_fixture() / "dream/tokenizer_config.json");
  expect_family_detected(nlohmann::json::parse(in)["chat_template"]);
}

TEST(ChatTemplate, BuiltinTemplatesAreRecognised) {
  for (ChatFamily f : {ChatFamily::Dream, ChatFamily::Qwen25Instruct})
    EXPECT_EQ(detect_chat_family(builtin_chat_template(f)), f);
}

TEST(ChatTemplate, UnrecognisedTemplatesAndBadMessagesAreBadInput) {
  auto kind_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::Runtime;
  };
  EXPECT_EQ(kind_of([] { detect_chat_family("{{ bos_token }}{% for m in messages %}[INST]{% endfor %}"); }),
            ErrorKind::BadInput);
  EXPECT_EQ(kind_of([] { detect_chat_family("<|im_start|>system\\nBe terse.<|im_end|>"); }), ErrorKind::BadInput);
  EXPECT_EQ(kind_of([] { apply_chat_template({}, ChatFamily::Dream, true); }), ErrorKind::BadInput);
  EXPECT_EQ(kind_of([] { apply_chat_template({{"narrator", "x"}}, ChatFamily::Dream, true); }), ErrorKind::BadInput);
}

TEST(ChatTemplate, RenderedPromptTokenizesWithSpecialTokens) {
  const Tokenizer t = Tokenizer::load(test::own_tokenizer_dirs().fast);
  const auto ids = t.encode(apply_chat_template(kHi, ChatFamily::Dream, true));
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151644), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645), 2);
}

}  // namespace
}  // namespace sonde
