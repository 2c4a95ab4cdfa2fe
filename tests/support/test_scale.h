#pragma once
// SONDE_TEST_SCALE: the share of their full size at which the slowest tests run, a number in
// (0, 1], 1 when unset. Those tests (a run killed or interrupted mid-way and resumed, batch
// invariance over many prompts, a kernel over every row count and thread count) have sizes chosen
// for the plain build; under AddressSanitizer the same code runs 10-15 times slower, and the
// paths they check (a signal landing mid-run with work left to resume, prompts of every length in
// several micro-batches) are the same at a quarter of the size. .ci/run's ASan stage sets 0.25;
// the plain build runs them whole. A test scales only what does not change what it checks, and
// keeps a floor under which it would not (its `at_least`).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace sonde::test {

inline double test_scale() {
  const char* s = std::getenv("SONDE_TEST_SCALE");
  if (!s || !*s) return 1.0;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (*end != '\0' || !(v > 0.0 && v <= 1.0))
    throw std::invalid_argument(std::string("SONDE_TEST_SCALE=") + s + ": expected a number in (0, 1]");
  return v;
}

// n at the scale, rounded, never below at_least (nor above n).
inline long long scaled(long long n, long long at_least) {
  const auto v = static_cast<long long>(std::llround(static_cast<double>(n) * test_scale()));
  return std::min(n, std::max(v, at_least));
}

}  // namespace sonde::test
