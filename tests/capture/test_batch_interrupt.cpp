// Ctrl-C on `sonde batch --acts` (reliability issue, item 1): the interrupt finishes the micro-
// batch and checkpoints, and the activation file is left resumable (not marked complete), so
// `--resume` continues it to files equal to an uninterrupted run's. Runs on a make-model
// checkpoint: needs nothing from ../shared.
#include <gtest/gtest.h>

#include "h5_read.h"
#include "run_sonde.h"
#include "spawn.h"
#include "test_paths.h"
#include "test_scale.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

namespace sonde::test {
namespace {

std::vector<std::string> interrupt_batch_args(const std::string& model, const std::filesystem::path& dir, const std::string& name) {
  return {"batch", "--model", model, "--input", (dir / "in.jsonl").string(), "--output",
          (dir / (name + ".jsonl")).string(), "--acts", (dir / (name + ".h5")).string(), "--hooks",
          "blocks.0.hook_resid_post,blocks.1.mlp.hook_post", "--max-new-tokens", "3", "--temperature", "0",
          "--batch-size", "2", "--checkpoint-every", "4"};
}

// A batch run on 1500 tiny prompts, its uninterrupted twin made first. The signal comes after 100
// results, so 1,400 are still to come: over a second of writing in a Release build (several under
// the sanitizers) against the milliseconds the signal and a second run's refusal take. 4000 made
// these tests 77 s of the suite for no more reach (each runs the batch about twice). Under
// SONDE_TEST_SCALE (test_scale.h) a quarter: still seconds of slower, sanitized work after the signal.
long long interrupt_prompts() { return scaled(1500, 300); }

std::string prepare(const std::filesystem::path& dir) {
  const auto model = dir / "model";
  auto r = run_sonde({"make-model", "--arch", "qwen2", "--preset", "tiny", "--seed", "5", "--out", model.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  {
    std::ofstream in(dir / "in.jsonl");
    for (long long i = 0, n = interrupt_prompts(); i < n; ++i) in << "{\"id\": " << i << ", \"ids\": [" << (i % 250) + 1 << ", " << i / 250 + 1 << ", 7]}\n";
  }
  r = run_sonde(interrupt_batch_args(model.string(), dir, "full"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return model.string();
}

// Starts the "part" run and waits until it has committed 100 results (progress, not a clock).
Child start_part(const std::vector<std::string>& args, const std::filesystem::path& dir, std::optional<int>& ended) {
  const Child c = spawn_sonde(args, dir / "log.txt");
  while (!(ended = poll_child(c))) {
    const std::string out = read_text(dir / "part.jsonl");
    if (std::count(out.begin(), out.end(), '\n') >= 100) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return c;
}

void interrupt_and_resume(int sig) {
  const auto dir = temp_dir() / ("signal-" + std::to_string(sig));
  std::filesystem::create_directories(dir);
  const auto model = prepare(dir);
  const auto args = interrupt_batch_args(model, dir, "part");
  std::optional<int> ended;
  const Child c = start_part(args, dir, ended);
  if (!ended) send_signal(c, sig);
  const int code = ended ? *ended : wait_child(c);
  const std::string log = read_text(dir / "log.txt");
  if (code == 0) GTEST_SKIP() << "the run finished before the signal arrived";
  ASSERT_EQ(code, 128 + sig) << log;
  EXPECT_NE(log.find("continue with --resume"), std::string::npos) << log;
  EXPECT_EQ(read_int_attr(dir / "part.h5", "complete"), 0) << "an interrupted file was marked complete";

  auto resumed = args;
  resumed.push_back("--resume");
  const auto r = run_sonde(resumed);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming after"), std::string::npos) << r.output;
  EXPECT_EQ(read_text(dir / "part.jsonl"), read_text(dir / "full.jsonl"));
  EXPECT_EQ(read_int_attr(dir / "part.h5", "complete"), 1);
  for (const char* ds : {"/acts/blocks.0.hook_resid_post", "/acts/blocks.1.mlp.hook_post", "/rows/token_id",
                         "/rows/prompt_idx", "/rows/pos", "/rows/step"}) {
    const Array got = read_dataset(dir / "part.h5", ds), want = read_dataset(dir / "full.h5", ds);
    EXPECT_EQ(got.shape, want.shape) << ds;
    EXPECT_EQ(got.values, want.values) << ds;
  }
}

TEST(BatchInterrupt, SigintWithActivationsLeavesAResumableRunThatEndsAsTheUninterruptedOne) { interrupt_and_resume(SIGINT); }
TEST(BatchInterrupt, SigtermAndSighupStopAsCtrlCDoes) {
  interrupt_and_resume(SIGTERM);
  interrupt_and_resume(SIGHUP);
}

// A file-size limit (ulimit -f) is a write error naming the file, not death by SIGXFSZ, and the
// message says the run continues with --resume; raising the limit and resuming completes it.
TEST(BatchInterrupt, AFileSizeLimitIsAnErrorThatSaysHowToContinue) {
  const auto dir = temp_dir();
  const auto model = prepare(dir);
  const auto args = interrupt_batch_args(model, dir, "part");
  // bash's ulimit -f counts 1024-byte blocks: 512 KiB, far less than the run writes.
  std::string cmd = "ulimit -f 512; exec '" + sonde_exe().string() + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  const int status = std::system(("bash -c \"" + cmd + "\" > '" + (dir / "log.txt").string() + "' 2>&1").c_str());
  const std::string log = read_text(dir / "log.txt");
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal\n" << log;
  EXPECT_EQ(WEXITSTATUS(status), 1) << log;
  EXPECT_NE(log.find("part."), std::string::npos) << log;
  EXPECT_NE(log.find("continue with --resume"), std::string::npos) << log;
  auto resumed = args;
  resumed.push_back("--resume");
  const auto r = run_sonde(resumed);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "part.jsonl"), read_text(dir / "full.jsonl"));
}

// A resume with other options is refused naming each option that changed, not two digests.
TEST(BatchInterrupt, AResumeWithChangedOptionsNamesTheOptions) {
  const auto dir = temp_dir();
  const auto model = prepare(dir);
  const auto args = interrupt_batch_args(model, dir, "part");
  std::optional<int> ended;
  const Child c = start_part(args, dir, ended);
  if (!ended) send_signal(c, SIGINT);
  const int code = ended ? *ended : wait_child(c);
  if (code == 0) GTEST_SKIP() << "the run finished before the signal arrived";
  ASSERT_EQ(code, 130) << read_text(dir / "log.txt");
  auto changed = args;
  for (std::size_t i = 0; i + 1 < changed.size(); ++i) {
    if (changed[i] == "--temperature") changed[i + 1] = "0.5";
    if (changed[i] == "--batch-size") changed[i + 1] = "3";
  }
  changed.push_back("--resume");
  const auto r = run_sonde(changed);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("options changed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch_size was 2, now 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("temperature was 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("now 0.5"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("sha256"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir / "part.h5"), std::string::npos) << r.output;
}

TEST(BatchInterrupt, ASecondRunOnTheSameOutputsIsRefusedWhileTheFirstWrites) {
  const auto dir = temp_dir();
  const auto model = prepare(dir);
  const auto args = interrupt_batch_args(model, dir, "part");
  std::optional<int> ended;
  const Child c = start_part(args, dir, ended);
  if (ended) GTEST_SKIP() << "the first run finished before the second started";
  auto second = args;
  second.push_back("--resume");
  const auto r = run_sonde(second);
  send_signal(c, SIGINT);
  const int first_code = wait_child(c);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is being written by another run (process " + std::to_string(c.pid) + ")"), std::string::npos)
      << r.output;
  if (first_code == 0) return;  // it finished first: nothing more to compare
  ASSERT_EQ(first_code, 130);
  // The refused run wrote nothing: the first one resumes to the uninterrupted files.
  auto resumed = args;
  resumed.push_back("--resume");
  ASSERT_EQ(run_sonde(resumed).exit_code, 0);
  EXPECT_EQ(read_text(dir / "part.jsonl"), read_text(dir / "full.jsonl"));
  const Array got = read_dataset(dir / "part.h5", "/acts/blocks.0.hook_resid_post");
  EXPECT_EQ(got.values, read_dataset(dir / "full.h5", "/acts/blocks.0.hook_resid_post").values);
}

}  // namespace
}  // namespace sonde::test
