// Reading a tokenizer from a model directory: tokenizer.json (fast-tokenizer layout) or
// vocab.json + merges.txt + tokenizer_config.json / added_tokens.json (slow Qwen2Tokenizer layout,
// as Dream and DiffuCoder ship it, which implies NFC and Qwen2's regex).
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sonde/error.h"
#include "sonde/log.h"
#include "tokenizer_internal.h"
#include "tokenizer_json_sax.h"

namespace sonde {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_input("{}: cannot be read", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, std::string_view origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    bad_input("{}: malformed JSON: {}", origin, e.what());
  }
}

const json& field(const json& obj, const char* key, std::string_view origin) {
  if (!obj.is_object() || !obj.contains(key)) bad_input("{}: missing field '{}'", origin, key);
  return obj.at(key);
}

std::string str_field(const json& obj, const char* key, std::string_view origin) {
  const json& v = field(obj, key, origin);
  if (!v.is_string()) bad_input("{}: field '{}' is {}, expected a string", origin, key, v.dump());
  return v.get<std::string>();
}

bool normalizer_is_nfc(const json& n, std::string_view origin) {
  if (n.is_null()) return false;
  const std::string type = str_field(n, "type", origin);
  if (type == "NFC") return true;
  if (type == "Sequence") {
    const json& list = field(n, "normalizers", origin);
    if (list.is_array() && list.empty()) return false;
    if (list.is_array() && list.size() == 1) return normalizer_is_nfc(list[0], origin);
  }
  bad_input("{}: normalizer {} is not supported (only NFC or none)", origin, n.dump());
}

std::string split_pattern(const json& split, std::string_view origin) {
  const json& pattern = field(split, "pattern", origin);
  if (!pattern.is_object() || !pattern.contains("Regex"))
    bad_input("{}: Split pattern {} is not supported (only a Regex)", origin, pattern.dump());
  if (split.value("behavior", std::string()) != "Isolated" || split.value("invert", false))
    bad_input("{}: Split {} is not supported (only behavior Isolated, invert false)", origin, split.dump());
  return str_field(pattern, "Regex", origin);
}

void check_byte_level(const json& b, bool regex_allowed, std::string_view origin) {
  if (b.value("add_prefix_space", false))
    bad_input("{}: ByteLevel add_prefix_space=true is not supported", origin);
  if (!regex_allowed && b.value("use_regex", true))
    bad_input("{}: ByteLevel use_regex=true after a Split is not supported", origin);
}

// Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)] (Qwen2), or ByteLevel alone (GPT-2).
std::string pre_tokenizer_pattern(const json& p, std::string_view origin) {
  const std::string type = str_field(p, "type", origin);
  if (type == "ByteLevel") {
    check_byte_level(p, true, origin);
    if (!p.value("use_regex", true)) bad_input("{}: ByteLevel without a regex is not supported", origin);
    return std::string(tok::kGpt2Pattern);
  }
  const json& list = type == "Sequence" ? field(p, "pretokenizers", origin) : json();
  if (list.is_array() && list.size() == 2 && list[0].value("type", "") == "Split" &&
      list[1].value("type", "") == "ByteLevel") {
    check_byte_level(list[1], false, origin);
    return split_pattern(list[0], origin);
  }
  bad_input("{}: pre_tokenizer {} is not supported", origin, p.dump().substr(0, 300));
}

void read_vocab(const json& vocab, tok::Spec& spec, std::string_view origin) {
  if (!vocab.is_object()) bad_input("{}: vocab is not an object", origin);
  spec.vocab.reserve(vocab.size());
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_integer()) bad_input("{}: vocab entry '{}' has id {}, expected an integer", origin, text, id.dump());
    spec.vocab.emplace_back(text, id.get<std::int32_t>());
  }
}

AddedToken added_entry(const json& a, std::string_view origin) {
  const json& id = field(a, "id", origin);
  if (!id.is_number_integer()) bad_input("{}: added token id {} is not an integer", origin, id.dump());
  if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false))
    spdlog::warn("{}: added token '{}' asks for lstrip/rstrip/single_word, which are ignored", origin,
                 str_field(a, "content", origin));
  return {str_field(a, "content", origin), id.get<std::int32_t>(), a.value("special", false)};
}

// Tokens named in special_tokens_map.json (strings, {"content": ...} objects or lists of them).
void collect_special_names(const json& v, std::vector<std::string>& names) {
  if (v.is_string()) names.push_back(v.get<std::string>());
  else if (v.is_object() && v.contains("content") && v["content"].is_string()) names.push_back(v["content"]);
  else if (v.is_array() || v.is_object())
    for (const auto& item : v) collect_special_names(item, names);
}

