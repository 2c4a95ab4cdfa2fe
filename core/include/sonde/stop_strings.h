#pragma once
// Where a completion's text ends (design §6, model-spec §3.5): Hugging Face style stop strings
// (the text ends *before* the first stop string; the token ids keep everything up to and
// including the token that completed it) and Dream's end tokens (<|endoftext|>, <|dlm_pad|>:
// the ids are cut at the first of them before decoding). Pure functions, unit-tested alone.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sonde {

// The offset of the earliest occurrence of any non-empty stop string in `text`, or npos.
std::size_t find_stop_string(std::string_view text, const std::vector<std::string>& stops);
// `text` up to (not including) the earliest stop string; unchanged when none occurs.
std::string cut_at_stop_string(std::string_view text, const std::vector<std::string>& stops);
// `ids` before the first id that is one of `end_ids` (all of `ids` when none is).
std::vector<std::int32_t> cut_at_end_tokens(const std::vector<std::int32_t>& ids,
                                            const std::vector<std::int32_t>& end_ids);

// Streams text chunks and prints nothing past a stop string: push() returns what can be shown
// now, holding back a tail that could still become the start of a stop string; finish()
// returns the held tail once no more text comes. The concatenation of everything returned
// equals cut_at_stop_string(concatenation of everything pushed).
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  std::string push(std::string_view chunk);
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // received, not yet returned
  bool stopped_ = false;
};

}  // namespace sonde
