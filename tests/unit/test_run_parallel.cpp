// Data-parallel runs (RunOptions::job) on ranks that are threads of this process (thread_job.h)
// and the fake model: which requests each model copy runs, the joined results against a
// one-process run of the same requests, cancel and resume, and the errors every rank must agree
// on. The one-process run is the reference; nothing expected is taken from the parallel path.
#include "run_fakes.h"

#include <sonde/error.h>
#include <sonde/run.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_paths.h"
#include "thread_job.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

namespace sonde::test {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::NiceMock;
using ::testing::Return;
namespace fs = std::filesystem;

std::vector<std::string> ids_in(const fs::path& jsonl) {
  std::vector<std::string> ids;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);) ids.push_back(nlohmann::json::parse(line).at("id"));
  return ids;
}

// 11 requests of mixed lengths (so micro-batches pad), greedy, 3 new tokens each.
std::vector<Request> requests() {
  return id_requests({{1}, {2, 3}, {4}, {5, 6, 7}, {8}, {9, 10}, {11}, {12}, {13, 14, 15, 16}, {17}, {18, 19}});
}

RunOptions options(const fs::path& results) {
  RunOptions o;
  o.defaults.max_new_tokens = 3;
  o.batch_size = 2;
  o.checkpoint_every = 1;
  o.results_path = results.string();
  return o;
}

// The reference: one process, every request.
std::string one_process(const fs::path& dir) {
  FakeModel m;
  run(m, requests(), options(dir / "one.jsonl"));
  return read_file(dir / "one.jsonl");
}

TEST(RunDataParallel, ThreeCopiesJoinTheResultsOfOneProcessInInputOrder) {
  const fs::path dir = temp_dir();
  const std::string expected = one_process(dir);
  std::vector<std::int64_t> forwards(3);
  const auto errors = run_ranks(3, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    run(m, requests(), o);
    forwards[static_cast<std::size_t>(g.rank())] = m.lm_.batch_sizes.size();
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(read_file(dir / "dp.jsonl"), expected);
  // The rule: request i runs on copy i % 3.
  EXPECT_EQ(ids_in(dir / "dp.jsonl.parts/rank-0.jsonl"), (std::vector<std::string>{"r0", "r3", "r6", "r9"}));
  EXPECT_EQ(ids_in(dir / "dp.jsonl.parts/rank-1.jsonl"), (std::vector<std::string>{"r1", "r4", "r7", "r10"}));
  EXPECT_EQ(ids_in(dir / "dp.jsonl.parts/rank-2.jsonl"), (std::vector<std::string>{"r2", "r5", "r8"}));
  for (auto f : forwards) EXPECT_GT(f, 0);  // every copy did work
}

TEST(RunDataParallel, RanksOfOneModelCopyRunInStepAndOnlyItsFirstRankWrites) {
  const fs::path dir = temp_dir();
  const std::string expected = one_process(dir);
  std::vector<std::vector<std::int64_t>> batches(4);
  const auto errors = run_ranks(4, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "tp.jsonl");
    o.job = &g;
    o.tensor_parallel = 2;  // copies {0, 1} and {2, 3}
    run(m, requests(), o);
    batches[static_cast<std::size_t>(g.rank())] = m.lm_.batch_sizes;
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(read_file(dir / "tp.jsonl"), expected);
  EXPECT_TRUE(fs::exists(dir / "tp.jsonl.parts/rank-0.jsonl"));
  EXPECT_TRUE(fs::exists(dir / "tp.jsonl.parts/rank-1.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "tp.jsonl.parts/rank-2.jsonl"));
  EXPECT_EQ(batches[0], batches[1]);  // the same forwards, in the same order
  EXPECT_EQ(batches[2], batches[3]);
  EXPECT_NE(batches[0], batches[2]);
}

TEST(RunDataParallel, ACancelledCopyLeavesTheJobResumableAndTheResumeEqualsAnUninterruptedRun) {
  const fs::path dir = temp_dir();
  const std::string expected = one_process(dir);
  std::atomic<bool> stop{false};
  std::vector<RunResult> cut(2);
  auto errors = run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    if (g.rank() == 1) {  // copy 1 is stopped after its first micro-batch; copy 0 runs to the end
      o.cancel = &stop;
      o.on_progress = [&](const RunProgress&) { stop = true; };
    }
    cut[static_cast<std::size_t>(g.rank())] = run(m, requests(), o);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_TRUE(cut[0].cancelled);  // the job as a whole is cancelled
  EXPECT_TRUE(cut[1].cancelled);
  EXPECT_FALSE(fs::exists(dir / "dp.jsonl"));  // not joined
  EXPECT_EQ(ids_in(dir / "dp.jsonl.parts/rank-1.jsonl"), (std::vector<std::string>{"r1", "r3"}));

  std::vector<std::int64_t> before(2);
  errors = run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    o.resume = true;
    before[static_cast<std::size_t>(g.rank())] = run(m, requests(), o).committed_before;
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(before[0], 6);  // copy 0 had finished its 6 requests
  EXPECT_EQ(before[1], 2);
  EXPECT_EQ(read_file(dir / "dp.jsonl"), expected);
}

TEST(RunDataParallel, RankZeroReportsTheWholeJobsProgressAndTheOtherCopiesTheirOwn) {
  const fs::path dir = temp_dir();
  std::vector<RunProgress> seen;
  std::atomic<int> elsewhere{0};
  const auto errors = run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    o.on_progress = [&, rank = g.rank()](const RunProgress& p) {
      if (rank == 0) seen.push_back(p);
      else if (p.total != 5) ++elsewhere;  // copy 1's own 5 requests
    };
    run(m, requests(), o);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(elsewhere, 0);
  ASSERT_FALSE(seen.empty());
  std::int64_t before = 0;
  for (const auto& p : seen) {
    EXPECT_EQ(p.total, 11);  // every request of the job, not rank 0's share
    EXPECT_GE(p.totals.prompts, before);
    before = p.totals.prompts;
  }
  EXPECT_EQ(seen.back().totals.prompts, 11);  // the last report, after every copy finished
}

TEST(RunDataParallel, ResumingWithAnotherNumberOfCopiesIsRefusedOnEveryRank) {
  const fs::path dir = temp_dir();
  std::atomic<bool> stop{true};
  run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    o.cancel = &stop;
    run(m, requests(), o);
  });
  const auto errors = run_ranks(3, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    o.resume = true;
    run(m, requests(), o);
  });
  for (const auto& e : errors) EXPECT_THAT(e, HasSubstr("a run with 2 data-parallel model copies, this job has 3"));
}

