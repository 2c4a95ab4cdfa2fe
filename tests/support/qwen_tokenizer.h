#pragma once
// The real Qwen2.5 vocabulary committed under tests/data/qwen2.5-tokenizer (see its NOTICE.md),
// in the layouts the tests need, built once per process in process_temp_dir() (removed at exit).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_paths.h"

namespace sonde::test {

inline std::filesystem::path own_tokenizer_data() { return data_dir() / "qwen2.5-tokenizer"; }

struct QwenTokenizerDirs {
  std::filesystem::path root, slow, fast;
  QwenTokenizerDirs() {
    namespace fs = std::filesystem;
    const fs::path data = own_tokenizer_data();
    root = process_temp_dir() / "qwen25-tokenizer";
    slow = root / "slow";
    fast = root / "fast";
    fs::create_directories(slow);
    fs::create_directories(fast);
    // Qwen2.5's added tokens are Dream's minus its two own (<|beginoftext|>, <|mask|>).
    std::ifstream in(data / "dream/tokenizer_config.json");
    const nlohmann::json dream = nlohmann::json::parse(in);
    nlohmann::json added = nlohmann::json::object(), added_list = nlohmann::json::array();
    for (const auto& [id, tok] : dream["added_tokens_decoder"].items())
      if (std::stoi(id) <= 151664) {
        added[id] = tok;
        nlohmann::json entry = tok;
        entry["id"] = std::stoi(id);
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

inline const QwenTokenizerDirs& qwen_tokenizer_dirs() {
  static const QwenTokenizerDirs dirs;
  return dirs;
}

}  // namespace sonde::test
