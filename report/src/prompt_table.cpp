#include "prompt_table.h"

#include <algorithm>

namespace sonde::report {

PromptTable PromptTable::read(const H5File& f, std::int64_t limit) {
  PromptTable t;
  t.file_ = &f;
  if (!f.has("/prompts/prompt_idx")) return t;
  t.count = static_cast<std::int64_t>(f.dims("/prompts/prompt_idx")[0]);
  if (limit >= 0) t.count = std::min(t.count, limit);
  t.prompt_idx = f.read_i64("/prompts/prompt_idx", 0, t.count);
  t.row_start = f.read_i64("/prompts/row_start", 0, t.count);
  t.row_count = f.read_i64("/prompts/row_count", 0, t.count);
  t.token_offsets_ = f.read_i64("/prompts/token_offsets", 0, t.count + 1);
  return t;
}

std::string PromptTable::text(const std::string& name, std::int64_t e) const {
  const std::string g = "/prompts/" + name;
  const auto off = file_->read_i64(g + "_offsets", static_cast<hsize_t>(e), 2);
  const auto bytes = file_->read_i64(g + "_bytes", static_cast<hsize_t>(off[0]), off[1] - off[0]);
  std::string s;
  for (auto b : bytes) s += static_cast<char>(b);
  return s;
}

std::vector<std::int64_t> PromptTable::tokens(std::int64_t e) const {
  const auto a = token_offsets_[static_cast<std::size_t>(e)], b = token_offsets_[static_cast<std::size_t>(e) + 1];
  return file_->read_i64("/prompts/token_ids", static_cast<hsize_t>(a), b - a);
}

std::vector<std::string> PromptTable::all_ids() const {
  std::vector<std::string> ids;
  if (count == 0) return ids;
  const auto off = file_->read_i64("/prompts/id_offsets", 0, count + 1);
  const auto bytes = file_->read_i64("/prompts/id_bytes", 0, off.back());
  for (std::int64_t e = 0; e < count; ++e) {
    std::string s;
    for (auto i = off[static_cast<std::size_t>(e)]; i < off[static_cast<std::size_t>(e) + 1]; ++i) s += static_cast<char>(bytes[static_cast<std::size_t>(i)]);
    ids.push_back(std::move(s));
  }
  return ids;
}

}  // namespace sonde::report
