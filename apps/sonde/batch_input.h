#pragma once
// The input of sonde batch (design §6): one JSON object per line with an `id` and one of
// `prompt` (text), `messages` (chat) or `ids` (token ids), plus optional generation options.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sonde::cli {

struct BatchRequest {
  std::int64_t line = 0;          // 1-based line number in the input file
  std::string id;
  std::string text;               // prompt text, or the rendered chat ("" for ids)
  nlohmann::json messages;        // null unless given
  std::vector<std::int32_t> ids;  // filled for `ids`; text requests are tokenized later
  nlohmann::json options;         // the per-line generation options (object, maybe empty)
};

struct BatchInput {
  std::vector<BatchRequest> requests;
  std::vector<std::string> skipped;  // "line N: reason" for each bad line skipped
};

// Generation options a line may set, with their JSON types checked.
const std::vector<std::string>& batch_option_names();

// Reads every line. A bad line (not JSON, not an object, no id, a repeated id, not exactly one
// of prompt/messages/ids, an unknown or mistyped option) is a BadInput error naming the file
// and line number; with skip_bad it is recorded in `skipped` instead. Empty lines are ignored.
BatchInput read_batch_input(const std::filesystem::path& file, bool skip_bad);

}  // namespace sonde::cli
