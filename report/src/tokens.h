#pragma once
// Token text for the page: the ids the page shows, decoded one by one with the model's tokenizer
// when one is found (the report's --model, else the file's model_path), else shown as "#id".
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace sonde::report {

class TokenTable {
 public:
  // `dir` empty or without tokenizer files: ids only.
  void load(const std::string& dir);
  bool has_tokenizer() const { return tok_.has_value(); }
  const std::string& source() const { return source_; }
  void use(std::int64_t id) { ids_.insert(id); }
  template <typename C>
  void use_all(const C& ids) {
    for (auto id : ids) ids_.insert(static_cast<std::int64_t>(id));
  }
  nlohmann::json to_json() const;  // {"<id>": "text", ...}

 private:
  std::optional<Tokenizer> tok_;
  std::string source_;
  std::set<std::int64_t> ids_;
};

}  // namespace sonde::report
