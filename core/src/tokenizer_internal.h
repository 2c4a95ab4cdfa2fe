#pragma once
// Private pieces of the tokenizer shared by tokenizer*.cpp and synthetic_tokenizer.cpp.
#include "sonde/tokenizer.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sonde::tok {

// Qwen2's Split regex as stored in tokenizer.json (Oniguruma syntax).
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-2's, used by a ByteLevel pre-tokenizer with use_regex=true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's byte <-> printable code point table that byte-level vocabularies are written in.
const std::array<char32_t, 256>& byte_to_char();
// Byte-level text -> raw bytes; false if a character is outside the table.
bool byte_level_to_bytes(std::string_view text, std::string& out);
std::string bytes_to_byte_level(std::string_view bytes);

// Offset of the first invalid UTF-8 byte, or npos.
std::size_t find_invalid_utf8(std::string_view s);
// Length of a valid-so-far but incomplete sequence at the end of `s` (0..3).
std::size_t incomplete_utf8_tail(std::string_view s);
std::string nfc(std::string_view s);  // s must be valid UTF-8

// The Split pre-tokenizer (behaviour Isolated): calls `piece` for every match and every gap.
class PreTokenizer {
 public:
  explicit PreTokenizer(std::string_view pattern);  // Oniguruma-style; BadInput if it fails
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

 private:
  void* code_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

struct Merge {
  std::int32_t rank;
  std::int32_t id;
};

// Byte-level BPE over token ids: merges keyed by the pair of ids.
class Bpe {
 public:
  void add_merge(std::int32_t left, std::int32_t right, std::int32_t merged);
  void set_byte_id(unsigned char byte, std::int32_t id) { byte_id_[byte] = id; }
  std::int32_t byte_id(unsigned char byte) const { return byte_id_[byte]; }
  std::size_t merge_count() const { return merges_.size(); }
  void reserve(std::size_t merges) { merges_.reserve(merges); }
  // Appends the ids of one pre-token piece; cached, thread-safe.
  void encode(std::string_view piece, std::vector<std::int32_t>& out) const;

 private:
  const Merge* find(std::int32_t left, std::int32_t right) const;
  void merge_small(std::vector<std::int32_t>& syms) const;
  void merge_large(std::vector<std::int32_t>& syms) const;

  std::array<std::int32_t, 256> byte_id_{};
  std::unordered_map<std::uint64_t, Merge> merges_;

  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<std::int32_t>> map;
  };
  static constexpr std::size_t kShards = 16;
  mutable std::array<Shard, kShards> cache_;
};

// The parsed pieces a tokenizer is built from, whichever file layout they came from.
struct Spec {
  std::vector<std::pair<std::string, std::int32_t>> vocab;  // byte-level text, id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<AddedToken> added;
  std::string pattern{kQwen2Pattern};
  bool nfc = true;
  std::string chat_template;
  std::string origin;  // file named in errors
};

std::shared_ptr<const Tokenizer::Impl> build(Spec spec);
Spec read_tokenizer_json(std::string_view json, std::string_view origin);

}  // namespace sonde::tok
