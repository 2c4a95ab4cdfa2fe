// FeatureState (feature_state.h).
#include "feature_state.h"

#include <algorithm>
#include <cmath>

namespace sonde::feature_stats {

std::vector<double> hist_edges() {
  std::vector<double> e(kBins + 1);
  const double lo = std::log10(kLow), hi = std::log10(kHigh);
  for (int i = 0; i <= kBins; ++i) e[static_cast<std::size_t>(i)] = std::pow(10.0, lo + (hi - lo) * i / kBins);
  return e;
}

int hist_bin(double v) {
  static const std::vector<double> edges = hist_edges();
  // the last edge <= v: bins [e_i, e_{i+1}), clamped to the first and last
  const auto it = std::upper_bound(edges.begin(), edges.end(), v);
  const int i = static_cast<int>(it - edges.begin()) - 1;
  return std::clamp(i, 0, kBins - 1);
}

FeatureState::FeatureState(std::int64_t f)
    : features(f), n_fire(static_cast<std::size_t>(f)), sum(static_cast<std::size_t>(f)), max(static_cast<std::size_t>(f)),
      hist(static_cast<std::size_t>(f * kBins)), top(static_cast<std::size_t>(f)) {}

bool better(const TopEntry& a, const TopEntry& b) {
  if (a.value != b.value) return a.value > b.value;
  if (a.prompt_idx != b.prompt_idx) return a.prompt_idx < b.prompt_idx;
  if (a.pos != b.pos) return a.pos < b.pos;
  return a.step < b.step;
}

void FeatureState::add(const float* acts, std::int64_t n, std::int64_t prompt_idx, const std::vector<std::int32_t>& pos,
                       const std::vector<std::int32_t>& step, const std::vector<std::int32_t>& tokens) {
  for (std::int64_t r = 0; r < n; ++r, ++rows) {
    const float* a = acts + r * features;
    for (std::int64_t j = 0; j < features; ++j) {
      const double v = a[j];
      if (!(v > 0)) continue;
      const auto J = static_cast<std::size_t>(j);
      ++n_fire[J];
      sum[J] += v;
      max[J] = std::max(max[J], v);
      ++hist[J * kBins + static_cast<std::size_t>(hist_bin(v))];
      auto& t = top[J];
      TopEntry e;
      e.value = v;
      e.row = rows;
      e.prompt_idx = prompt_idx;
      e.pos = pos[static_cast<std::size_t>(r)];
      e.step = step[static_cast<std::size_t>(r)];
      if (static_cast<int>(t.size()) == kTopN && !better(e, t.back())) continue;
      for (int k = 0; k < kContext; ++k) {
        const std::int64_t p = static_cast<std::int64_t>(e.pos) - kWindow + k;
        e.context[k] = p >= 0 && p < static_cast<std::int64_t>(tokens.size()) ? tokens[static_cast<std::size_t>(p)] : -1;
      }
      t.insert(std::upper_bound(t.begin(), t.end(), e, better), e);
      if (static_cast<int>(t.size()) > kTopN) t.pop_back();
    }
  }
}

void FeatureState::merge(const FeatureState& o, std::int64_t row_offset) {
  for (std::size_t j = 0; j < n_fire.size(); ++j) {
    n_fire[j] += o.n_fire[j];
    sum[j] += o.sum[j];
    max[j] = std::max(max[j], o.max[j]);
    auto& t = top[j];
    for (TopEntry e : o.top[j]) {
      e.row += row_offset;
      t.insert(std::upper_bound(t.begin(), t.end(), e, better), e);
    }
    if (static_cast<int>(t.size()) > kTopN) t.resize(kTopN);
  }
  for (std::size_t i = 0; i < hist.size(); ++i) hist[i] += o.hist[i];
  rows += o.rows;
}

}  // namespace sonde::feature_stats
