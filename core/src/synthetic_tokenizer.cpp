// A small tokenizer.json for synthetic models: byte tokens, then merges learned by a tiny BPE
// training (most frequent pair first) on a built-in snippet pre-tokenized with Qwen2's regex, then
// seeded filler merges if the snippet runs out, so any vocabulary size can be filled.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "sonde/error.h"
#include "tokenizer_internal.h"

namespace sonde {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kCorpus = R"(The quick brown fox jumps over the lazy dog. It was the best of times,
it was the worst of times. Researchers feed text to the model and read its activations.
Hello world! How are you today? I'm fine, thanks; we'll see what they've done.
def forward(self, x):
    h = self.embed(x)
    for layer in self.layers:
        h = layer(h) + h
    return self.norm(h)

int main(int argc, char** argv) {
  std::vector<int> values = {1, 2, 3};
  for (int v : values) printf("%d\n", v);
  return 0;
}
The model reads tokens, computes attention over the sequence, and predicts the next token.
A transformer layer has attention, a feed-forward block, and residual connections.
)";

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Trainer {
  std::vector<std::string> tokens;  // id -> raw bytes
  std::set<std::string> known;
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;
  std::vector<std::pair<std::vector<std::int32_t>, int>> words;  // symbols, count

  Trainer() {
    for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
    std::map<std::string, int> counts;
    tok::PreTokenizer(tok::kQwen2Pattern).split(kCorpus, [&](std::string_view p) { ++counts[std::string(p)]; });
    for (const auto& [word, n] : counts) {
      std::vector<std::int32_t> syms;
      for (unsigned char b : word) syms.push_back(b);
      words.emplace_back(std::move(syms), n);
    }
  }

  void add(std::string bytes) {
    known.insert(bytes);
    tokens.push_back(std::move(bytes));
  }

  void merge(std::int32_t a, std::int32_t b) {
    const auto id = static_cast<std::int32_t>(tokens.size());
    add(tokens[a] + tokens[b]);
    merges.emplace_back(a, b);
    for (auto& [syms, n] : words)
      for (std::size_t i = 0; i + 1 < syms.size(); ++i)
        if (syms[i] == a && syms[i + 1] == b) syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(i) + 1), syms[i] = id;
  }

  // The most frequent pair of the snippet; ties go to the seeded hash so the seed varies the vocab.
  bool learn_one(std::uint64_t seed) {
    std::map<std::pair<std::int32_t, std::int32_t>, int> pairs;
    for (const auto& [syms, n] : words)
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += n;
    const std::pair<std::int32_t, std::int32_t>* best = nullptr;
    int best_n = 0;
    std::uint64_t best_tie = 0;
    for (const auto& [p, n] : pairs) {
      if (known.count(tokens[p.first] + tokens[p.second])) continue;
      std::uint64_t s = seed ^ (std::uint64_t(p.first) << 32 | std::uint32_t(p.second));
      const std::uint64_t tie = splitmix(s);
      if (n > best_n || (n == best_n && tie < best_tie)) best = &p, best_n = n, best_tie = tie;
    }
    if (best == nullptr) return false;
    merge(best->first, best->second);
    return true;
  }

  void filler(std::uint64_t& rng) {
    for (;;) {
      const auto a = static_cast<std::int32_t>(splitmix(rng) % tokens.size());
      const auto b = static_cast<std::int32_t>(splitmix(rng) % tokens.size());
      const std::string joined = tokens[a] + tokens[b];
      if (joined.size() <= 16 && !known.count(joined)) return merge(a, b);
    }
  }
};

std::int32_t check_specials(std::size_t vocab_size, const std::vector<std::pair<std::string, std::int32_t>>& specials) {
  std::int32_t lowest = static_cast<std::int32_t>(vocab_size);
  std::set<std::int32_t> ids;
  std::set<std::string> names;
  for (const auto& [name, id] : specials) {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab_size || !ids.insert(id).second || name.empty() ||
        !names.insert(name).second)
      bad_input("synthetic tokenizer: special token '{}' id {} is repeated or outside [0, {})", name, id, vocab_size);
    lowest = std::min(lowest, id);
  }
  if (lowest < 256) bad_input("synthetic tokenizer: needs ids 0..255 for bytes, but the lowest special id is {}", lowest);
  return lowest;
}

ordered_json tokenizer_json(const Trainer& t, const std::vector<std::pair<std::string, std::int32_t>>& specials) {
  ordered_json added = ordered_json::array();
  for (const auto& [name, id] : specials)
    added.push_back({{"id", id}, {"content", name}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  ordered_json vocab = ordered_json::object();
  for (std::size_t id = 0; id < t.tokens.size(); ++id) vocab[tok::bytes_to_byte_level(t.tokens[id])] = id;
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : t.merges)
    merges.push_back(tok::bytes_to_byte_level(t.tokens[a]) + " " + tok::bytes_to_byte_level(t.tokens[b]));
  const ordered_json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                                   {"use_regex", false}};
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", ordered_json::array({
              {{"type", "Split"}, {"pattern", {{"Regex", std::string(tok::kQwen2Pattern)}}},
               {"behavior", "Isolated"}, {"invert", false}}, byte_level})}}},
          {"post_processor", byte_level}, {"decoder", byte_level},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                     {"byte_fallback", false}, {"vocab", vocab}, {"merges", merges}}}};
}

}  // namespace

std::string make_synthetic_tokenizer_json(std::size_t vocab_size,
                                          const std::vector<std::pair<std::string, std::int32_t>>& specials,
                                          std::uint64_t seed) {
  const std::int32_t regular = check_specials(vocab_size, specials);
  Trainer t;
  std::uint64_t rng = seed;
  while (t.tokens.size() < static_cast<std::size_t>(regular))
    if (!t.learn_one(seed)) t.filler(rng);
  return tokenizer_json(t, specials).dump(2);
}

}  // namespace sonde