TEST(RunDataParallel, OneRankWithOtherOptionsStopsEveryRankBeforeAnythingIsWritten) {
  const fs::path dir = temp_dir();
  const auto errors = run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    if (g.rank() == 1) o.defaults.max_new_tokens = 4;
    run(m, requests(), o);
  });
  for (const auto& e : errors) EXPECT_THAT(e, HasSubstr("rank 1 has other options or input than rank 0's"));
  EXPECT_FALSE(fs::exists(dir / "dp.jsonl.parts"));
}

TEST(RunDataParallel, TensorParallelMustDivideTheJob) {
  const fs::path dir = temp_dir();  // once, on the test's thread
  const auto errors = run_ranks(3, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "x.jsonl");
    o.job = &g;
    o.tensor_parallel = 2;
    run(m, requests(), o);
  });
  for (const auto& e : errors) EXPECT_THAT(e, HasSubstr("2 ranks per model copy do not divide the job's 3 ranks"));
}

TEST(RunDataParallel, EachCopyWritesItsRankFileAndRankZeroJoinsThem) {
  const fs::path dir = temp_dir();
  std::mutex mu;
  std::vector<std::string> opened;
  std::vector<std::vector<std::string>> joined_parts;
  std::vector<std::string> joined_at;
  const auto errors = run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    auto sink = std::make_shared<NiceMock<MockSink>>();
    ON_CALL(*sink, open(_, _, _)).WillByDefault([&](const SinkOptions& so, const RunMetadata& meta, const auto&) {
      std::lock_guard lock(mu);
      opened.push_back(fmt::format("{} rank={} world={}", fs::path(so.path).lexically_relative(dir).string(),
                                   meta.ints.at("rank"), meta.ints.at("world_size")));
      return CommitMark{};
    });
    ON_CALL(*sink, wants(_)).WillByDefault(Return(true));
    ON_CALL(*sink, joins()).WillByDefault(Return(true));
    ON_CALL(*sink, join(_, _, _)).WillByDefault([&](const std::vector<std::string>& parts, const std::string& path, const RunMetadata&) {
      std::lock_guard lock(mu);
      joined_parts.push_back(parts);
      joined_at.push_back(path);
    });
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    o.capture.hooks = "blocks.0.hook_resid_post";
    o.sinks = {SinkSpec{"mock", (dir / "acts").string(), false, sink}};
    run(m, requests(), o);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  std::sort(opened.begin(), opened.end());
  EXPECT_EQ(opened, (std::vector<std::string>{"acts/rank-0.h5 rank=0 world=2", "acts/rank-1.h5 rank=1 world=2"}));
  ASSERT_EQ(joined_at.size(), 1u);
  EXPECT_EQ(joined_at[0], (dir / "acts" / "run.h5").string());
  EXPECT_EQ(joined_parts[0], (std::vector<std::string>{(dir / "acts/rank-0.h5").string(), (dir / "acts/rank-1.h5").string()}));
}