std::string chat_template_of(const json& config, std::string_view origin) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return {};
  const json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& named : t)
      if (named.value("name", "") == "default") return str_field(named, "template", origin);
  bad_input("{}: chat_template has no default template", origin);
}

// tokenizer_config.json's added_tokens_decoder, added_tokens.json and special_tokens_map.json add
// to the tokens already known (the first definition of a content wins).
void read_extra_added(const fs::path& dir, tok::Spec& spec) {
  std::vector<AddedToken> extra;
  std::vector<std::string> specials;
  if (const auto p = dir / "special_tokens_map.json"; fs::exists(p))
    collect_special_names(parse_json(read_file(p), p.string()), specials);
  if (const auto p = dir / "tokenizer_config.json"; fs::exists(p)) {
    const json config = parse_json(read_file(p), p.string());
    spec.chat_template = chat_template_of(config, p.string());
    if (config.contains("added_tokens_decoder"))
      for (const auto& [id, a] : config["added_tokens_decoder"].items()) {
        json entry = a;
        try {
          entry["id"] = std::stoi(id);
        } catch (const std::exception&) {
          bad_input("{}: added_tokens_decoder key '{}' is not an id", p.string(), id);
        }
        extra.push_back(added_entry(entry, p.string()));
      }
  }
  if (const auto p = dir / "added_tokens.json"; fs::exists(p)) {
    const json added = parse_json(read_file(p), p.string());
    if (!added.is_object()) bad_input("{}: expected an object of token: id", p.string());
    for (const auto& [content, id] : added.items()) {
      if (!id.is_number_integer()) bad_input("{}: token '{}' has id {}", p.string(), content, id.dump());
      const bool special = std::find(specials.begin(), specials.end(), content) != specials.end();
      extra.push_back({content, id.get<std::int32_t>(), special});
    }
  }
  for (auto& a : extra) spec.added.push_back(std::move(a));  // build() drops repeated contents
}

void read_merges_txt(std::string_view text, tok::Spec& spec, std::string_view origin) {
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const auto space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      bad_input("{}: line {} '{}' is not two tokens separated by one space", origin, line_no, line);
    spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
}

tok::Spec read_slow_layout(const fs::path& dir) {
  tok::Spec spec;
  const auto vocab_path = dir / "vocab.json";
  spec.origin = vocab_path.string();
  read_vocab(parse_json(read_file(vocab_path), spec.origin), spec, spec.origin);
  const auto merges_path = dir / "merges.txt";
  read_merges_txt(read_file(merges_path), spec, merges_path.string());
  read_extra_added(dir, spec);
  return spec;
}

}  // namespace

namespace tok {

Spec read_tokenizer_json(std::string_view text, std::string_view origin) {
  Spec spec;
  spec.origin = std::string(origin);
  bool saw_vocab = false, saw_merges = false;
  const json j = sax_read_tokenizer_json(text, spec, saw_vocab, saw_merges);
  const json& model = field(j, "model", origin);
  if (model.value("type", "BPE") != "BPE") bad_input("{}: model type {} is not BPE", origin, model["type"].dump());
  if (model.value("byte_fallback", false)) bad_input("{}: BPE byte_fallback is not supported", origin);
  if (!saw_vocab) bad_input("{}: missing field 'model.vocab' (an object of token: id)", origin);
  if (!saw_merges) bad_input("{}: missing field 'model.merges' (an array)", origin);
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) spec.added.push_back(added_entry(a, origin));
  spec.nfc = normalizer_is_nfc(j.value("normalizer", json()), origin);
  const json pre = j.value("pre_tokenizer", json());
  if (pre.is_null()) bad_input("{}: pre_tokenizer is missing; a byte-level BPE needs one", origin);
  spec.pattern = pre_tokenizer_pattern(pre, origin);
  return spec;
}

}  // namespace tok

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view origin) {
  return Tokenizer(tok::build(tok::read_tokenizer_json(tokenizer_json, origin)));
}

Tokenizer Tokenizer::load(const fs::path& dir) {
  if (const auto path = dir / "tokenizer.json"; fs::exists(path)) {
    tok::Spec spec = tok::read_tokenizer_json(read_file(path), path.string());
    read_extra_added(dir, spec);
    return Tokenizer(tok::build(std::move(spec)));
  }
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) return Tokenizer(tok::build(read_slow_layout(dir)));
  bad_input("{}: no tokenizer (neither tokenizer.json nor vocab.json + merges.txt)", dir.string());
}

bool Tokenizer::available(const fs::path& dir) {
  return fs::exists(dir / "tokenizer.json") || (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"));
}

}  // namespace sonde
