// LLaDA's generate() pieces that are pure functions (sampling.h): torch's CPU uniform draws and
// the remasking names.
#include <sonde/error.h>
#include <sonde/sampling.h>

namespace sonde {

float TorchCpuRandom::rand_f32() {
  const std::uint32_t w = static_cast<std::uint32_t>(mt_());
  return static_cast<float>(w & ((1u << 24) - 1)) * (1.0f / 16777216.0f);  // 24 bits: float's digits
}

double TorchCpuRandom::rand_f64() {
  const std::uint64_t hi = static_cast<std::uint32_t>(mt_()), lo = static_cast<std::uint32_t>(mt_());
  const std::uint64_t w = (hi << 32) | lo;
  return static_cast<double>(w & ((std::uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);  // 53 bits
}

Remasking parse_remasking(std::string_view name) {
  if (name == "low_confidence") return Remasking::LowConfidence;
  if (name == "random") return Remasking::Random;
  bad_input("remasking: unknown strategy '{}' (expected low_confidence or random)", name);
}

std::string_view remasking_name(Remasking r) { return r == Remasking::Random ? "random" : "low_confidence"; }

}  // namespace sonde
