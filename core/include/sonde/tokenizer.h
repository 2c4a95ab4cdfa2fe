#pragma once
// Qwen2-style byte-level BPE, matching Hugging Face `tokenizers` id for id.
// Encode: added tokens (leftmost-longest, exact) -> NFC on the text between them -> the Split
// pre-tokenizer regex (PCRE2, UTF+UCP, JIT) -> bytes -> BPE merges by rank (cached).
// Decode: ids -> bytes -> UTF-8, each invalid maximal subpart shown as U+FFFD (as HF does).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sonde {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool special = false;  // skipped by decode(..., skip_special=true)
};

class Tokenizer {
 public:
  // tokenizer.json if present, else vocab.json + merges.txt (+ tokenizer_config.json,
  // added_tokens.json). The chat template comes from tokenizer_config.json when present.
  // Throws BadInput naming the file when absent or malformed.
  static Tokenizer load(const std::filesystem::path& dir);
  // A tokenizer.json held in memory; `origin` names it in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view origin = "tokenizer.json");
  static bool available(const std::filesystem::path& dir);

  // Adds no special tokens; added tokens written in the text are recognised. Invalid UTF-8 in
  // `text` throws BadInput naming the byte offset (nothing is replaced silently).
  // Safe to call from several threads at once.
  std::vector<std::int32_t> encode(std::string_view text) const;
  // Unknown or unused ids are skipped (as Hugging Face does); invalid UTF-8 becomes U+FFFD.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;

  // `token` is an added token's content or a vocabulary entry as written in vocab.json
  // (byte-level form, e.g. "Ġthe").
  std::optional<std::int32_t> token_id(std::string_view token) const;
  // The raw bytes an id decodes to (empty for unknown ids).
  std::string_view token_bytes(std::int32_t id) const;
  std::size_t vocab_size() const;  // highest id + 1
  bool is_special(std::int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  std::string chat_template() const;  // empty when the model ships none

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Incremental decoding for streamed generation: push() returns only complete UTF-8 characters
// (a partial sequence is held back until it completes or proves invalid); the concatenation of
// every push() and finish() equals tokenizer.decode(all ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}
  std::string push(std::int32_t id);
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

// Bytes -> valid UTF-8, each maximal invalid subpart replaced by U+FFFD (Unicode §3.9, the
// behaviour of Python's errors="replace" and Rust's from_utf8_lossy).
std::string utf8_replace_invalid(std::string_view bytes);

// A small valid byte-level BPE tokenizer.json in Qwen2.5's layout (same normalizer, regex,
// pre-tokenizer and decoder) for synthetic models: 256 byte tokens, then merges learned by a tiny
// deterministic BPE training on a built-in English/code snippet (then seeded filler merges),
// filling ids [0, lowest special id); the specials are added tokens with special=true at the
// given ids, all below vocab_size. Throws BadInput for ids that do not fit.
std::string make_synthetic_tokenizer_json(std::size_t vocab_size,
                                          const std::vector<std::pair<std::string, std::int32_t>>& specials,
                                          std::uint64_t seed);

}  // namespace sonde
