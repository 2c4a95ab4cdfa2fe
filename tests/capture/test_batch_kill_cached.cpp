// sonde batch of a Dream model in each diffusion mode (exact, block, block-cache, dual-cache) with
// --hooks/--acts, killed with SIGKILL as its results grow and resumed each time: the results file
// and every HDF5 dataset, /steps and /rows/fresh and computed_step included, equal an uninterrupted
// run's exactly. The cache (and the rows kept for --diffusion-capture all) lives within one
// generation, so a resumed run recomputes it from the block's refresh like any run.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "made_models.h"
#include "spawn.h"
#include "test_paths.h"
#include "test_scale.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

namespace sonde::test {
namespace {

// 240 prompts in the plain build; SONDE_TEST_SCALE (test_scale.h) runs fewer under the sanitizers.
// At 48 and above each quarter of the run still holds more than one --checkpoint-every 8, so every
// kill lands after a commit with work left to resume, in all three prompt lengths.
int cached_kill_prompts() { return static_cast<int>(scaled(240, 48)); }

std::vector<std::string> cached_args_for(const std::filesystem::path& dir, const std::string& tag, const std::string& mode) {
  std::vector<std::string> args{
      "batch", "--model", made_model("dream", "tiny", 31).string(), "--input", (dir / "in.jsonl").string(),
      "--output", (dir / (tag + ".jsonl")).string(), "--acts", (dir / (tag + ".h5")).string(), "--hooks",
      "blocks.*.hook_resid_post", "--max-new-tokens", "8", "--steps", "8", "--diffusion-mode", mode,
      "--diffusion-capture", "all", "--batch-size", "4", "--checkpoint-every", "8", "--temperature", "0.8", "--seed", "5"};
  if (mode != "exact") args.insert(args.end(), {"--block-size", "4"});
  return args;
}

const std::vector<std::string> kCachedDatasets{"/acts/blocks.0.hook_resid_post", "/acts/blocks.1.hook_resid_post",
                                         "/rows/prompt_idx", "/rows/pos", "/rows/token_id", "/rows/step", "/rows/kind",
                                         "/rows/fresh", "/rows/computed_step",
                                         "/steps/block", "/steps/n_recomputed", "/steps/n_transfer", "/prompts/token_ids"};

std::int64_t cached_lines_in(const std::filesystem::path& file) {
  const std::string text = read_text(file);
  return static_cast<std::int64_t>(std::count(text.begin(), text.end(), '\n'));
}

class CachedBatchKill : public ::testing::TestWithParam<std::string> {};

TEST_P(CachedBatchKill, SigkillThenResumeEqualsAnUninterruptedRun) {
  const auto dir = temp_dir();
  const int n_prompts = cached_kill_prompts();
  {
    std::ofstream in(dir / "in.jsonl");
    for (int i = 0; i < n_prompts; ++i)  // lengths 2..4: batches left-pad
      in << nlohmann::json{{"id", "q" + std::to_string(i)}, {"ids", std::vector<int>(static_cast<std::size_t>(2 + i % 3), 5 + i % 900)}}.dump()
         << "\n";
  }
  const Child ref = spawn_sonde(cached_args_for(dir, "ref", GetParam()), dir / "ref.log");
  ASSERT_EQ(wait_child(ref), 0) << read_text(dir / "ref.log");

  int kills = 0;
  bool finished = false;
  for (int attempt = 0; attempt < 3 && !finished; ++attempt) {
    auto args = cached_args_for(dir, "run", GetParam());
    if (attempt > 0) args.push_back("--resume");
    const Child c = spawn_sonde(args, dir / "run.log");
    const std::int64_t target = (attempt + 1) * n_prompts / 4;  // kill a quarter further each time
    int code = 0;
    for (;;) {
      if (const auto done = poll_child(c)) {
        code = *done;
        finished = true;
        break;
      }
      if (std::filesystem::exists(dir / "run.jsonl") && cached_lines_in(dir / "run.jsonl") >= target) {
        send_signal(c, SIGKILL);
        code = wait_child(c);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (finished) {
      ASSERT_EQ(code, 0) << read_text(dir / "run.log");
      break;
    }
    ASSERT_EQ(code, 128 + SIGKILL) << read_text(dir / "run.log");
    ++kills;
  }
  if (!finished) {
    auto args = cached_args_for(dir, "run", GetParam());
    args.push_back("--resume");
    const Child last = spawn_sonde(args, dir / "run.log");
    ASSERT_EQ(wait_child(last), 0) << read_text(dir / "run.log");
  }
  EXPECT_GE(kills, 2);
  EXPECT_EQ(read_text(dir / "run.jsonl"), read_text(dir / "ref.jsonl"));
  EXPECT_EQ(cached_lines_in(dir / "run.jsonl"), n_prompts);
  for (const auto& d : kCachedDatasets) {
    const Array got = read_dataset(dir / "run.h5", d), want = read_dataset(dir / "ref.h5", d);
    EXPECT_EQ(got.shape, want.shape) << d;
    EXPECT_TRUE(got.values == want.values) << d << " differs from the uninterrupted run";
  }
  const auto fresh = as_ints(read_dataset(dir / "ref.h5", "/rows/fresh"));
  const auto reused = std::count(fresh.begin(), fresh.end(), 0);
  if (GetParam() == "block-cache" || GetParam() == "dual-cache") EXPECT_GT(reused, 0) << "no row was served from the cache";
  else EXPECT_EQ(reused, 0) << "a mode without a cache marked rows reused";
}

INSTANTIATE_TEST_SUITE_P(Modes, CachedBatchKill, ::testing::Values("exact", "block", "block-cache", "dual-cache"),
                         [](const auto& info) {
                           const std::string& m = info.param;
                           return m == "exact" ? std::string("Exact") : m == "block" ? std::string("Block")
                                  : m == "block-cache" ? std::string("BlockCache") : std::string("DualCache");
                         });

}  // namespace
}  // namespace sonde::test
