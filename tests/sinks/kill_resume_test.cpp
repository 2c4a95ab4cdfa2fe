// Crash safety: stream_child (a stand-in for `sonde batch`) is SIGKILLed at random moments and
// resumed each time. After every kill the resumed file holds exactly the first mark.prompts
// prompts of an uninterrupted run; at the end every dataset, and the results file, equal that
// run's exactly. Also: a full disk, and stock h5py on a killed file after h5clear.
#include "h5_compare.h"
#include "stream_scenario.h"

#include <sonde/error.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace sonde::test {
namespace {

constexpr std::int64_t kPrompts = 300;
constexpr const char* kPython3 = "/usr/bin/python3";

struct Child {
  std::string path, results;
  std::int64_t every = 7;
  DType storage = DType::f32;
  bool diffusion = false;
  std::size_t queue_bytes = std::size_t{1} << 20;
  // The child sleeps this long per prompt, as a model's forward would: the run then lasts long
  // enough that random kill times land inside it however fast the sink writes.
  int pace_us = 1000;
};

pid_t spawn(const Child& c, bool resume) {
  std::vector<std::string> args{SONDE_STREAM_CHILD, c.path, c.results, std::to_string(kPrompts), std::to_string(c.every),
                                resume ? "resume" : "fresh", std::string(dtype_name(c.storage)), c.diffusion ? "1" : "0",
                                std::to_string(c.queue_bytes), std::to_string(c.pace_us)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) throw std::runtime_error("spawn failed");
  return pid;
}

// Exit code, or -signal if killed.
int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// Runs to the end; returns the exit code and how long it took.
std::pair<int, double> run_through(const Child& c, bool resume) {
  const auto t0 = std::chrono::steady_clock::now();
  const int code = wait_for(spawn(c, resume));
  return {code, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string expected_results(std::int64_t prompts) {
  std::string s;
  for (std::int64_t p = 0; p < prompts; ++p) s += result_line(p);
  return s;
}

// Spawns the child and SIGKILLs it once `fraction` of the results still to come have been
// appended (one line per prompt), then `jitter` more, so the kill lands anywhere in the
// write/checkpoint cycle. Kill points follow the child's progress, not a clock: a reference run
// timed under one load and a child run under another (ctest runs tests side by side) could
// otherwise finish before any kill. Returns the exit code (0 if the child finished first).
int kill_during(const Child& c, bool resume, double fraction, std::chrono::microseconds jitter) {
  const auto total = static_cast<double>(expected_results(kPrompts).size());
  std::error_code ec;
  const auto before = static_cast<double>(std::filesystem::exists(c.results) ? std::filesystem::file_size(c.results, ec) : 0);
  const auto target = static_cast<std::uintmax_t>(before + fraction * std::max(0.0, total - before));
  const pid_t pid = spawn(c, resume);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    const auto size = std::filesystem::file_size(c.results, ec);
    if (!ec && size >= target) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::this_thread::sleep_for(jitter);
  ::kill(pid, SIGKILL);
  return wait_for(pid);
}

std::int64_t rows_before(std::int64_t prompts) {
  std::int64_t rows = 0;
  for (std::int64_t p = 0; p < prompts; ++p) rows += static_cast<std::int64_t>(stream_prompt(p).rows.size());
  return rows;
}

// The uninterrupted run, made once per storage/diffusion choice.
struct Reference {
  std::string path;
};

const Reference& reference_for(DType storage, bool diffusion) {
  static std::map<std::pair<DType, bool>, Reference> made;
  auto& ref = made[{storage, diffusion}];
  if (!ref.path.empty()) return ref;
  const auto dir = process_temp_dir();
  Child c;
  c.storage = storage;
  c.diffusion = diffusion;
  c.path = (dir / (std::string(dtype_name(storage)) + (diffusion ? "-diff" : "") + ".h5")).string();
  c.results = c.path + ".jsonl";
  std::filesystem::remove(c.path);
  std::filesystem::remove(c.results);
  const int code = run_through(c, false).first;
  if (code != 0) throw std::runtime_error("the reference run failed with " + std::to_string(code));
  ref = {c.path};
  return ref;
}

SinkOptions resume_options(const Child& c) {
  SinkOptions o = options_for(c.path, c.storage);
  o.streaming = o.resume = true;
  o.diffusion = c.diffusion;
  return o;
}

// Resumes in this process (running h5clear if the kill left the file flagged) and drops the
// sink: the file is trimmed to its mark, which must be a prefix of the reference run.
CommitMark resume_and_check(const Child& c, const std::string& reference) {
  auto sink = make_hdf5_sink();
  const CommitMark m = sink->open(resume_options(c), stream_meta(), stream_hooks());
  sink.reset();
  EXPECT_EQ(m.rows, rows_before(m.prompts));
  EXPECT_EQ(m.results_bytes, expected_results(m.prompts).size());
  EXPECT_EQ(slurp(c.results).substr(0, m.results_bytes), expected_results(m.prompts));
  const RawFile got = read_all(c.path), want = read_all(reference);
  for (const auto& [name, g] : got) {
    if (name.rfind("/progress", 0) != 0) {
      EXPECT_TRUE(want.count(name) && is_row_prefix(g, want.at(name))) << name;
    }
  }
  EXPECT_EQ(rows_of(got.at("/rows/pos")), static_cast<hsize_t>(m.rows));
  EXPECT_EQ(rows_of(got.at("/acts/blocks.0.hook_resid_post")), static_cast<hsize_t>(m.rows));
  EXPECT_EQ(rows_of(got.at("/prompts/seed")), static_cast<hsize_t>(m.prompts));
  return m;
}

struct KillCase {
  unsigned seed;
  DType storage;
  bool diffusion;
};

class KillAndResume : public ::testing::TestWithParam<KillCase> {};

TEST_P(KillAndResume, EveryResumeIsAPrefixAndTheEndEqualsAnUninterruptedRun) {
  const auto [seed, storage, diffusion] = GetParam();
  const Reference& ref = reference_for(storage, diffusion);
  const auto dir = temp_dir();
  Child c;
  c.storage = storage;
  c.diffusion = diffusion;
  c.path = (dir / "run.h5").string();
  c.results = (dir / "results.jsonl").string();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> when(0.02, 0.6);  // of the prompts left
  // Up to one checkpoint interval of pace past the progress point.
  std::uniform_int_distribution<int> jitter(0, static_cast<int>(c.every) * c.pace_us);
  const auto kill = [&](bool resume) { return kill_during(c, resume, when(rng), std::chrono::microseconds(jitter(rng))); };
  int code = kill(false);
  std::string codes = std::to_string(code);
  int kills = code == -SIGKILL;
  std::int64_t last = 0;
  for (int attempt = 0; code != 0 && attempt < 6; ++attempt) {
    // Every other time the child resumes the killed file itself (h5clear in the child).
    if (attempt % 2 == 0 && std::filesystem::exists(c.path)) {
      const CommitMark m = resume_and_check(c, ref.path);
      EXPECT_GE(m.prompts, last) << "a resume lost committed prompts";
      last = m.prompts;
    }
    code = attempt < 4 ? kill(true) : wait_for(spawn(c, true));
    kills += code == -SIGKILL;
    codes += " " + std::to_string(code);
  }
  ASSERT_EQ(code, 0) << "exit codes: " << codes;
  // Only a kill (-9) or a finished run (0) are expected; an error exit (10, 11) is a failure.
  EXPECT_THAT(codes, ::testing::MatchesRegex("(-9 )*0")) << "exit codes: " << codes;
  EXPECT_GE(kills, 1);
  RecordProperty("kills", kills);
  EXPECT_EQ(raw_difference(read_all(c.path), read_all(ref.path)), "");
  EXPECT_EQ(slurp(c.results), expected_results(kPrompts));
  H5Reader f(c.path);
  EXPECT_EQ(f.attr_int("/", "complete"), 1);
}

INSTANTIATE_TEST_SUITE_P(Hdf5Sink, KillAndResume,
                         ::testing::Values(KillCase{1, DType::f32, false}, KillCase{2, DType::f32, false},
                                           KillCase{3, DType::bf16, false}, KillCase{4, DType::f16, true},
                                           KillCase{5, DType::f32, true}),
                         [](const auto& info) { return "seed" + std::to_string(info.param.seed); });

TEST(KillBeforeFirstCheckpoint, ResumesFromZeroAndFinishesLikeAnUninterruptedRun) {
  const Reference& ref = reference_for(DType::f32, false);
  const auto dir = temp_dir();
  Child c;
  c.every = kPrompts + 1;  // only the final checkpoint
  c.path = (dir / "run.h5").string();
  c.results = (dir / "results.jsonl").string();
  ASSERT_EQ(kill_during(c, false, 0.3, std::chrono::microseconds(0)), -SIGKILL) << "the child finished before the kill";
  EXPECT_EQ(resume_and_check(c, ref.path).prompts, 0);
  c.every = 7;
  ASSERT_EQ(run_through(c, true).first, 0);
  EXPECT_EQ(raw_difference(read_all(c.path), read_all(ref.path)), "");
  EXPECT_EQ(slurp(c.results), expected_results(kPrompts));
}

// A 4 MiB tmpfs (two 1 MiB acts chunks must fit before the first checkpoint) if this process may mount one (root); otherwise the test is skipped, and the
// one-shot FullDisk test (RLIMIT_FSIZE) still covers the error path.
struct SmallDisk {
  std::filesystem::path dir;
  bool mounted = false;
  explicit SmallDisk(const std::filesystem::path& d) : dir(d) {
    std::filesystem::create_directories(dir);
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=4m") == 0;
  }
  ~SmallDisk() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

TEST(FullDisk, WriterErrorSurfacesAsAClearErrorAndTheCommittedPrefixSurvives) {
  const Reference& ref = reference_for(DType::f32, false);
  const auto dir = temp_dir();
  SmallDisk disk(dir / "small");
  if (!disk.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (not root?)";
  Child c;
  c.path = (disk.dir / "run.h5").string();
  c.results = (dir / "results.jsonl").string();
  const auto out = dir / "stderr.txt";
  // The child's stderr carries the error message; posix_spawn with a redirect.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args{SONDE_STREAM_CHILD, c.path, c.results, std::to_string(kPrompts), "7", "fresh", "f32", "0",
                                std::to_string(1 << 20), std::to_string(c.pace_us)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(wait_for(pid), 10) << slurp(out.string());
  EXPECT_THAT(slurp(out.string()), ::testing::AllOf(::testing::HasSubstr("HDF5: cannot"), ::testing::HasSubstr(c.path),
                                                    ::testing::HasSubstr("No space left on device")));
  // What was committed before the disk filled is intact: copy it off the full disk and resume.
  Child copy = c;
  copy.path = (dir / "rescued.h5").string();
  std::filesystem::copy_file(c.path, copy.path);
  const CommitMark m = resume_and_check(copy, ref.path);
  EXPECT_GT(m.prompts, 0);
  EXPECT_LT(m.prompts, kPrompts);
}

TEST(StockH5pyAfterKill, ReadsTheCommittedPrefixAfterH5clearAndTheResumedFileWhole) {
  SONDE_REQUIRE_PACKAGE(run_shell(std::string(kPython3) + " -c 'import h5py'").first == 0, "python3-h5py");
  SONDE_REQUIRE_PACKAGE(run_shell("h5clear --version").first == 0, "hdf5-tools (h5clear)");
  const Reference& ref = reference_for(DType::bf16, true);
  const auto dir = temp_dir();
  Child c;
  c.storage = DType::bf16;
  c.diffusion = true;
  c.path = (dir / "run.h5").string();
  c.results = (dir / "results.jsonl").string();
  ASSERT_EQ(kill_during(c, false, 0.5, std::chrono::microseconds(0)), -SIGKILL);
  // A killed file, not resumed: readable by stock tools once h5clear repaired it (documented).
  const auto killed = (dir / "killed-copy.h5").string();
  std::filesystem::copy_file(c.path, killed);
  ASSERT_EQ(run_shell("h5clear -s --increment '" + killed + "'").first, 0);
  const std::string script = std::string(kPython3) + " " + SONDE_SINK_TEST_DIR "/check_stream_h5py.py ";
  auto [status, output] = run_shell(script + "'" + killed + "' '" + ref.path + "'");
  EXPECT_EQ(status, 0) << output;
  ASSERT_EQ(run_shell("'" SONDE_STREAM_CHILD "' '" + c.path + "' '" + c.results + "' " + std::to_string(kPrompts) +
                      " 7 resume bf16 1 1048576 0").first, 0);
  std::tie(status, output) = run_shell(script + "'" + c.path + "' '" + ref.path + "'");
  EXPECT_EQ(status, 0) << output;
}

}  // namespace
}  // namespace sonde::test
