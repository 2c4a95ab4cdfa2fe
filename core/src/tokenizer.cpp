// Tokenizer: building the tables from a Spec, encode, decode, streaming decode.
#include <algorithm>
#include <unordered_map>

#include "sonde/error.h"
#include "tokenizer_internal.h"

namespace sonde {

enum class TokenKind : std::uint8_t { Unused, Regular, Added, Special };

struct Tokenizer::Impl {
  std::unordered_map<std::string, std::int32_t> text_to_id;  // regular vocabulary, byte-level text
  std::unordered_map<std::string, std::int32_t> added_to_id;
  std::vector<std::string> id_bytes;
  std::vector<TokenKind> kind;
  std::vector<AddedToken> added;
  std::array<std::vector<std::size_t>, 256> added_by_first;  // longest first
  std::unique_ptr<tok::PreTokenizer> pretok;
  tok::Bpe bpe;
  bool nfc = true;
  std::string chat_template;

  void encode_segment(std::string_view text, std::vector<std::int32_t>& out) const;
  std::size_t match_added(std::string_view text, std::size_t pos) const;  // index+1, or 0
};

namespace tok {
namespace {

void put(Tokenizer::Impl& t, std::int32_t id, std::string bytes, TokenKind kind) {
  if (static_cast<std::size_t>(id) >= t.id_bytes.size()) {
    t.id_bytes.resize(id + 1);
    t.kind.resize(id + 1, TokenKind::Unused);
  }
  t.id_bytes[id] = std::move(bytes);
  t.kind[id] = kind;
}

void add_vocab(Tokenizer::Impl& t, Spec& spec) {
  t.text_to_id.reserve(spec.vocab.size());
  t.id_bytes.reserve(spec.vocab.size() + spec.added.size());
  t.kind.reserve(spec.vocab.size() + spec.added.size());
  std::string bytes;
  for (auto& [text, id] : spec.vocab) {
    if (id < 0) bad_input("{}: vocabulary entry '{}' has negative id {}", spec.origin, text, id);
    if (!byte_level_to_bytes(text, bytes))
      bad_input("{}: vocabulary entry '{}' (id {}) is not byte-level text", spec.origin, text, id);
    put(t, id, bytes, TokenKind::Regular);
    if (!t.text_to_id.emplace(std::move(text), id).second)
      bad_input("{}: vocabulary entry id {} repeats an earlier entry", spec.origin, id);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string text = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
    const auto it = t.text_to_id.find(text);
    if (it == t.text_to_id.end())
      bad_input("{}: byte-level BPE needs all 256 byte tokens; byte 0x{:02X} ('{}') is missing", spec.origin, b, text);
    t.bpe.set_byte_id(static_cast<unsigned char>(b), it->second);
  }
}

// Byte-level text concatenates like the bytes it stands for, so merges need no conversion.
void add_merges(Tokenizer::Impl& t, const Spec& spec) {
  t.bpe.reserve(spec.merges.size());
  std::string joined;
  auto id_of = [&](const std::string& text, std::size_t rank) {
    const auto it = t.text_to_id.find(text);
    if (it == t.text_to_id.end())
      bad_input("{}: merge {} ('{} {}'): '{}' is not in the vocabulary", spec.origin, rank,
                spec.merges[rank].first, spec.merges[rank].second, text);
    return it->second;
  };
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    joined.assign(a).append(b);
    t.bpe.add_merge(id_of(a, rank), id_of(b, rank), id_of(joined, rank));
  }
}

void add_added(Tokenizer::Impl& t, const Spec& spec) {
  for (const AddedToken& a : spec.added) {
    if (a.content.empty() || a.id < 0)
      bad_input("{}: added token id {} content '{}' is invalid", spec.origin, a.id, a.content);
    if (find_invalid_utf8(a.content) != std::string_view::npos)
      bad_input("{}: added token id {} is not valid UTF-8", spec.origin, a.id);
    if (!t.added_to_id.emplace(a.content, a.id).second) continue;
    t.added.push_back(a);
    put(t, a.id, a.content, a.special ? TokenKind::Special : TokenKind::Added);
  }
  for (std::size_t i = 0; i < t.added.size(); ++i)
    t.added_by_first[static_cast<unsigned char>(t.added[i].content[0])].push_back(i);
  for (auto& list : t.added_by_first)
    std::stable_sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
      return t.added[x].content.size() > t.added[y].content.size();
    });
}

}  // namespace

std::shared_ptr<const Tokenizer::Impl> build(Spec spec) {
  auto t = std::make_shared<Tokenizer::Impl>();
  add_vocab(*t, spec);
  add_merges(*t, spec);
  add_added(*t, spec);
  t->pretok = std::make_unique<PreTokenizer>(spec.pattern);
  t->nfc = spec.nfc;
  t->chat_template = std::move(spec.chat_template);
  return t;
}

}  // namespace tok

std::size_t Tokenizer::Impl::match_added(std::string_view text, std::size_t pos) const {
  for (std::size_t i : added_by_first[static_cast<unsigned char>(text[pos])])
    if (text.substr(pos).starts_with(added[i].content)) return i + 1;
  return 0;
}

void Tokenizer::Impl::encode_segment(std::string_view text, std::vector<std::int32_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = nfc ? tok::nfc(text) : std::string(text);
  pretok->split(normalized, [&](std::string_view piece) { bpe.encode(piece, out); });
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  if (const auto bad = tok::find_invalid_utf8(text); bad != std::string_view::npos)
    bad_input("cannot tokenize: invalid UTF-8 at byte offset {} (byte 0x{:02X})", bad,
              static_cast<unsigned char>(text[bad]));
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::size_t segment = 0;
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    if (impl_->added_by_first[static_cast<unsigned char>(text[pos])].empty()) continue;
    const std::size_t hit = impl_->match_added(text, pos);
    if (hit == 0) continue;
    const AddedToken& a = impl_->added[hit - 1];
    impl_->encode_segment(text.substr(segment, pos - segment), out);
    out.push_back(a.id);
    segment = pos + a.content.size();
    pos = segment - 1;
  }
  impl_->encode_segment(text.substr(segment), out);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (std::int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return utf8_replace_invalid(bytes);
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto it = impl_->added_to_id.find(std::string(token)); it != impl_->added_to_id.end()) return it->second;
  if (const auto it = impl_->text_to_id.find(std::string(token)); it != impl_->text_to_id.end()) return it->second;
  return std::nullopt;
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[id];
}

std::size_t Tokenizer::vocab_size() const { return impl_->id_bytes.size(); }

bool Tokenizer::is_special(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->kind.size() && impl_->kind[id] == TokenKind::Special;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

std::string Tokenizer::chat_template() const { return impl_->chat_template; }

std::string StreamDecoder::push(std::int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  // Everything before an unfinished trailing sequence is final: the sequence starts with a lead
  // byte, so no earlier byte can belong to it, and decoding the head alone gives the same text.
  const std::size_t keep = tok::incomplete_utf8_tail(pending_);
  std::string out = utf8_replace_invalid(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8_replace_invalid(pending_);
  pending_.clear();
  return out;
}

}  // namespace sonde
