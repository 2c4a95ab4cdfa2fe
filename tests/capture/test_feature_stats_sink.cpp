// The features sink (--feature-stats, docs/sae.md "Feature dashboards") resumed: after a SIGKILL
// and --resume the file holds the bits of an uninterrupted run (every statistic, the top
// contexts, the prompts, the mark). Its values against a brute-force pass are
// tests/python/test_sae.py's; data-parallel runs are tests/mpi/dp_batch_test.sh's "features".
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "run_sonde.h"
#include "spawn.h"
#include "test_paths.h"
#include "test_scale.h"

#include <cmath>
#include <cstring>
#include <fstream>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;
const std::string kHook = "blocks.1.hook_resid_post.hook_sae_acts_post";  // tests/data/sae/topk_flat's

// Bit-equal, NaN where the other has NaN (top_value past a feature's entries, mean_active).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(FeatureStatsSink, ASigkillThenResumeGivesTheBitsOfAnUninterruptedRun) {
  const auto dir = temp_dir();
  const auto model = dir / "m";
  ASSERT_EQ(run_sonde({"make-model", "--arch", "qwen2", "--preset", "tiny", "--seed", "3", "--out", model.string()}).exit_code, 0);
  const auto n = scaled(400, 100);  // SONDE_TEST_SCALE (test_scale.h): the kill at the same fraction
  {
    std::ofstream in(dir / "in.jsonl");
    for (int i = 0; i < n; ++i)
      in << nlohmann::json{{"id", "q" + std::to_string(i)}, {"ids", {1 + i % 1900, 7, 300 + i % 50, 9, 11}}}.dump() << "\n";
  }
  const auto args_for = [&](const char* tag) {
    return std::vector<std::string>{"batch", "--model", model.string(), "--input", (dir / "in.jsonl").string(), "--output",
                                    (dir / (std::string(tag) + ".jsonl")).string(), "--sae", (data_dir() / "sae" / "topk_flat").string(),
                                    "--hooks", kHook, "--feature-stats", (dir / (std::string(tag) + ".h5")).string(),
                                    "--max-new-tokens", "4", "--batch-size", "4", "--temperature", "0.9", "--seed", "2",
                                    "--checkpoint-every", "8"};
  };
  const auto ref = run_sonde(args_for("ref"));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  auto args = args_for("run");
  // Late, so that much of the final top lists comes from the state read back.
  ASSERT_TRUE(kill_at_lines(args, dir / "run.jsonl", n * 3 / 4, dir / "run.log"));
  ASSERT_EQ(read_int_attr(dir / "run.h5", "complete"), 0);
  const auto killed_at = as_ints(read_dataset(dir / "run.h5", "progress/mark")).at(0);
  EXPECT_GT(killed_at, 0) << "no checkpoint before the kill";
  EXPECT_LT(killed_at, n);
  args.push_back("--resume");
  const auto r = run_sonde(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "run.jsonl"), read_text(dir / "ref.jsonl"));
  EXPECT_EQ(read_int_attr(dir / "run.h5", "complete"), 1);
  EXPECT_EQ(as_ints(read_dataset(dir / "run.h5", "features/" + kHook + "/rows")).at(0),
            as_ints(read_dataset(dir / "ref.h5", "features/" + kHook + "/rows")).at(0));
  std::vector<std::string> paths{"progress/mark", "prompts/prompt_idx", "prompts/id_bytes", "prompts/id_offsets"};
  for (const char* d : {"rows", "n_fire", "frequency", "sum", "mean_active", "max", "hist", "top_value", "top_row",
                        "top_prompt_idx", "top_pos", "top_step", "top_context"})
    paths.push_back("features/" + kHook + "/" + d);
  for (const auto& p : paths) {
    const Array got = read_dataset(dir / "run.h5", p), want = read_dataset(dir / "ref.h5", p);
    EXPECT_EQ(got.shape, want.shape) << p;
    EXPECT_TRUE(same_bits(got.values, want.values)) << p;
  }
  // The statistics are of the run's rows: some features fired, with contexts.
  const auto n_fire = as_ints(read_dataset(dir / "ref.h5", "features/" + kHook + "/n_fire"));
  std::int64_t fired = 0;
  for (auto n : n_fire) fired += n;
  EXPECT_GT(fired, 0);
}

}  // namespace
}  // namespace sonde::test
