#pragma once
// "Did you mean" for every unknown name (hook points, settings fields, run options, capture keys):
// one rule, so every front end suggests alike. A candidate is suggested only when it is close:
// within an edit distance (Levenshtein: insertions, deletions, substitutions) of
// max(2, len(name) / 3), so that "sead" suggests "seed" but "xyz" suggests nothing.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sonde {

// The close candidates, closest first (ties in the candidates' order), at most max_results.
std::vector<std::string> closest_names(std::string_view name, const std::vector<std::string>& candidates,
                                       std::size_t max_results = 3);

// "; did you mean: a, b" for the close candidates, or "" when none is close.
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates, std::size_t max_results = 3);

}  // namespace sonde
