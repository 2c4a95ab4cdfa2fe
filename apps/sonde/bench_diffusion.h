#pragma once
// sonde bench --mode diffusion: whole Dream generations in each decoding mode on the same prompts.
#include <sonde/session.h>

#include <cstdint>
#include <vector>

namespace sonde::cli {

struct DiffusionBenchOptions {
  std::int64_t tokens = 128, repeat = 3, block_size = 32, tokens_per_step = 4;
  double threshold = 0.9;
  bool json = false;
};

// Runs exact (steps = tokens), block, block + confidence_threshold and block + tokens_per_step,
// and the three block runs again with block-cache and with dual-cache, and prints forwards, tokens per forward, seconds (best of `repeat` after one warm-up),
// tokens/s and each mode's speedup over exact per generated token.
int bench_diffusion_modes(Session& s, const std::vector<std::vector<std::int32_t>>& prompts,
                          const DiffusionBenchOptions& o);

}  // namespace sonde::cli
