#pragma once
// The /prompts table of an activation file, read once: each entry's rows, tokens and strings.
#include "h5_read.h"

#include <cstdint>
#include <string>
#include <vector>

namespace sonde::report {

struct PromptTable {
  std::int64_t count = 0;  // entries shown: the committed ones of a file still being written
  std::vector<std::int64_t> prompt_idx, row_start, row_count;
  std::string id(std::int64_t e) const { return text("id", e); }
  std::string text(const std::string& name, std::int64_t e) const;  // "id", "text", "completion", "finish_reason"
  std::vector<std::int64_t> tokens(std::int64_t e) const;           // prompt + completion
  std::vector<std::string> all_ids() const;                         // every entry's id, in one read

  static PromptTable read(const H5File& f, std::int64_t limit);  // limit < 0: every entry

 private:
  const H5File* file_ = nullptr;
  std::vector<std::int64_t> token_offsets_;
};

}  // namespace sonde::report
