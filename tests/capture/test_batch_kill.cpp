// sonde batch with --hooks/--acts killed with SIGKILL at random moments and resumed each time:
// the final results file and every HDF5 dataset equal an uninterrupted run's, exactly. A kill
// before the first checkpoint restarts cleanly.
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
#include <random>
#include <set>
#include <thread>

namespace sonde::test {
namespace {

std::vector<std::string> args_for(const std::filesystem::path& dir, const std::string& tag) {
  return {"batch", "--model", made_model("qwen2", "tiny", 31).string(), "--input", (dir / "in.jsonl").string(),
          "--output", (dir / (tag + ".jsonl")).string(), "--acts", (dir / (tag + ".h5")).string(), "--hooks",
          "blocks.*.hook_resid_post,hook_embed", "--max-new-tokens", "8", "--batch-size", "4",
          "--checkpoint-every", "8", "--temperature", "0.8", "--seed", "5"};
}

const std::vector<std::string> kDatasets{"/acts/hook_embed", "/acts/blocks.0.hook_resid_post",
                                         "/acts/blocks.1.hook_resid_post", "/rows/prompt_idx", "/rows/pos",
                                         "/rows/token_id", "/rows/step", "/rows/kind", "/prompts/prompt_idx",
                                         "/prompts/row_start", "/prompts/row_count", "/prompts/seed",
                                         "/prompts/token_ids"};

std::int64_t lines_in(const std::filesystem::path& file) {
  const std::string text = read_text(file);
  return static_cast<std::int64_t>(std::count(text.begin(), text.end(), '\n'));
}

// Kills the run once its results file holds `target` lines, then `jitter` later: the kill
// follows the run's progress, not a clock (a fast machine finishes a clock-timed run before the
// kill). Returns the exit code (0 if the run finished first).
int kill_at_line(const Child& c, const std::filesystem::path& results, std::int64_t target,
                 std::chrono::milliseconds jitter) {
  for (;;) {
    if (const auto code = poll_child(c)) return *code;
    if (lines_in(results) >= target) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  std::this_thread::sleep_for(jitter);
  send_signal(c, SIGKILL);
  return wait_child(c);
}

TEST(BatchKill, SigkillAtRandomMomentsThenResumeEqualsAnUninterruptedRun) {
  const auto dir = temp_dir();
  const std::int64_t n = scaled(1500, 300);  // SONDE_TEST_SCALE: each kill still lands mid-run
  {
    std::ofstream in(dir / "in.jsonl");
    for (int i = 0; i < n; ++i)
      in << nlohmann::json{{"id", "q" + std::to_string(i)}, {"ids", {i % 2000, 7, 300 + i % 50, 9}}}.dump() << "\n";
  }
  const Child ref = spawn_sonde(args_for(dir, "ref"), dir / "ref.log");
  ASSERT_EQ(wait_child(ref), 0) << read_text(dir / "ref.log");

  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> ahead(0.05, 0.35);  // of the prompts still to come
  std::uniform_int_distribution<int> jitter_ms(0, 20);
  int kills = 0;
  bool resume = false, finished = false;
  for (int attempt = 0; attempt < 30; ++attempt) {
    auto args = args_for(dir, "run");
    if (resume) args.push_back("--resume");
    const std::int64_t had = std::filesystem::exists(dir / "run.jsonl") ? lines_in(dir / "run.jsonl") : 0;
    const Child c = spawn_sonde(args, dir / "run.log");
    int code = 0;
    if (attempt == 0) {  // the first kill lands before any checkpoint could be written
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      send_signal(c, SIGKILL);
      code = wait_child(c);
    } else {
      const auto target = had + 1 + static_cast<std::int64_t>(ahead(rng) * static_cast<double>(n - had));
      code = kill_at_line(c, dir / "run.jsonl", target, std::chrono::milliseconds(jitter_ms(rng)));
    }
    // A kill that lands after the run marked its file complete, while the process exits, leaves
    // a finished run: the next --resume says so (exit 2) and that is the end.
    const std::string log = read_text(dir / "run.log");
    if (code == 0 || (resume && code == 2 && log.find("there is nothing to resume") != std::string::npos)) {
      finished = true;
      break;
    }
    ASSERT_EQ(code, 128 + SIGKILL) << log;
    ++kills;
    resume = true;  // with nothing on disk yet, --resume starts afresh
  }
  if (!finished) {  // let the last resumed run finish
    auto args = args_for(dir, "run");
    args.push_back("--resume");
    const Child last = spawn_sonde(args, dir / "run.log");
    ASSERT_EQ(wait_child(last), 0) << read_text(dir / "run.log");
  }
  EXPECT_GE(kills, 3);

  const std::string results = read_text(dir / "run.jsonl");
  EXPECT_EQ(results, read_text(dir / "ref.jsonl"));
  std::set<std::string> ids;
  std::istringstream lines(results);
  for (std::string l; std::getline(lines, l);) EXPECT_TRUE(ids.insert(nlohmann::json::parse(l)["id"]).second) << l;
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(n));
  for (const auto& d : kDatasets) {
    const Array got = read_dataset(dir / "run.h5", d), want = read_dataset(dir / "ref.h5", d);
    EXPECT_EQ(got.shape, want.shape) << d;
    EXPECT_TRUE(got.values == want.values) << d << " differs from the uninterrupted run";
  }
}

}  // namespace
}  // namespace sonde::test
