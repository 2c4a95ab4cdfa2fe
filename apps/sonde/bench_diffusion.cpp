#include "bench_diffusion.h"

#include <sonde/decode.h>
#include <sonde/session_decode.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>

namespace sonde::cli {
namespace {

struct Mode {
  std::string name;
  DiffusionOptions options;
};

std::vector<Mode> modes(const Session& s, const DiffusionBenchOptions& o) {
  DiffusionOptions base;
  base.max_new_tokens = o.tokens;
  base.steps = o.tokens;  // one slot per step: the oracle's usual setting
  base.sampling.alg = DiffusionAlg::Entropy;
  base.mask_id = static_cast<std::int32_t>(s.info().mask_token_id);
  base.pad_id = static_cast<std::int32_t>(s.config().pad_token_id.value_or(0));
  auto block = base;
  block.mode = DiffusionMode::Block;
  block.block_size = o.block_size;
  auto threshold = block;
  threshold.sampling.alg = DiffusionAlg::ConfidenceThreshold;
  threshold.threshold = o.threshold;
  auto per_step = block;
  per_step.tokens_per_step = o.tokens_per_step;
  std::vector<Mode> out{{"exact", base},
                        {"block", block},
                        {fmt::format("block+threshold {}", o.threshold), threshold},
                        {fmt::format("block+tokens-per-step {}", o.tokens_per_step), per_step}};
  for (auto mode : {DiffusionMode::BlockCache, DiffusionMode::DualCache}) {  // the same three over a cache
    const auto name = diffusion_mode_name(mode);
    auto m = block, t = threshold, p = per_step;
    m.mode = t.mode = p.mode = mode;
    out.push_back({std::string(name), m});
    out.push_back({fmt::format("{}+threshold {}", name, o.threshold), t});
    out.push_back({fmt::format("{}+tokens-per-step {}", name, o.tokens_per_step), p});
  }
  return out;
}

struct Timed {
  double seconds = 0;
  std::int64_t forwards = 0;
};

Timed run(Session& s, const std::vector<std::vector<std::int32_t>>& prompts, const DiffusionOptions& d) {
  SessionDecodeForward fwd(s);
  Timed t;
  const auto t0 = std::chrono::steady_clock::now();
  diffusion_generate(fwd, prompts, d, [&](const DiffusionStep&) { ++t.forwards; });
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

}  // namespace

int bench_diffusion_modes(Session& s, const std::vector<std::vector<std::int32_t>>& prompts,
                          const DiffusionBenchOptions& o) {
  const auto all = modes(s, o);
  for (const auto& m : all) check_diffusion_options(m.options);
  run(s, prompts, all.back().options);  // warm-up: page in the weights, grow the allocator
  const double generated = static_cast<double>(o.tokens) * static_cast<double>(prompts.size());
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  double exact_seconds = 0;
  std::int64_t exact_forwards = 0;
  for (const auto& m : all) {
    Timed best{1e300, 0};
    for (std::int64_t r = 0; r < o.repeat; ++r) {
      const auto t = run(s, prompts, m.options);
      if (t.seconds < best.seconds) best = t;
    }
    if (m.name == "exact") exact_seconds = best.seconds, exact_forwards = best.forwards;
    out.push_back({{"mode", m.name},
                   {"forwards", best.forwards},
                   {"tokens_per_forward", generated / static_cast<double>(prompts.size()) / static_cast<double>(best.forwards)},
                   {"seconds", best.seconds},
                   {"ms_per_forward", 1e3 * best.seconds / static_cast<double>(best.forwards)},
                   {"tokens_per_s", generated / best.seconds},
                   {"speedup_vs_exact", exact_seconds / best.seconds},
                   {"forwards_vs_exact", static_cast<double>(exact_forwards) / static_cast<double>(best.forwards)}});
  }
  if (o.json) {
    nlohmann::ordered_json j{{"mode", "diffusion"}, {"tokens", o.tokens}, {"prompt_tokens", prompts.front().size()},
                             {"batch", prompts.size()}, {"block_size", o.block_size}, {"backend", s.backend().info().name},
                             {"compute", s.compute()}, {"threads", s.backend().info().threads}, {"repeat", o.repeat}, {"runs", out}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << fmt::format("sonde bench diffusion: {} new tokens after {} prompt tokens x batch {}, block {}, on {} ({} threads), "
                           "best of {}\n",
                           o.tokens, prompts.front().size(), prompts.size(), o.block_size, s.backend().info().name,
                           s.backend().info().threads, o.repeat);
  std::cout << fmt::format("  {:<34} {:>8} {:>7} {:>10} {:>9} {:>10} {:>9}\n", "mode", "forwards", "TPF", "seconds", "ms/fwd", "tokens/s",
                           "vs exact");
  for (const auto& r : out)
    std::cout << fmt::format("  {:<34} {:>8} {:>7.2f} {:>10.3f} {:>9.2f} {:>10.2f} {:>8.2f}x\n", r["mode"].get<std::string>(),
                             r["forwards"].get<std::int64_t>(), r["tokens_per_forward"].get<double>(),
                             r["seconds"].get<double>(), r["ms_per_forward"].get<double>(), r["tokens_per_s"].get<double>(),
                             r["speedup_vs_exact"].get<double>());
  return 0;
}

}  // namespace sonde::cli
