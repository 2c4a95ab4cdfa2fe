// A SAX pass over tokenizer.json that moves model.vocab and model.merges straight into the Spec
// and builds a DOM only for the small rest: a DOM of the 7 MB file costs more than the rest of
// loading put together.
#include "tokenizer_json_sax.h"

#include "sonde/error.h"

namespace sonde::tok {

using json = nlohmann::json;

namespace {

class SpecSax final : public nlohmann::json_sax<json> {
 public:
  SpecSax(Spec& spec, json& root, bool& saw_vocab, bool& saw_merges)
      : spec_(spec), root_(root), saw_vocab_(saw_vocab), saw_merges_(saw_merges) {}

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return integer(v); }
  bool number_unsigned(number_unsigned_t v) override { return integer(static_cast<number_integer_t>(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool binary(binary_t&) override { return fail("binary values"); }

  bool string(string_t& v) override {
    if (mode_ == Mode::Merges) return merge_string(v);
    if (mode_ == Mode::MergePair) {
      if (pair_.size() >= 2) return fail("a merge pair with more than two tokens");
      pair_.push_back(std::move(v));
      return true;
    }
    return value(std::move(v));
  }

  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (in_model() && key_ == "vocab") return enter(Mode::Vocab, saw_vocab_);
    if (mode_ != Mode::Dom) return fail("an object inside model.vocab or model.merges");
    return open(json::object());
  }
  bool end_object() override { return close(Mode::Vocab); }

  bool start_array(std::size_t) override {
    if (in_model() && key_ == "merges") return enter(Mode::Merges, saw_merges_);
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::Dom) return fail("a nested array in model.merges or model.vocab");
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::MergePair) {
      if (pair_.size() != 2) return fail("a merge pair without two tokens");
      spec_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::Merges;
      return true;
    }
    return close(Mode::Merges);
  }

  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    bad_input("{}: malformed JSON at byte {}: {}", spec_.origin, pos, e.what());
  }

 private:
  enum class Mode { Dom, Vocab, Merges, MergePair };

  bool in_model() const { return mode_ == Mode::Dom && stack_.size() == 2 && path_.back() == "model"; }

  bool enter(Mode mode, bool& seen) {
    mode_ = mode;
    seen = true;
    return true;
  }

  bool close(Mode special) {
    if (mode_ == special) {
      mode_ = Mode::Dom;
      return true;
    }
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  bool integer(number_integer_t v) {
    if (mode_ != Mode::Vocab) return value(v);
    if (v < 0 || v > INT32_MAX) bad_input("{}: vocab entry '{}' has id {}", spec_.origin, key_, v);
    spec_.vocab.emplace_back(std::move(key_), static_cast<std::int32_t>(v));
    return true;
  }

  bool merge_string(const string_t& s) {
    const auto space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
      bad_input("{}: merge {} '{}' is not two tokens separated by one space", spec_.origin, spec_.merges.size(), s);
    spec_.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    return true;
  }

  json* place(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_object()) return &(parent[key_] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }

  bool value(json&& v) {
    if (mode_ != Mode::Dom) return fail("a non-integer id in model.vocab or a non-string merge");
    place(std::move(v));
    return true;
  }

  bool open(json&& container) {
    const std::string name = !stack_.empty() && stack_.back()->is_object() ? key_ : std::string();
    stack_.push_back(place(std::move(container)));
    path_.push_back(name);
    return true;
  }

  bool fail(const char* what) {
    bad_input("{}: unexpected {} (entry {} of model.vocab/merges)", spec_.origin, what,
              mode_ == Mode::Vocab ? spec_.vocab.size() : spec_.merges.size());
  }

  Spec& spec_;
  json& root_;
  bool& saw_vocab_;
  bool& saw_merges_;
  Mode mode_ = Mode::Dom;
  std::vector<json*> stack_;
  std::vector<std::string> path_;
  std::string key_;
  std::vector<std::string> pair_;
};

}  // namespace

json sax_read_tokenizer_json(std::string_view text, Spec& spec, bool& saw_vocab, bool& saw_merges) {
  json root;
  SpecSax sax(spec, root, saw_vocab, saw_merges);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {
    bad_input("{}: malformed JSON: {}", spec.origin, e.what());
  }
  return root;
}

}  // namespace sonde::tok
