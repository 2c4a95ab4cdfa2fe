#include "running_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sonde::stats {

RunningStats::RunningStats(std::int64_t features)
    : mean(static_cast<std::size_t>(features), 0.0),
      m2(static_cast<std::size_t>(features), 0.0),
      min(static_cast<std::size_t>(features), std::numeric_limits<double>::infinity()),
      max(static_cast<std::size_t>(features), -std::numeric_limits<double>::infinity()),
      absmax(static_cast<std::size_t>(features), 0.0) {}

void RunningStats::add(const float* x, std::int64_t rows) {
  if (rows <= 0) return;
  const std::size_t F = mean.size();
  RunningStats b(features());
  b.count = rows;
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::size_t j = 0; j < F; ++j) {
      const double v = x[static_cast<std::size_t>(r) * F + j];
      b.mean[j] += v;
      b.min[j] = std::min(b.min[j], v);
      b.max[j] = std::max(b.max[j], v);
      b.absmax[j] = std::max(b.absmax[j], std::fabs(v));
      ss += v * v;
    }
    b.norms.push_back(std::sqrt(ss));
  }
  for (auto& m : b.mean) m /= static_cast<double>(rows);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < F; ++j) {
      const double d = x[static_cast<std::size_t>(r) * F + j] - b.mean[j];
      b.m2[j] += d * d;
    }
  merge(b);
}

void RunningStats::merge(const RunningStats& o) {
  if (o.count == 0) return;
  if (count == 0) {
    *this = o;
    return;
  }
  const double na = static_cast<double>(count), nb = static_cast<double>(o.count), n = na + nb;
  for (std::size_t j = 0; j < mean.size(); ++j) {
    const double delta = o.mean[j] - mean[j];
    mean[j] += delta * nb / n;
    m2[j] += o.m2[j] + delta * delta * na * nb / n;
    min[j] = std::min(min[j], o.min[j]);
    max[j] = std::max(max[j], o.max[j]);
    absmax[j] = std::max(absmax[j], o.absmax[j]);
  }
  count += o.count;
  norms.insert(norms.end(), o.norms.begin(), o.norms.end());
}

std::vector<double> RunningStats::variance() const {
  std::vector<double> v(m2.size());
  for (std::size_t j = 0; j < v.size(); ++j) v[j] = count ? m2[j] / static_cast<double>(count) : std::nan("");
  return v;
}

double RunningStats::norm_mean() const {
  if (norms.empty()) return std::nan("");
  double s = 0;
  for (double v : norms) s += v;
  return s / static_cast<double>(norms.size());
}

double RunningStats::norm_quantile(double p) const {
  if (norms.empty()) return std::nan("");
  std::vector<double> s = norms;
  std::sort(s.begin(), s.end());
  const double pos = p * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (pos - static_cast<double>(lo)) * (s[hi] - s[lo]);
}

}  // namespace sonde::stats
