#include "tokens.h"

#include <filesystem>
#include <vector>

namespace sonde::report {

void TokenTable::load(const std::string& dir) {
  if (dir.empty() || !std::filesystem::is_directory(dir) || !Tokenizer::available(dir)) return;
  tok_ = Tokenizer::load(dir);
  source_ = dir;
}

nlohmann::json TokenTable::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto id : ids_) {
    std::string text = "#" + std::to_string(id);
    if (tok_ && id >= 0 && static_cast<std::size_t>(id) < tok_->vocab_size())
      text = tok_->decode(std::vector<std::int32_t>{static_cast<std::int32_t>(id)});
    out[std::to_string(id)] = text;  // half a UTF-8 character is replaced when the page is written
  }
  return out;
}

}  // namespace sonde::report
