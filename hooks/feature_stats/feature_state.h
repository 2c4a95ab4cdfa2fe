#pragma once
// Per-feature dashboard statistics of SAE feature activations (docs/sae.md, "Feature
// dashboards"), as SAEDashboard and Neuronpedia show them, accumulated exactly over a run:
//   rows         rows seen
//   n_fire[F]    rows where the feature is > 0          frequency = n_fire / rows
//   sum[F]       sum of its activations (double)        mean_active = sum / n_fire
//   max[F]       its largest activation (0 when it never fired)
//   hist[F, B]   its positive activations counted in kBins log-spaced bins from kLow to kHigh
//                (below kLow: bin 0; at or above kHigh: the last bin)
//   top[F]       its kTopN largest activations, each with the prompt, position, step and the
//                tokens around the position (kWindow each side, -1 beyond the sequence); ties go
//                to the lower (prompt_idx, pos, step), a key of the row itself, so the result
//                depends neither on how rows were batched nor on which rank saw them.
// Rows are added a prompt at a time in run order; a state read back from its file continues
// bit for bit (resume). Two states merge (merge()): counts, histograms and maxima exactly, the
// top lists exactly (each holds every entry of the union's top that is its own), sums to rounding.
#include <cstdint>
#include <string>
#include <vector>

namespace sonde::feature_stats {

inline constexpr int kBins = 48;
inline constexpr double kLow = 1e-4, kHigh = 1e4;
inline constexpr int kTopN = 16;
inline constexpr int kWindow = 8;
inline constexpr int kContext = 2 * kWindow + 1;

std::vector<double> hist_edges();  // kBins + 1 edges, log-spaced from kLow to kHigh
int hist_bin(double v);            // v > 0

struct TopEntry {
  double value = 0;
  std::int64_t row = -1;  // the run's row number (its order)
  std::int64_t prompt_idx = -1;
  std::int32_t pos = -1, step = -1;
  std::int32_t context[kContext];
};

struct FeatureState {
  std::int64_t features = 0, rows = 0;
  std::vector<std::int64_t> n_fire;
  std::vector<double> sum, max;
  std::vector<std::int64_t> hist;        // [features, kBins]
  std::vector<std::vector<TopEntry>> top;  // per feature, best first, at most kTopN

  explicit FeatureState(std::int64_t f = 0);
  // One prompt's rows: acts [n, features] (row-major), and per row its prompt_idx, position and
  // step; `tokens` the prompt's whole sequence (prompt and completion) for the contexts.
  void add(const float* acts, std::int64_t n, std::int64_t prompt_idx, const std::vector<std::int32_t>& pos,
           const std::vector<std::int32_t>& step, const std::vector<std::int32_t>& tokens);
  // The rows of `other` as if they followed this state's: its row numbers shifted by `row_offset`
  // (the rows before it in the joined activation file).
  void merge(const FeatureState& other, std::int64_t row_offset);
};

// Whether `a` ranks before `b` in a top list: a larger value, then the lower (prompt_idx, pos, step).
bool better(const TopEntry& a, const TopEntry& b);

}  // namespace sonde::feature_stats
