#pragma once
// A small, fully known capture: two hooks, two prompts, values from a formula that
// check_h5py.py recomputes independently. Keep act_value() and the constants in sync with it.
#include <sonde/sink.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace sonde::test {

// Value of column c (flat index within a row) of hook h at (prompt p, position pos). Column 0 is
// 1 + odd * 2^-8, an exact tie for bf16, to check ties-to-even; the others span 2^-14..2^10
// with all mantissa bits in use, so bf16 and f16 really round.
inline float act_value(int h, std::int64_t p, std::int32_t pos, std::int64_t c) {
  if (c == 0) return static_cast<float>(1.0 + std::ldexp(2.0 * pos + 1.0, -8));
  const double base = (static_cast<double>(h * 131 + p * 37 + pos * 11 + c) * 0.37 - 50.0) / (1.0 + static_cast<double>(c % 5));
  return static_cast<float>(std::ldexp(base, static_cast<int>(c % 7) * 4 - 14));
}

struct ScenarioPrompt {
  PromptRecord record;
  std::vector<RowRecord> rows;
};

inline std::vector<HookPoint> scenario_hooks() {
  return {{"blocks.0.hook_resid_post", {6}}, {"blocks.1.attn.hook_q", {2, 3}}};
}

inline std::vector<ScenarioPrompt> scenario_prompts() {
  ScenarioPrompt a, b;
  a.record = {3, "p-three", "Hello, world", "", "length", {11, 12, 13}, 7};
  b.record = {8, "p-eight", "naïve café — ✓ 你好", "done ✓", "stop", {21, 22, 23, 24, 25}, 9223372036854775813ull};
  for (std::int32_t pos = 0; pos < 3; ++pos) a.rows.push_back({3, pos, 11 + pos, -1, RowKind::Prompt});
  for (std::int32_t pos = 0; pos < 4; ++pos)
    b.rows.push_back({8, pos, 21 + pos, pos < 3 ? -1 : 0, pos < 3 ? RowKind::Prompt : RowKind::Generated});
  return {a, b};
}

inline RunMetadata scenario_meta() {
  RunMetadata m;
  m.strings = {{"model_arch", "qwen2"}, {"backend", "reference"}, {"weight_processing", "none"}};
  m.ints = {{"prediction_shift", 0}, {"rank", 0}, {"world_size", 1}};
  return m;
}

}  // namespace sonde::test
