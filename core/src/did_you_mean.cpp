// did_you_mean.h: closest names by Levenshtein distance (Levenshtein 1966), two rows of the table.
#include <sonde/did_you_mean.h>

#include <algorithm>

namespace sonde {
namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::vector<std::string> closest_names(std::string_view name, const std::vector<std::string>& candidates,
                                       std::size_t max_results) {
  const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& c : candidates)
    if (const auto d = edit_distance(name, c); d <= limit) scored.emplace_back(d, c);
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (std::size_t i = 0; i < scored.size() && out.size() < max_results; ++i) out.push_back(scored[i].second);
  return out;
}

std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates, std::size_t max_results) {
  std::string hint;
  for (const auto& c : closest_names(name, candidates, max_results)) hint += (hint.empty() ? "; did you mean: " : ", ") + c;
  return hint;
}

}  // namespace sonde
