#pragma once
// Per-feature running statistics of one hook's rows, mergeable exactly (Chan et al.): a block of
// rows is summarised in two passes (mean, then the sum of squared deviations M2) and merged into
// the state with delta = mean_b - mean_a, mean = mean_a + delta * n_b / n, M2 = M2_a + M2_b +
// delta^2 * n_a * n_b / n. The same rows merged in the same blocks give the same bits, so a
// resumed run (whose state is read back exactly) equals an uninterrupted one, and any split into
// blocks agrees to rounding. Row L2 norms are kept whole (8 bytes a row), so their quantiles are
// exact and two states merge by concatenation.
#include <cstdint>
#include <vector>

namespace sonde::stats {

struct RunningStats {
  std::int64_t count = 0;
  std::vector<double> mean, m2, min, max, absmax;  // per feature
  std::vector<double> norms;                       // per row, in arrival order

  explicit RunningStats(std::int64_t features = 0);
  std::int64_t features() const { return static_cast<std::int64_t>(mean.size()); }
  // `rows` rows of features() values each, row-major.
  void add(const float* data, std::int64_t rows);
  void merge(const RunningStats& other);
  std::vector<double> variance() const;  // population variance M2 / count (NaN when empty)
  double norm_mean() const;
  // numpy's default (linear) quantile of the norms at probability p.
  double norm_quantile(double p) const;
};

inline const std::vector<double> kQuantiles{0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99};

}  // namespace sonde::stats
