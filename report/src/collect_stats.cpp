// A statistics file (sonde.stats/1): per hook the mean and variance of every feature, outliers
// flagged by the modified z-score of Iglewicz and Hoaglin ("How to Detect and Handle Outliers",
// 1993): M = 0.6745 (x - median) / MAD, an outlier where |M| > 3.5, of the mean or the variance.
#include "collect.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace sonde::report {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}

// Indices with |modified z| > 3.5. A MAD of 0 (most features equal) flags every feature that differs.
std::set<std::size_t> outliers(const std::vector<double>& x) {
  const double med = median(x);
  std::vector<double> dev(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) dev[i] = std::fabs(x[i] - med);
  const double mad = median(dev);
  std::set<std::size_t> out;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (mad > 0 ? 0.6745 * dev[i] / mad > 3.5 : dev[i] > 0) out.insert(i);
  return out;
}

}  // namespace

nlohmann::json collect_stats(H5File& f, const ReportOptions& o, std::vector<std::string>& notes) {
  nlohmann::json hooks = nlohmann::json::array();
  for (const auto& h : f.children("/stats")) {
    const std::string g = "/stats/" + h + "/";
    const auto mean = f.read_f64(g + "mean"), var = f.read_f64(g + "var");
    const auto count = f.read_i64(g + "count");
    auto flagged = outliers(mean);
    for (auto i : outliers(var)) flagged.insert(i);
    std::set<std::size_t> shown;
    for (auto i : sample_evenly(mean.size(), static_cast<std::size_t>(o.max_features))) shown.insert(i);
    if (shown.size() < mean.size())
      notes.push_back(fmt::format("{}: {} of {} features, evenly spaced, and every outlier", h, shown.size(), mean.size()));
    shown.insert(flagged.begin(), flagged.end());
    nlohmann::json feature = nlohmann::json::array(), m = nlohmann::json::array(), v = nlohmann::json::array(),
                   out = nlohmann::json::array();
    for (auto i : shown) {
      feature.push_back(i);
      m.push_back(mean[i]);
      v.push_back(var[i]);
      out.push_back(flagged.count(i) ? 1 : 0);
    }
    hooks.push_back({{"hook", h}, {"count", count.empty() ? 0 : count[0]}, {"features", mean.size()},
                     {"outliers", std::vector<std::size_t>(flagged.begin(), flagged.end())},
                     {"feature", feature}, {"mean", m}, {"var", v}, {"outlier", out}});
  }
  return {{"file", f.path()}, {"hooks", hooks}};
}

}  // namespace sonde::report
