// sonde batch with --hooks/--acts killed with SIGKILL at random moments and resumed each time:
// the final results file and every HDF5 dataset equal an uninterrupted run's, exactly. A kill
// before the first checkpoint restarts cleanly.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "spawn.h"
#include "test_paths.h"

#include <csignal>
#include <fstream>
#include <random>
#include <set>
#include <thread>

namespace sonde::test {
namespace {

const char* kQwen = "tiny-qwen2-float32-v2048";

std::vector<std::string> args_for(const std::filesystem::path& dir, const std::string& tag) {
  return {"batch", "--model", (shared_dir() / "golden/models" / kQwen).string(), "--input", (dir / "in.jsonl").string(),
          "--output", (dir / (tag + ".jsonl")).string(), "--acts", (dir / (tag + ".h5")).string(), "--hooks",
          "blocks.*.hook_resid_post,hook_embed", "--max-new-tokens", "8", "--batch-size", "4",
          "--checkpoint-every", "8", "--temperature", "0.8", "--seed", "5"};
}

const std::vector<std::string> kDatasets{"/acts/hook_embed", "/acts/blocks.0.hook_resid_post",
                                         "/acts/blocks.1.hook_resid_post", "/rows/prompt_idx", "/rows/pos",
                                         "/rows/token_id", "/rows/step", "/rows/kind", "/prompts/prompt_idx",
                                         "/prompts/row_start", "/prompts/row_count", "/prompts/seed",
                                         "/prompts/token_ids"};

TEST(BatchKill, SigkillAtRandomMomentsThenResumeEqualsAnUninterruptedRun) {
  SONDE_REQUIRE_SHARED(std::string("golden/models/") + kQwen);
  const auto dir = temp_dir();
  {
    std::ofstream in(dir / "in.jsonl");
    for (int i = 0; i < 1500; ++i)
      in << nlohmann::json{{"id", "q" + std::to_string(i)}, {"ids", {i % 2000, 7, 300 + i % 50, 9}}}.dump() << "\n";
  }
  const Child ref = spawn_sonde(args_for(dir, "ref"), dir / "ref.log");
  ASSERT_EQ(wait_child(ref), 0) << read_text(dir / "ref.log");

  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_ms(30, 300);
  int kills = 0;
  bool resume = false, finished = false;
  for (int attempt = 0; attempt < 30; ++attempt) {
    auto args = args_for(dir, "run");
    if (resume) args.push_back("--resume");
    const Child c = spawn_sonde(args, dir / "run.log");
    // The first kill lands before any checkpoint could be written.
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt == 0 ? 2 : delay_ms(rng)));
    send_signal(c, SIGKILL);
    const int code = wait_child(c);
    if (code == 0) {
      finished = true;
      break;
    }
    ASSERT_EQ(code, 128 + SIGKILL) << read_text(dir / "run.log");
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
  EXPECT_EQ(ids.size(), 1500u);
  for (const auto& d : kDatasets) {
    const Array got = read_dataset(dir / "run.h5", d), want = read_dataset(dir / "ref.h5", d);
    EXPECT_EQ(got.shape, want.shape) << d;
    EXPECT_TRUE(got.values == want.values) << d << " differs from the uninterrupted run";
  }
}

}  // namespace
}  // namespace sonde::test
