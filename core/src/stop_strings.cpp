// Stop strings and end tokens of a completion's text (stop_strings.h).
#include <sonde/stop_strings.h>

#include <algorithm>

namespace sonde {

std::size_t find_stop_string(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t best = std::string_view::npos;
  for (const auto& s : stops)
    if (!s.empty()) best = std::min(best, text.find(s));
  return best;
}

std::string cut_at_stop_string(std::string_view text, const std::vector<std::string>& stops) {
  return std::string(text.substr(0, find_stop_string(text, stops)));
}

std::vector<std::int32_t> cut_at_end_tokens(const std::vector<std::int32_t>& ids,
                                            const std::vector<std::int32_t>& end_ids) {
  const auto it = std::find_first_of(ids.begin(), ids.end(), end_ids.begin(), end_ids.end());
  return {ids.begin(), it};
}

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopStringFilter::push(std::string_view chunk) {
  if (stopped_) return {};
  pending_.append(chunk);
  if (const auto at = find_stop_string(pending_, stops_); at != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, at);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail of pending_ that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const auto& s : stops_)
    for (std::size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
      if (std::string_view(pending_).substr(pending_.size() - n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::finish() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace sonde
