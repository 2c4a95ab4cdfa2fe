#pragma once
// A longer capture for the streaming tests, shared by the test process and the stream_child
// helper it kills: prompt p has a known number of rows, values from act_value(), a known record
// and (diffusion) two denoising steps. Everything derives from p, so a resumed run must
// reproduce an uninterrupted one exactly.
#include "sink_test_support.h"

#include <sonde/sink.h>

#include <string>
#include <vector>

namespace sonde::test {

inline std::vector<HookPoint> stream_hooks() { return {{"blocks.0.hook_resid_post", {512}}, {"blocks.1.attn.hook_q", {2, 8}}}; }

inline RunMetadata stream_meta(const std::string& sha = "sha-of-the-run-config") {
  RunMetadata m = scenario_meta();
  m.strings["run_config_sha256"] = sha;
  return m;
}

inline ScenarioPrompt stream_prompt(std::int64_t p) {
  ScenarioPrompt s;
  const int n = 3 + static_cast<int>((p * 5) % 11);
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(static_cast<std::int32_t>(100 + p * 3 + i));
  s.record = {p, "id-" + std::to_string(p), "text ✓ " + std::to_string(p), p % 3 ? "done" : "", p % 2 ? "stop" : "length",
              tokens, static_cast<std::uint64_t>(p) * 977 + 1};
  for (std::int32_t pos = 0; pos < n; ++pos)
    s.rows.push_back({p, pos, tokens[static_cast<std::size_t>(pos)], pos < 2 ? -1 : pos - 2,
                      pos < 2 ? RowKind::Prompt : RowKind::Generated});
  return s;
}

inline std::vector<StepRecord> stream_steps(std::int64_t p) {
  std::vector<StepRecord> out;
  for (std::int32_t step = 0; step < 2; ++step) {
    StepRecord s{p, step, 1.0f - 0.5f * static_cast<float>(step), step + 1, {}};
    for (std::int64_t i = 0; i < 2 + p % 4; ++i) s.canvas.push_back(static_cast<std::int32_t>(p * 10 + i + step));
    out.push_back(s);
  }
  return out;
}

// One prompt through the sink, acts delivered in two parts as a forward pass might.
inline void stream_one(Sink& sink, std::int64_t p, bool diffusion) {
  const auto hooks = stream_hooks();
  const ScenarioPrompt s = stream_prompt(p);
  const std::size_t n = s.rows.size(), split = n / 2;
  for (int h = 0; h < static_cast<int>(hooks.size()); ++h) {
    const auto& hook = hooks[static_cast<std::size_t>(h)];
    sink.write({hook.name, p}, make_rows(h, hook, s.rows, 0, split, false).view);
    sink.write({hook.name, p}, make_rows(h, hook, s.rows, split, n, h == 1).view);
  }
  sink.add_rows(s.rows);
  if (diffusion) sink.add_steps(stream_steps(p));
  sink.end_prompt(s.record);
}

inline std::string result_line(std::int64_t p) { return "{\"id\": \"id-" + std::to_string(p) + "\"}\n"; }

}  // namespace sonde::test
