#pragma once
// A JSONL dataset of requests (design §6): one JSON object per line with an `id` and one of
// `prompt` (text), `messages` (chat) or `ids` (token ids), plus optional generation settings
// under GenerationSettings' keys.
#include <sonde/request.h>

#include <filesystem>
#include <string>
#include <vector>

namespace sonde {

struct Dataset {
  std::vector<Request> requests;     // Request::where is "line N" (1-based)
  std::vector<std::string> skipped;  // "line N: reason" for each bad line skipped
};

// Reads every line. A bad line (not JSON, not an object, no id, a repeated id, not exactly one of
// prompt/messages/ids, an unknown or mistyped field) is a BadInput error naming the file and
// line; with skip_bad it is recorded in `skipped` instead. Empty lines are ignored; a file with
// no request is BadInput.
Dataset read_dataset(const std::filesystem::path& file, bool skip_bad);

// A scoring dataset (sonde score, RunKind::Score): each line an optional `id` (else its index),
// one of prompt/messages/ids and one of `completion` (text) or `completion_ids`; no other key.
// BadInput naming the file, line and key.
Dataset read_score_dataset(const std::filesystem::path& file);

}  // namespace sonde
