// sonde batch and sonde generate --hooks as a user runs them, on make-model checkpoints with our
// own float64 PyTorch goldens (tests/data): results against the golden greedy tokens, bad input
// (line numbers, --skip-bad-lines, unknown hooks, existing outputs), resume after a torn results
// file and after SIGINT, and the captured rows of generate against the golden per-layer outputs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "made_models.h"
#include "run_sonde.h"
#include "spawn.h"
#include "test_paths.h"
#include "test_scale.h"

#include <algorithm>
#include <csignal>
#include <fstream>
#include <set>
#include <thread>

namespace sonde::test {
namespace {

// gen-tiny-qwen2-f32.h5 was computed for `make-model --arch qwen2 --preset tiny --seed 31`
// (test_generate_own_goldens checks make-model still makes that checkpoint).
std::filesystem::path golden() { return data_dir() / "gen-tiny-qwen2-f32.h5"; }
std::string model() { return made_model("qwen2", "tiny", 31).string(); }
std::vector<std::int64_t> ints(const Array& a) { return {a.values.begin(), a.values.end()}; }

void write_lines(const std::filesystem::path& f, const std::vector<std::string>& lines) {
  std::ofstream out(f);
  for (const auto& l : lines) out << l << "\n";
}

std::vector<nlohmann::json> read_results(const std::filesystem::path& f) {
  std::vector<nlohmann::json> out;
  std::ifstream in(f);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

nlohmann::json ids_line(const std::string& id, const std::vector<std::int64_t>& ids) { return {{"id", id}, {"ids", ids}}; }

std::vector<std::string> batch_args(const std::filesystem::path& in, const std::filesystem::path& out,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"batch", "--model", model(), "--input", in.string(), "--output", out.string(),
                             "--max-new-tokens", "16", "--temperature", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Many short requests from the golden prompts, for runs long enough to interrupt.
std::vector<std::string> many_requests(int n) {
  const std::vector<std::int64_t> p{776, 1012, 1190, 1500, 1342};
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) {
    auto ids = p;
    ids[0] = i % 2000;  // distinct prompts (ids below the special 2046, 2047)
    ids[1] = i / 2000;
    lines.push_back(ids_line("r" + std::to_string(i), ids).dump());
  }
  return lines;
}

TEST(BatchCli, ResultsEqualTheGoldenGreedyTokensAndEachIdComesOnce) {
  const auto dir = temp_dir();
  const auto p5 = ints(read_dataset(golden(), "ar_greedy/batch3/row0/prompt"));
  const auto p19 = ints(read_dataset(golden(), "ar_greedy/batch3/row1/prompt"));
  const auto t5 = ints(read_dataset(golden(), "ar_greedy/batch3/row0/tokens"));
  const auto t19 = ints(read_dataset(golden(), "ar_greedy/batch3/row1/tokens"));
  ASSERT_EQ(p5.size(), 4u);
  ASSERT_EQ(p19.size(), 11u);
  auto short_line = ids_line("c", p5);
  short_line["max_new_tokens"] = 4;
  write_lines(dir / "in.jsonl", {ids_line("a", p5).dump(), ids_line("b", p19).dump(), short_line.dump()});
  const auto r = run_sonde(batch_args(dir / "in.jsonl", dir / "out.jsonl", {"--batch-size", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto res = read_results(dir / "out.jsonl");
  ASSERT_EQ(res.size(), 3u);
  EXPECT_EQ(res[0]["id"], "a");
  EXPECT_EQ(res[1]["id"], "b");
  EXPECT_EQ(res[2]["id"], "c");
  EXPECT_EQ(res[0]["completion_ids"].get<std::vector<std::int64_t>>(), t5);
  EXPECT_EQ(res[1]["completion_ids"].get<std::vector<std::int64_t>>(), t19);
  EXPECT_EQ(res[2]["completion_ids"].get<std::vector<std::int64_t>>(), std::vector<std::int64_t>(t5.begin(), t5.begin() + 4));
  EXPECT_EQ(res[0]["prompt_tokens"], 4);
  EXPECT_EQ(res[1]["prompt_tokens"], 11);
  EXPECT_EQ(res[2]["completion_tokens"], 4);
  EXPECT_EQ(res[0]["finish_reason"], "length");
  EXPECT_NE(r.output.find("done: 3 prompts"), std::string::npos) << r.output;
}

TEST(BatchCli, MalformedLinesAreReportedWithTheirLineNumbers) {
  const auto dir = temp_dir();
  write_lines(dir / "in.jsonl", {ids_line("a", {1, 2, 3}).dump(), "{not json", ids_line("b", {4, 5}).dump(),
                                 R"({"id": "x"})", ids_line("a", {7}).dump(), R"({"id": "y", "ids": [1], "colour": 3})"});
  auto r = run_sonde(batch_args(dir / "in.jsonl", dir / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("line 2"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "out.jsonl"));

  r = run_sonde(batch_args(dir / "in.jsonl", dir / "out.jsonl", {"--skip-bad-lines"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* l : {"line 2", "line 4", "line 5: id \"a\" repeats line 1", "line 6: unknown field \"colour\""})
    EXPECT_NE(r.output.find(l), std::string::npos) << l << "\n" << r.output;
  const auto res = read_results(dir / "out.jsonl");
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0]["id"], "a");
  EXPECT_EQ(res[1]["id"], "b");
}

TEST(BatchCli, ExistingOutputsAreRefusedWithoutResumeOrOverwrite) {
  const auto dir = temp_dir();
  write_lines(dir / "in.jsonl", {ids_line("a", {1, 2, 3}).dump()});
  write_lines(dir / "out.jsonl", {"precious"});
  auto r = run_sonde(batch_args(dir / "in.jsonl", dir / "out.jsonl"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // core's policy and words (check_outputs), the flag named by the command line
  EXPECT_NE(r.output.find("--output: " + (dir / "out.jsonl").string() + " exists (resume to continue that run, or overwrite"),
            std::string::npos) << r.output;
  EXPECT_EQ(read_text(dir / "out.jsonl"), "precious\n");
  r = run_sonde(batch_args(dir / "in.jsonl", dir / "out.jsonl", {"--overwrite"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_results(dir / "out.jsonl").size(), 1u);
}

TEST(BatchCli, UnknownHooksSuggestTheClosestNames) {
  const auto dir = temp_dir();
  write_lines(dir / "in.jsonl", {ids_line("a", {1, 2, 3}).dump()});
  const auto r = run_sonde(batch_args(dir / "in.jsonl", dir / "out.jsonl",
                                      {"--hooks", "blocks.0.hook_resid_psot", "--acts", (dir / "a.h5").string()}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("blocks.0.hook_resid_post"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "out.jsonl"));
}

TEST(BatchCli, ResumeAfterATornResultsFileEqualsAnUninterruptedRun) {
  const auto dir = temp_dir();
  write_lines(dir / "in.jsonl", many_requests(10));
  auto r = run_sonde(batch_args(dir / "in.jsonl", dir / "full.jsonl", {"--batch-size", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string full = read_text(dir / "full.jsonl");
  // A crash in the middle of writing line 5: four whole lines and half a line.
  std::size_t cut = 0;
  for (int i = 0; i < 4; ++i) cut = full.find('\n', cut) + 1;
  { std::ofstream(dir / "out.jsonl", std::ios::binary) << full.substr(0, cut + 10); }
  r = run_sonde(batch_args(dir / "in.jsonl", dir / "out.jsonl", {"--batch-size", "3", "--resume"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "out.jsonl"), full);
}

TEST(BatchCli, SigintFinishesTheMicroBatchAndLeavesAResumableRun) {
  const auto dir = temp_dir();
  // 1500 requests: 1,300 still to come when the signal is sent, over a second of work (3000 made
  // the test 15 s of the suite for the same check; SONDE_TEST_SCALE, test_scale.h, takes fewer).
  const auto n = static_cast<int>(scaled(1500, 400));
  write_lines(dir / "in.jsonl", many_requests(n));
  const auto args = batch_args(dir / "in.jsonl", dir / "out.jsonl", {"--batch-size", "2"});
  auto r = run_sonde(batch_args(dir / "in.jsonl", dir / "full.jsonl", {"--batch-size", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Child c = spawn_sonde(args, dir / "log.txt");
  // SIGINT once 200 of the n results are out (progress, not a clock: a fast machine would
  // finish a run before a fixed delay).
  std::optional<int> ended;
  while (!(ended = poll_child(c))) {
    const std::string out = read_text(dir / "out.jsonl");
    if (std::count(out.begin(), out.end(), '\n') >= 200) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  if (!ended) send_signal(c, SIGINT);
  const int code = ended ? *ended : wait_child(c);
  const std::string log = read_text(dir / "log.txt");
  if (code == 0) GTEST_SKIP() << "the run finished before SIGINT arrived";
  ASSERT_EQ(code, 130) << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  const auto partial = read_results(dir / "out.jsonl");
  EXPECT_LT(partial.size(), static_cast<std::size_t>(n));
  auto resumed = args;
  resumed.push_back("--resume");
  r = run_sonde(resumed);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "out.jsonl"), read_text(dir / "full.jsonl"));
}

// small-qwen2-f32.h5: `make-model --arch qwen2 --preset small --seed 11`, 4 layers, hidden 256.
TEST(GenerateCapture, RowsInTheFileEqualTheGoldenLayersAndAForwardOfTheCompletion) {
  const auto dir = temp_dir();
  const auto fwd_golden = data_dir() / "small-qwen2-f32.h5";
  const std::string small = made_model("qwen2", "small", 11).string();
  const auto p = ints(read_dataset(fwd_golden, "forward/p7/input_ids"));
  ASSERT_EQ(p.size(), 7u);
  const auto out = dir / "g.h5";
  auto r = run_sonde({"generate", "--model", small, "--ids", join_ids(p), "--max-new-tokens", "4", "--temperature", "0",
                      "--hooks", "blocks.*.hook_resid_post", "--out", out.string(), "--positions", "all"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rows 0..6: the prompt at prefill, against the golden per-layer outputs.
  const Array golden_resid = read_dataset(fwd_golden, "forward/p7/resid_post");
  for (int layer = 0; layer < 4; ++layer) {
    const Array acts = read_dataset(out, "/acts/blocks." + std::to_string(layer) + ".hook_resid_post");
    ASSERT_EQ(acts.shape, (std::vector<std::int64_t>{11, 256}));
    Array prompt_rows, want;
    prompt_rows.shape = want.shape = {7, 256};
    prompt_rows.values.assign(acts.values.begin(), acts.values.begin() + 7 * 256);
    want.values.assign(golden_resid.values.begin() + layer * 7 * 256, golden_resid.values.begin() + (layer + 1) * 7 * 256);
    EXPECT_LE(normalised_error(prompt_rows, want), 1e-4) << "layer " << layer;
  }
  EXPECT_EQ(ints(read_dataset(out, "/rows/step")), (std::vector<std::int64_t>{-1, -1, -1, -1, -1, -1, -1, 0, 1, 2, 3}));
  EXPECT_EQ(ints(read_dataset(out, "/rows/pos")), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  const auto ids = ints(read_dataset(out, "/rows/token_id"));
  ASSERT_EQ(ids.size(), 11u);
  EXPECT_EQ(std::vector<std::int64_t>(ids.begin(), ids.begin() + 7), p);
  // Rows 7..10 against `sonde forward` over prompt + the 4 generated tokens.
  r = run_sonde({"forward", "--model", small, "--ids", join_ids(ids), "--hooks", "blocks.3.hook_resid_post", "--out",
                 (dir / "f.h5").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Array ref = read_dataset(dir / "f.h5", "/acts/blocks.3.hook_resid_post");
  const Array got = read_dataset(out, "/acts/blocks.3.hook_resid_post");
  EXPECT_LE(normalised_error(got, ref), 1e-4);
}

}  // namespace
}  // namespace sonde::test