TEST(RunDataParallel, ASinkPathThatIsAFileIsRefused) {
  const fs::path dir = temp_dir();
  { std::ofstream touch(dir / "acts.h5"); }
  const auto errors = run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    o.capture.hooks = "blocks.0.hook_resid_post";
    auto sink = std::make_shared<NiceMock<MockSink>>();
    ON_CALL(*sink, joins()).WillByDefault(Return(true));
    o.sinks = {SinkSpec{"mock", (dir / "acts.h5").string(), false, sink}};
    run(m, requests(), o);
  });
  for (const auto& e : errors) EXPECT_THAT(e, HasSubstr("acts.h5 is a file, but a data-parallel run (2 model copies)"));
}

TEST(RunDataParallel, ASinkThatCannotJoinIsRefusedBeforeTheRun) {
  const fs::path dir = temp_dir();
  std::atomic<int> forwards{0};
  const auto errors = run_ranks(2, [&](ProcessGroup& g) {
    FakeModel m;
    RunOptions o = options(dir / "dp.jsonl");
    o.job = &g;
    o.capture.hooks = "blocks.0.hook_resid_post";
    o.sinks = {SinkSpec{"mock", (dir / "stats").string(), false, std::make_shared<NiceMock<MockSink>>()}};
    try {
      run(m, requests(), o);
    } catch (...) {
      forwards += static_cast<int>(m.lm_.batch_sizes.size());
      throw;
    }
  });
  for (const auto& e : errors) EXPECT_THAT(e, HasSubstr("the mock sink cannot join the parts of a data-parallel run"));
  EXPECT_EQ(forwards, 0);
}

}  // namespace
}  // namespace sonde::test

namespace sonde {
namespace {

// ProcessGroup::allgather_into's default (through allgather): parts of different lengths (one
// empty) land in rank order in the caller's buffer, each rank's count comes back, and a buffer of
// the wrong length is refused on every rank alike.
TEST(ProcessGroupDefaults, AllgatherIntoConcatenatesInRankOrder) {
  const auto errors = test::run_ranks(3, [](ProcessGroup& g) {
    const std::vector<std::vector<float>> parts = {{1, 2}, {}, {3, 4, 5}};
    const auto& mine = parts[static_cast<std::size_t>(g.rank())];
    std::vector<float> all(5, -1);
    const auto sizes = g.allgather_into(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)));
    EXPECT_THAT(all, testing::ElementsAre(1, 2, 3, 4, 5));
    EXPECT_THAT(sizes, testing::ElementsAre(8u, 0u, 12u));
    std::vector<float> short_buffer(4);
    g.allgather_into(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(short_buffer)));
  });
  for (const std::string& e : errors) EXPECT_THAT(e, testing::HasSubstr("gave 20 bytes in all, the caller expected 16"));
}

}  // namespace
}  // namespace sonde
