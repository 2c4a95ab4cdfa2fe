// A `sonde lens --out` file: each layer's top tokens and probabilities per position (and per
// denoising step for `--diffusion`), at most 3 per cell for the page.
#include "collect.h"

#include <algorithm>

namespace sonde::report {

nlohmann::json collect_lens(H5File& f, TokenTable& tokens) {
  const auto d = f.dims("/lens/top_ids");
  const bool diffusion = d.size() == 4;
  const std::size_t S = diffusion ? d[0] : 1, L = d[d.size() - 3], T = d[d.size() - 2], K = d.back();
  const std::size_t k = std::min<std::size_t>(K, 3);
  const auto ids = f.read_i64("/lens/top_ids");
  const auto probs = f.read_f64("/lens/top_probs");
  const auto seq = f.has("/sequence") ? f.read_i64("/sequence") : f.read_i64("/input_ids");
  tokens.use_all(seq);
  nlohmann::json top_ids = nlohmann::json::array(), top_probs = nlohmann::json::array();
  for (std::size_t c = 0; c < S * L * T; ++c) {
    std::vector<std::int64_t> i(ids.begin() + static_cast<std::ptrdiff_t>(c * K), ids.begin() + static_cast<std::ptrdiff_t>(c * K + k));
    std::vector<double> p(probs.begin() + static_cast<std::ptrdiff_t>(c * K), probs.begin() + static_cast<std::ptrdiff_t>(c * K + k));
    tokens.use_all(i);
    top_ids.push_back(i);
    top_probs.push_back(p);
  }
  nlohmann::json steps = nlohmann::json::array();
  if (diffusion) steps = f.read_i64("/lens/steps");
  return {{"file", f.path()}, {"layers", L}, {"positions", T}, {"steps", steps}, {"tokens", seq},
          {"top_ids", top_ids}, {"top_probs", top_probs}};
}

}  // namespace sonde::report
