// /rows/fresh and /rows/computed_step under --diffusion-capture all (docs/generation.md, "Cached
// modes"), as a user runs it: `sonde batch` of a tiny Dream model over a left-padded batch in every
// mode. The expectations come from the documented schemes, not from the capture code: a cached
// step computes all real slots at a block's first step (the refresh), then slots [lo - 1, N)
// (block-cache) or [lo - 1, hi) (dual-cache); every other slot's row is the one of the refresh,
// value for value. Exact and block modes compute every slot at every step. LLaDA's cached modes
// (Fast-dLLM) the same, with the range starting at lo (no logit shift).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>

namespace sonde::test {
namespace {

constexpr std::int64_t kNew = 8, kBlock = 4, kHidden = 64;
const std::vector<std::string> kHooks{"blocks.0.hook_resid_post", "blocks.1.hook_resid_post"};

struct Case {
  std::string name, mode;
  std::vector<std::string> extra;  // schedule flags
  std::int64_t refresh_every = 0;  // --refresh-every
  std::string arch = "dream";      // llada: blocks by --block-length, no logit shift (range from lo)
};

struct Rows {
  std::vector<std::int64_t> prompt, pos, step, kind, fresh, computed;
  std::map<std::string, Array> acts;
  std::size_t size() const { return prompt.size(); }
};

Rows read_rows(const std::filesystem::path& h5) {
  Rows r{as_ints(read_dataset(h5, "/rows/prompt_idx")), as_ints(read_dataset(h5, "/rows/pos")),
         as_ints(read_dataset(h5, "/rows/step")),       as_ints(read_dataset(h5, "/rows/kind")),
         as_ints(read_dataset(h5, "/rows/fresh")),      as_ints(read_dataset(h5, "/rows/computed_step")),
         {}};
  for (const auto& h : kHooks) r.acts[h] = read_dataset(h5, "/acts/" + h);
  return r;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class CaptureFresh : public ::testing::TestWithParam<Case> {};

TEST_P(CaptureFresh, ReusedRowsAreMarkedAndHoldTheValuesOfTheStepThatComputedThem) {
  const Case& c = GetParam();
  const auto dir = temp_dir();
  const std::vector<std::int64_t> lengths{2, 4, 3};  // two micro-batches, the first left-padded
  {
    std::ofstream in(dir / "in.jsonl");
    for (std::size_t i = 0; i < lengths.size(); ++i)
      in << nlohmann::json{{"id", std::to_string(i)}, {"ids", std::vector<int>(static_cast<std::size_t>(lengths[i]), 7 + static_cast<int>(i))}}.dump()
         << "\n";
  }
  std::vector<std::string> args{"batch", "--model", made_model(c.arch, "tiny", 31).string(), "--input",
                                (dir / "in.jsonl").string(), "--output", (dir / "out.jsonl").string(), "--acts",
                                (dir / "out.h5").string(), "--hooks", "blocks.*.hook_resid_post", "--max-new-tokens",
                                std::to_string(kNew), "--diffusion-mode", c.mode, "--diffusion-capture", "all",
                                "--batch-size", "2", "--seed", "3"};
  args.insert(args.end(), c.extra.begin(), c.extra.end());
  if (c.arch == "llada") args.insert(args.end(), {"--block-length", std::to_string(kBlock)});
  else if (c.mode != "exact") args.insert(args.end(), {"--block-size", std::to_string(kBlock)});
  if (c.refresh_every > 0) args.insert(args.end(), {"--refresh-every", std::to_string(c.refresh_every)});
  const auto run = run_sonde(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto h5 = dir / "out.h5";
  const Rows rows = read_rows(h5);
  ASSERT_EQ(rows.acts.at(kHooks[0]).shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(rows.size()), kHidden}));

  // /steps: per (prompt, step) the block and the slots the forward computed.
  const auto sp = as_ints(read_dataset(h5, "/steps/prompt_idx")), ss = as_ints(read_dataset(h5, "/steps/step"));
  const auto sb = as_ints(read_dataset(h5, "/steps/block")), sn = as_ints(read_dataset(h5, "/steps/n_recomputed"));
  // A cache is the micro-batch's (prompts 0 and 1, then 2): a finished row (block -1) waits while
  // the other works, so the cached range is the highest block of the micro-batch at that step.
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> block, recomputed, block_start;
  for (std::size_t i = 0; i < sp.size(); ++i) {
    recomputed[{sp[i], ss[i]}] = sn[i];
    for (std::int64_t q = sp[i] / 2 * 2; q < sp[i] / 2 * 2 + 2; ++q) {
      auto& b = block.try_emplace({q, ss[i]}, -1).first->second;
      b = std::max(b, sb[i]);
    }
  }
  for (const auto& [key, b] : block) {
    const bool starts = key.second == 0 || block.at({key.first, key.second - 1}) != b;
    block_start[key] = starts ? key.second : block_start.at({key.first, key.second - 1});
  }
  // The latest refresh: the block's first step, or with --refresh-every N its step N, 2N, ...
  const auto refreshed_at = [&](std::int64_t p, std::int64_t step) {
    const std::int64_t s0 = block_start.at({p, step});
    return c.refresh_every > 0 ? s0 + (step - s0) / c.refresh_every * c.refresh_every : s0;
  };

  const bool cached = c.mode == "block-cache" || c.mode == "dual-cache";
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::size_t> at;  // (prompt, pos, step) -> row
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> n_rows, n_fresh;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    at[{rows.prompt[i], rows.pos[i], rows.step[i]}] = i;
    ++n_rows[{rows.prompt[i], rows.step[i]}];
    n_fresh[{rows.prompt[i], rows.step[i]}] += rows.fresh[i];
  }
  // Every real slot at every step, fresh exactly for the slots the step computed.
  ASSERT_EQ(n_rows.size(), recomputed.size());
  for (const auto& [key, n] : n_rows) {
    const std::int64_t len = lengths[static_cast<std::size_t>(key.first)];
    EXPECT_EQ(n, len + kNew) << "prompt " << key.first << " step " << key.second;
    EXPECT_EQ(n_fresh.at(key), recomputed.at(key)) << "prompt " << key.first << " step " << key.second;
  }
  std::int64_t stale = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t p = rows.prompt[i], pos = rows.pos[i], step = rows.step[i];
    SCOPED_TRACE(::testing::Message() << "prompt " << p << " pos " << pos << " step " << step);
    const std::int64_t len = lengths[static_cast<std::size_t>(p)], b = block.at({p, step});
    const bool refresh = refreshed_at(p, step) == step;
    const std::int64_t lo = len + b * kBlock;  // the block's first slot, unpadded
    const std::int64_t shift = c.arch == "dream" ? 1 : 0;  // Dream's slot lo is predicted from lo - 1
    bool computed = !cached || refresh || pos >= lo - shift;
    if (c.mode == "dual-cache" && !refresh) computed = computed && pos < lo + kBlock;
    ASSERT_EQ(rows.fresh[i], computed ? 1 : 0);
    if (rows.kind[i] == 4) { EXPECT_EQ(rows.fresh[i], 1); }  // committed slots are always computed
    if (computed) {
      EXPECT_EQ(rows.computed[i], step);
      continue;
    }
    ++stale;
    // Served from the cache: the values of the latest refresh, where that slot was fresh.
    ASSERT_EQ(rows.computed[i], refreshed_at(p, step));
    const std::size_t src = at.at({p, pos, rows.computed[i]});
    ASSERT_EQ(rows.fresh[src], 1);
    for (const auto& h : kHooks) {
      const Array& a = rows.acts.at(h);
      const auto row = [&](std::size_t k) {
        const auto first = a.values.begin() + static_cast<std::ptrdiff_t>(k) * kHidden;
        return std::vector<double>(first, first + kHidden);
      };
      ASSERT_TRUE(row(i) == row(src)) << h;
    }
  }
  if (cached) EXPECT_GT(stale, 0);
  else EXPECT_EQ(stale, 0);
}

const Case kCases[] = {
    {"Exact", "exact", {"--steps", "8"}},
    {"Block", "block", {"--steps", "8"}},
    {"BlockCache", "block-cache", {"--steps", "8"}},
    {"DualCache", "dual-cache", {"--steps", "8"}},
    {"DualCacheTokensPerStep", "dual-cache", {"--tokens-per-step", "3"}},
    {"BlockCacheThreshold", "block-cache", {"--alg", "confidence_threshold", "--threshold", "0.9"}},
    {"DualCacheRefreshEvery3", "dual-cache", {"--tokens-per-step", "1"}, 3},  // refreshes at steps 0, 3 of a block
    {"LladaExact", "exact", {"--steps", "8"}, 0, "llada"},
    {"LladaBlockCache", "block-cache", {"--steps", "8"}, 0, "llada"},
    {"LladaDualCache", "dual-cache", {"--steps", "8"}, 0, "llada"},
    {"LladaDualCacheThreshold", "dual-cache", {"--threshold", "0.9"}, 0, "llada"},
};

INSTANTIATE_TEST_SUITE_P(Modes, CaptureFresh, ::testing::ValuesIn(kCases), [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace sonde::test
