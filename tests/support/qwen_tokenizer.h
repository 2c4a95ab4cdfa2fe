#pragma once
// Qwen2.5-style tokenizers for the tests: a vocabulary (vocab.json + merges.txt) plus the added
// tokens stated below, in the layouts the tests need, built once per process in
// process_temp_dir() (removed at exit). The suite's own vocabulary, tests/data/bpe-vocab, is
// trained by tests/reference/qwen_tokenizer_ref.py on the project's own text, so a fresh clone
// tests every tokenizer path without third-party files; the real Qwen2.5 vocabulary is read from
// ../shared (*Shared suites only).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.h"

namespace sonde::test {

inline std::filesystem::path own_tokenizer_data() { return data_dir() / "bpe-vocab"; }

// An id of the own vocabulary as its vocab.json states it (read here, not through the tokenizer,
// so tests take expected ids from the data).
inline std::int32_t own_vocab_id(const std::string& token) {
  static const nlohmann::json vocab = [] {
    std::ifstream in(own_tokenizer_data() / "vocab.json");
    return nlohmann::json::parse(in);
  }();
  return vocab.at(token).get<std::int32_t>();
}

// ../shared's copy of the Qwen2.5 / Dream tokenizer files (used only by *Shared suites).
inline std::filesystem::path shared_tokenizer_fixture() { return shared_dir() / "fixtures/qwen2.5-tokenizer"; }

struct AddedToken {
  std::int32_t id;
  const char* content;
  bool special;
};

// Qwen2.5's added tokens, facts of the public vocabulary (the Qwen2.5 tokenizer_config.json's
// added_tokens_decoder); every one has lstrip, rstrip, single_word and normalized false.
inline const std::vector<AddedToken>& qwen25_added_tokens() {
  static const std::vector<AddedToken> tokens = {
      {151643, "<|endoftext|>", true},      {151644, "<|im_start|>", true},      {151645, "<|im_end|>", true},
      {151646, "<|object_ref_start|>", true}, {151647, "<|object_ref_end|>", true}, {151648, "<|box_start|>", true},
      {151649, "<|box_end|>", true},         {151650, "<|quad_start|>", true},    {151651, "<|quad_end|>", true},
      {151652, "<|vision_start|>", true},    {151653, "<|vision_end|>", true},    {151654, "<|vision_pad|>", true},
      {151655, "<|image_pad|>", true},       {151656, "<|video_pad|>", true},     {151657, "<tool_call>", false},
      {151658, "</tool_call>", false},       {151659, "<|fim_prefix|>", false},   {151660, "<|fim_middle|>", false},
      {151661, "<|fim_suffix|>", false},     {151662, "<|fim_pad|>", false},      {151663, "<|repo_name|>", false},
      {151664, "<|file_sep|>", false}};
  return tokens;
}

// Dream-v0-Instruct-7B adds two of its own after Qwen2.5's (its tokenizer_config.json).
inline const std::vector<AddedToken>& dream_extra_tokens() {
  static const std::vector<AddedToken> tokens = {{151665, "<|beginoftext|>", true}, {151666, "<|mask|>", true}};
  return tokens;
}

// An added_tokens_decoder entry as Hugging Face writes it.
inline nlohmann::json added_token_entry(const AddedToken& t) {
  return {{"content", t.content}, {"lstrip", false},          {"normalized", false},
          {"rstrip", false},      {"single_word", false},      {"special", t.special}};
}

// A ChatML template with Dream's default system text, written for the tests (the upstream one
// is checked in ChatTemplateShared); the C++ side only detects the family from it.
inline const char* own_dream_chat_template() {
  return R"({%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }})"
         R"({%- else %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %})"
         R"({%- for m in messages %}{%- if not (m.role == 'system' and loop.first) %})"
         R"({{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %})"
         R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})";
}

