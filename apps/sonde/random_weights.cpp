#include "random_weights.h"

#include <cmath>

namespace sonde::cli {

double SplitMix64::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double r = std::sqrt(-2.0 * std::log(uniform()));
  const double a = 2.0 * M_PI * uniform();
  spare_ = r * std::sin(a);
  has_spare_ = true;
  return r * std::cos(a);
}

std::uint64_t tensor_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return SplitMix64(h ^ (seed * 0x9e3779b97f4a7c15ull)).next();
}

}  // namespace sonde::cli
