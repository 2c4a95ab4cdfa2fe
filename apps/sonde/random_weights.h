#pragma once
// Deterministic random tensors for make-model: the same seed and tensor name give the same bits
// on every machine (splitmix64 and Box-Muller in double, no library distributions, whose
// output is implementation-defined).
#include <sonde/dtype.h>

#include <cstdint>
#include <string>

namespace sonde::cli {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }  // (0, 1]
  double normal();

 private:
  std::uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// A per-tensor stream: FNV-1a of the name mixed with the seed.
std::uint64_t tensor_seed(std::uint64_t seed, const std::string& name);

}  // namespace sonde::cli