// Dream's slow-tokenizer files beside vocab.json/merges.txt: tokenizer_config.json (the 24 added
// tokens, chat template, special-token names), added_tokens.json and special_tokens_map.json.
inline void write_dream_tokenizer_files(const std::filesystem::path& dir) {
  nlohmann::json decoder = nlohmann::json::object(), by_content = nlohmann::json::object();
  for (const auto* list : {&qwen25_added_tokens(), &dream_extra_tokens()})
    for (const AddedToken& t : *list) {
      decoder[std::to_string(t.id)] = added_token_entry(t);
      by_content[t.content] = t.id;
    }
  const nlohmann::json config = {{"add_bos_token", false},     {"add_prefix_space", false},
                                 {"added_tokens_decoder", decoder},
                                 {"additional_special_tokens", {"<|beginoftext|>", "<|mask|>"}},
                                 {"bos_token", "<|beginoftext|>"}, {"eos_token", "<|endoftext|>"},
                                 {"mask_token", "<|mask|>"},       {"pad_token", "<|endoftext|>"},
                                 {"chat_template", own_dream_chat_template()},
                                 {"tokenizer_class", "DreamTokenizer"}};
  auto named = [](const char* content) {
    return nlohmann::json{{"content", content}, {"lstrip", false}, {"normalized", false}, {"rstrip", false}, {"single_word", false}};
  };
  const nlohmann::json special_map = {{"additional_special_tokens", {"<|beginoftext|>", "<|mask|>"}},
                                      {"bos_token", named("<|beginoftext|>")}, {"eos_token", named("<|endoftext|>")},
                                      {"mask_token", named("<|mask|>")},       {"pad_token", named("<|endoftext|>")}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
  std::ofstream(dir / "added_tokens.json") << by_content.dump(2);
  std::ofstream(dir / "special_tokens_map.json") << special_map.dump(2);
}

// `data`'s vocabulary with Qwen2.5's added tokens in both layouts: `slow` (vocab.json, merges.txt,
// tokenizer_config.json) and `fast` (one tokenizer.json).
struct QwenTokenizerDirs {
  std::filesystem::path root, slow, fast;
  QwenTokenizerDirs(const std::filesystem::path& data, const char* name) {
    namespace fs = std::filesystem;
    root = process_temp_dir() / name;
    slow = root / "slow";
    fast = root / "fast";
    fs::create_directories(slow);
    fs::create_directories(fast);
    nlohmann::json added = nlohmann::json::object(), added_list = nlohmann::json::array();
    for (const AddedToken& t : qwen25_added_tokens()) {
      added[std::to_string(t.id)] = added_token_entry(t);
      nlohmann::json entry = added_token_entry(t);
      entry["id"] = t.id;
      added_list.push_back(entry);
    }
    fs::create_symlink(data / "vocab.json", slow / "vocab.json");
    fs::create_symlink(data / "merges.txt", slow / "merges.txt");
    std::ofstream(slow / "tokenizer_config.json") << nlohmann::json{{"added_tokens_decoder", added}}.dump(2);
    // tokenizer.json as the fast-tokenizer layout writes it (the ../shared README's assembly).
    std::ifstream vin(data / "vocab.json");
    const nlohmann::json vocab = nlohmann::json::parse(vin);
    nlohmann::json merges = nlohmann::json::array();
    std::ifstream min(data / "merges.txt");
    for (std::string line; std::getline(min, line);)
      if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
    const std::string regex =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    nlohmann::json j = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added_list},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}}, byte_level}}}},
        {"post_processor", byte_level},
        {"decoder", byte_level},
        {"model",
         {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
          {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}}}};
    std::ofstream(fast / "tokenizer.json") << j.dump();
  }
};

// The suite's own vocabulary.
inline const QwenTokenizerDirs& own_tokenizer_dirs() {
  static const QwenTokenizerDirs dirs(own_tokenizer_data(), "own-tokenizer");
  return dirs;
}

// The real Qwen2.5 vocabulary from ../shared (*Shared suites only).
inline const QwenTokenizerDirs& qwen25_tokenizer_dirs() {
  static const QwenTokenizerDirs dirs(shared_tokenizer_fixture(), "qwen25-tokenizer");
  return dirs;
}

}  // namespace sonde::test
