#include "linear_tuner.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sonde::threaded {

namespace {
constexpr std::int64_t kOnePassRows = 3;  // linear_dispatch.cpp's GEMV group: W read once
int index(LinearPath p) { return p == LinearPath::gemv ? 0 : 1; }
LinearPath other(LinearPath p) { return p == LinearPath::gemv ? LinearPath::gemm : LinearPath::gemv; }
}  // namespace

std::int64_t LinearTuner::row_class(std::int64_t M) {
  if (M < 2) return 0;
  const auto u = static_cast<std::uint64_t>(M);
  const int e = static_cast<int>(std::bit_width(u)) - 1;  // 2^e <= M < 2^(e+1)
  const bool upper = u >= (std::uint64_t{3} << (e - 1));   // M >= 1.5 * 2^e
  return 2 * e + (upper ? 1 : 0);
}

bool LinearTuner::Times::settled() const {
  if (trials[0] >= kTrials && trials[1] >= kTrials) return true;
  return first >= 0 && trials[0] >= 1 && trials[1] >= 1 && best[1 - first] > kClear * best[first];
}

LinearTuner::Key LinearTuner::key(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes) {
  // w_bytes is 4, 2 or 1.125 (q8): eighths are exact.
  return {row_class(M), K, N, std::llround(w_bytes * 8)};
}

LinearTuner::Pick LinearTuner::pick(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes,
                                    LinearPath predicted) const {
  if (M <= kOnePassRows) return {LinearPath::gemv, false};
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = times_.find(key(M, K, N, w_bytes));
  if (it == times_.end()) return {predicted, true};
  const Times& t = it->second;
  const int p = index(predicted), o = 1 - p;
  if (!t.settled())  // the path with fewer trials; the prediction on a tie
    return {t.trials[o] < t.trials[p] ? other(predicted) : predicted, true};
  if (t.trials[0] < kTrials || t.trials[1] < kTrials) return {t.first == 0 ? LinearPath::gemv : LinearPath::gemm, false};
  return {t.best[o] < t.best[p] ? other(predicted) : predicted, false};  // a tie keeps the prediction
}

bool LinearTuner::record(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, LinearPath path,
                         double seconds) {
  const std::lock_guard<std::mutex> lock(mu_);
  Times& t = times_[key(M, K, N, w_bytes)];
  const bool was_open = !t.settled();
  const int i = index(path);
  if (t.first < 0) t.first = i;
  t.best[i] = t.trials[i] == 0 ? seconds : std::min(t.best[i], seconds);
  ++t.trials[i];
  return was_open && t.settled();
}

std::pair<double, double> LinearTuner::best(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes) const {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = times_.find(key(M, K, N, w_bytes));
  if (it == times_.end()) return {0, 0};
  return {it->second.best[0], it->second.best[1]};
}

}  // namespace sonde::threaded
