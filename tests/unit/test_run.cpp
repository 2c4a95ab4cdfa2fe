// The run layer (sonde/run.h) on a fake model and mock sinks: request preparation, family
// defaults, micro-batching of mixed lengths, commit marks and resume, cancel, progress, several
// sinks, the forward kind. Expected values are written out by hand from the fake LM's rule
// (a slot holding x predicts x + 1), never taken from the run layer.
#include "run_fakes.h"

#include <sonde/error.h>
#include <sonde/output_lock.h>
#include <sonde/results_file.h>
#include <sonde/run.h>
#include <sonde/tokenizer.h>

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_paths.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

namespace sonde::test {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Invoke;
using ::testing::NiceMock;
using ::testing::Return;
namespace fs = std::filesystem;

// What a mock sink received, in order.
struct Received {
  std::vector<std::string> events;                       // "write hook", "rows n", "end id", "checkpoint p"
  std::map<std::string, std::vector<float>> first_cols;  // per hook: column 0 (the token) of every row
  std::vector<CommitMark> marks;
  std::vector<PromptRecord> prompts;
  std::vector<RowRecord> rows;
};

std::shared_ptr<NiceMock<MockSink>> recording_sink(Received& got, std::set<std::string> wanted = {},
                                                   CommitMark open_mark = {}) {
  auto sink = std::make_shared<NiceMock<MockSink>>();
  ON_CALL(*sink, open(_, _, _)).WillByDefault(Return(open_mark));
  ON_CALL(*sink, wants(_)).WillByDefault(Invoke([wanted](const std::string& h) { return wanted.empty() || wanted.count(h); }));
  ON_CALL(*sink, write(_, _)).WillByDefault(Invoke([&got](const TapRecord& r, const TensorView& v) {
    got.events.push_back("write " + r.hook);
    const std::int64_t row = v.numel() / v.shape[0];
    for (std::int64_t i = 0; i < v.shape[0]; ++i) got.first_cols[r.hook].push_back(v.as<float>()[i * row]);
  }));
  ON_CALL(*sink, add_rows(_)).WillByDefault(Invoke([&got](const std::vector<RowRecord>& rows) {
    got.events.push_back("rows " + std::to_string(rows.size()));
    got.rows.insert(got.rows.end(), rows.begin(), rows.end());
  }));
  ON_CALL(*sink, end_prompt(_)).WillByDefault(Invoke([&got](const PromptRecord& p) {
    got.events.push_back("end " + p.id);
    got.prompts.push_back(p);
  }));
  ON_CALL(*sink, checkpoint(_)).WillByDefault(Invoke([&got](const CommitMark& m) {
    got.events.push_back("checkpoint " + std::to_string(m.prompts));
    got.marks.push_back(m);
  }));
  ON_CALL(*sink, close()).WillByDefault(Invoke([&got] { got.events.push_back("close"); }));
  return sink;
}

RunOptions greedy(std::int64_t max_new_tokens) {
  RunOptions o;
  o.defaults.max_new_tokens = max_new_tokens;
  return o;
}

// ---- preparation ----

TEST(RunPrepare, IdRequestsKeepTheirIdsAndSeedsFollowTheIndex) {
  FakeModel m;
  auto reqs = id_requests({{1, 2}, {5}, {7, 8, 9}});
  reqs[1].id = "";                // falls back to its index
  reqs[2].settings.seed = 1000;   // its own seed wins
  RunOptions o = greedy(2);
  o.seed = 40;
  const RunResult r = run(m, reqs, o);
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_EQ(r.results[0].id, "r0");
  EXPECT_EQ(r.results[1].id, "1");
  EXPECT_EQ(r.results[0].seed, 40u);
  EXPECT_EQ(r.results[1].seed, 41u);
  EXPECT_EQ(r.results[2].seed, 1000u);
  EXPECT_EQ(r.results[0].completion, (std::vector<std::int32_t>{3, 4}));
  EXPECT_EQ(r.results[1].completion, (std::vector<std::int32_t>{6, 7}));
  EXPECT_EQ(r.results[2].completion, (std::vector<std::int32_t>{10, 11}));
  EXPECT_EQ(r.results[2].finish_reason, "length");
  EXPECT_FALSE(r.results[0].completion_text);  // no tokenizer: no text
}

TEST(RunPrepare, TextIsEncodedWithTheModelsTokenizerAndCompletionsDecoded) {
  FakeModel m;
  m.use_tokenizer();
  Request text;
  text.text = "ab";
  const RunResult r = run(m, {text}, greedy(2));
  EXPECT_EQ(r.results[0].text, "ab");
  const auto ids = m.tokenizer()->encode("ab");
  EXPECT_EQ(r.results[0].prompt_ids, ids);
  const std::vector<std::int32_t> next{ids.back() + 1, ids.back() + 2};
  EXPECT_EQ(r.results[0].completion, next);
  EXPECT_EQ(r.results[0].completion_text, m.tokenizer()->decode(next, false));
  Request empty;
  empty.where = "line 9";
  empty.text = "";
  EXPECT_THROW(run(m, {empty}, greedy(1)), Error);
}

TEST(RunPrepare, BadRequestsNameWhereTheyCameFromAndWriteNothing) {
  FakeModel m;
  Received got;
  RunOptions o = greedy(2);
  o.sinks = {SinkSpec{"mock", "unused.h5", false, recording_sink(got)}};
  auto reqs = id_requests({{1, 2}, {3, 40, 5}});
  try {
    run(m, reqs, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr("request 1: token id 40 at position 1 is outside the vocabulary [0, 40)"));
  }
  EXPECT_TRUE(got.events.empty()) << "a sink was written before every request was checked";

  Request text;
  text.where = "line 3";
  text.text = "hello";
  try {
    run(m, {text}, greedy(2));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("line 3: "));
    EXPECT_THAT(e.what(), HasSubstr("has no tokenizer"));
  }
  auto too_long = id_requests({std::vector<std::int32_t>(60, 1)});
  try {
    run(m, too_long, greedy(5));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("60 prompt tokens + 5 new tokens = 65 exceed max_position_embeddings 64"));
  }
}

TEST(RunPrepare, SkipBadSkipsAndListsThemAndIndexesTheRest) {
  FakeModel m;
  RunOptions o = greedy(1);
  o.skip_bad = true;
  std::vector<std::string> notes;
  o.on_note = [&](const std::string& n) { notes.push_back(n); };
  const RunResult r = run(m, id_requests({{1}, {99}, {2}}), o);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[1].id, "r2");
  EXPECT_EQ(r.results[1].index, 1);  // the index among the requests that run
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_THAT(r.skipped[0], HasSubstr("request 1: token id 99"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("skipped request 1"));
  o.skip_bad = false;
  EXPECT_THROW(run(m, id_requests({{99}}), o), Error);
}

// ---- family defaults ----

TEST(RunDefaults, AutoregressiveSettingsFallBackToGenerationConfigThenTheFamily) {
  ModelConfig cfg;
  cfg.eos_token_ids = {7};
  cfg.generation.top_k = 20;
  cfg.generation.do_sample = true;
  GenerationSettings s;
  ArOptions a = resolve_autoregressive(s, cfg, nullptr);
  EXPECT_EQ(a.max_new_tokens, 64);
  EXPECT_EQ(a.sampling.top_k, 20);
  EXPECT_TRUE(a.sampling.do_sample);
  EXPECT_EQ(a.sampling.top_p, 1.0);
  EXPECT_EQ(a.pad_id, 7);  // no pad id anywhere: the first eos
  s.temperature = 0;       // explicit greedy beats do_sample
  s.top_k = 3;
  a = resolve_autoregressive(s, cfg, nullptr);
  EXPECT_FALSE(a.sampling.do_sample);
  EXPECT_EQ(a.sampling.top_k, 3);
  s.stop = std::vector<std::string>{"x"};
  EXPECT_THROW(resolve_autoregressive(s, cfg, nullptr), Error);  // stop strings need a tokenizer
}

TEST(RunDefaults, DiffusionDefaultsAreDreams) {
  ModelConfig cfg;
  cfg.mask_token_id = 38;
  cfg.generation.max_new_tokens = 12;
  GenerationSettings s;
  DiffusionOptions d = resolve_diffusion(s, cfg);
  EXPECT_EQ(d.max_new_tokens, 12);
  EXPECT_EQ(d.steps, 12);  // steps = max_new_tokens
  EXPECT_EQ(d.eps, 1e-3);
  EXPECT_EQ(d.sampling.alg, DiffusionAlg::Entropy);
  EXPECT_EQ(d.sampling.temperature, 0.0);
  EXPECT_EQ(d.mask_id, 38);
  s.steps = 4;
  s.alg = "origin";
  d = resolve_diffusion(s, cfg);
  EXPECT_EQ(d.steps, 4);
  EXPECT_EQ(d.sampling.alg, DiffusionAlg::Origin);
  s.alg = "nosuch";
  EXPECT_THROW(resolve_diffusion(s, cfg), Error);
  cfg.mask_token_id.reset();
  s.alg.reset();
  EXPECT_THROW(resolve_diffusion(s, cfg), Error);
}

TEST(RunDefaults, SettingsFromJsonCheckTypesAndNameTheField) {
  const auto s = GenerationSettings::from_json(nlohmann::json::parse(R"({"temperature": 1, "stop": ["a"], "seed": 3})"));
  EXPECT_EQ(s.temperature, 1.0);
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.to_json(), nlohmann::json::parse(R"({"temperature": 1.0, "stop": ["a"], "seed": 3})"));
  EXPECT_EQ(s.batch_key(), R"({"stop":["a"],"temperature":1.0})");
  for (const char* bad : {R"({"top_k": -1})", R"({"temperature": "hot"})", R"({"stop": [1]})", R"({"colour": 1})"}) {
    try {
      GenerationSettings::from_json(nlohmann::json::parse(bad));
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      const std::string key = nlohmann::json::parse(bad).begin().key();
      EXPECT_THAT(e.what(), HasSubstr("\"" + key + "\"")) << bad;
    }
  }
}

// ---- micro-batches ----

TEST(RunBatches, EqualSettingsShareMicroBatchesOfMixedLengthsAndGiveEachRowItsOwnResult) {
  FakeModel m;
  auto reqs = id_requests({{1, 2, 3}, {4}, {5, 6}, {10, 11, 12, 13}, {20}});
  reqs[3].settings.max_new_tokens = 2;  // another key: a micro-batch of its own kind
  reqs[4].settings.max_new_tokens = 2;
  RunOptions o = greedy(3);
  o.batch_size = 2;
  const RunResult r = run(m, reqs, o);
  // Micro-batches {0, 1}, {2}, {3, 4}: the forwards' batch sizes run 2..., 1..., 2...
  std::vector<std::int64_t> runs;
  for (auto b : m.lm_.batch_sizes)
    if (runs.empty() || runs.back() != b) runs.push_back(b);
  EXPECT_EQ(runs, (std::vector<std::int64_t>{2, 1, 2}));
  EXPECT_EQ(r.results[0].completion, (std::vector<std::int32_t>{4, 5, 6}));
  EXPECT_EQ(r.results[1].completion, (std::vector<std::int32_t>{5, 6, 7}));  // left-padded beside a longer prompt
  EXPECT_EQ(r.results[2].completion, (std::vector<std::int32_t>{7, 8, 9}));
  EXPECT_EQ(r.results[3].completion, (std::vector<std::int32_t>{14, 15}));
  EXPECT_EQ(r.results[4].completion, (std::vector<std::int32_t>{21, 22}));
}

TEST(RunBatches, DiffusionRunsTheMaskedLoopChosenByTheModelsInfo) {
  FakeModel m(/*diffusion=*/true);
  RunOptions o = greedy(3);
  o.defaults.steps = 3;
  o.record_history = true;
  const RunResult r = run(m, id_requests({{1, 2}, {4}}), o);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].finish_reason, "length");
  EXPECT_EQ(r.results[0].completion.size(), 3u);
  ASSERT_EQ(r.results[1].history.size(), 3u);  // one canvas per step
  EXPECT_EQ(r.results[1].history[0].size(), 1u + 3u);  // without the left padding
  EXPECT_EQ(r.results[1].history[0][0], 4);
  EXPECT_EQ(r.results[1].history.back(), (std::vector<std::int32_t>{4, r.results[1].completion[0],
                                                                    r.results[1].completion[1], r.results[1].completion[2]}));
  for (auto t : r.results[1].completion) EXPECT_NE(t, 38) << "a mask left in the completion";
}

// ---- sinks, commit marks, resume, cancel, progress ----

TEST(RunSinks, EachSinkGetsTheHooksItWantsAndEveryPrompt) {
  FakeModel m;
  Received a, b;
  RunOptions o = greedy(2);
  o.capture.hooks = "blocks.*.hook_resid_post";
  o.sinks = {SinkSpec{"mock", "a.h5", false, recording_sink(a, {"blocks.1.hook_resid_post"})},
             SinkSpec{"mock", "b.h5", false, recording_sink(b)}};
  const RunResult r = run(m, id_requests({{3, 4}, {9}}), o);
  EXPECT_EQ(r.totals.rows, 4 + 3);  // all positions: 2 + 2 and 1 + 2 rows
  EXPECT_EQ(a.events, (std::vector<std::string>{"write blocks.1.hook_resid_post", "rows 4", "end r0",
                                                 "write blocks.1.hook_resid_post", "rows 3", "end r1", "close"}));
  EXPECT_EQ(b.events.size(), 4u + 4u + 1u);
  EXPECT_EQ(b.first_cols["blocks.0.hook_resid_post"], b.first_cols["blocks.1.hook_resid_post"]);
  // Each row's value was captured from the forward that read its token: 3 4 | 5 6, then 9 | 10 11.
  EXPECT_EQ(a.first_cols["blocks.1.hook_resid_post"], (std::vector<float>{3, 4, 5, 6, 9, 10, 11}));
  ASSERT_EQ(a.prompts.size(), 2u);
  EXPECT_EQ(a.prompts[0].token_ids, (std::vector<std::int32_t>{3, 4, 5, 6}));
}

TEST(RunCommit, ChecksInStepWithTheResultsFileAndResumesAfterTheMark) {
  const fs::path dir = temp_dir();
  FakeModel m;
  const auto reqs = id_requests({{1}, {2}, {3}, {4}, {5}});
  RunOptions o = greedy(2);
  o.batch_size = 2;
  o.checkpoint_every = 2;
  o.capture.hooks = "blocks.0.hook_resid_post";

  // Uninterrupted.
  Received whole;
  o.results_path = (dir / "whole.jsonl").string();
  o.sinks = {SinkSpec{"mock", (dir / "whole.h5").string(), false, recording_sink(whole)}};
  run(m, reqs, o);
  const std::string expected = read_file(dir / "whole.jsonl");
  EXPECT_EQ(std::count(expected.begin(), expected.end(), '\n'), 5);
  ASSERT_EQ(whole.marks.size(), 3u);  // after 2, after 4, at the end
  EXPECT_EQ(whole.marks[0].prompts, 2);
  EXPECT_EQ(whole.marks[0].rows, 6);  // 3 rows per prompt: 1 prompt + 2 generated
  EXPECT_EQ(whole.marks[0].results_bytes, expected.find('\n', expected.find('\n') + 1) + 1);
  EXPECT_EQ(whole.marks[2].prompts, 5);
  EXPECT_EQ(whole.marks[2].results_bytes, expected.size());
  EXPECT_EQ(whole.events.back(), "close");

  // Cancelled after the first micro-batch: checkpointed, not closed (so resumable).
  Received first;
  std::atomic<bool> stop{false};
  o.results_path = (dir / "part.jsonl").string();
  o.sinks = {SinkSpec{"mock", (dir / "part.h5").string(), false, recording_sink(first)}};
  o.cancel = &stop;
  o.on_progress = [&](const RunProgress&) { stop = true; };
  const RunResult cut = run(m, reqs, o);
  EXPECT_TRUE(cut.cancelled);
  EXPECT_EQ(cut.results.size(), 2u);
  ASSERT_EQ(first.marks.size(), 1u);
  EXPECT_EQ(first.marks[0].prompts, 2);
  EXPECT_EQ(std::count(first.events.begin(), first.events.end(), "close"), 0);
  EXPECT_EQ(read_file(dir / "part.jsonl"), expected.substr(0, first.marks[0].results_bytes));

  // A torn line past the mark (a crash mid-write) is cut off; the run continues after the mark.
  std::ofstream(dir / "part.jsonl", std::ios::app) << "{\"id\": \"r2\", \"compl";
  { std::ofstream touch(dir / "part.h5"); }
  Received rest;
  o.cancel = nullptr;
  o.on_progress = {};
  o.resume = true;
  o.sinks = {SinkSpec{"mock", (dir / "part.h5").string(), false, recording_sink(rest, {}, first.marks[0])}};
  const RunResult resumed = run(m, reqs, o);
  EXPECT_EQ(resumed.committed_before, 2);
  ASSERT_EQ(resumed.results.size(), 3u);
  EXPECT_EQ(resumed.results[0].id, "r2");
  EXPECT_EQ(read_file(dir / "part.jsonl"), expected);
  ASSERT_FALSE(rest.marks.empty());
  EXPECT_EQ(rest.marks.back().rows, 15);  // rows count on from the mark
  EXPECT_EQ(rest.events.back(), "close");
}

TEST(RunCommit, WithoutASinkTheResultsFileIsItsOwnMark) {
  const fs::path dir = temp_dir();
  FakeModel m;
  const auto reqs = id_requests({{1}, {2}, {3}});
  RunOptions o = greedy(1);
  o.results_path = (dir / "r.jsonl").string();
  run(m, reqs, o);
  const std::string expected = read_file(dir / "r.jsonl");
  const auto second = expected.find('\n') + 1;
  std::ofstream(dir / "r.jsonl", std::ios::trunc) << expected.substr(0, second) << "{\"torn";
  o.resume = true;
  std::vector<RunProgress> seen;
  o.on_progress = [&](const RunProgress& p) { seen.push_back(p); };
  const RunResult r = run(m, reqs, o);
  EXPECT_EQ(r.committed_before, 1);
  EXPECT_EQ(read_file(dir / "r.jsonl"), expected);
  ASSERT_EQ(seen.size(), 1u);  // one micro-batch of the two requests left
  EXPECT_EQ(seen[0].total, 3);
  EXPECT_EQ(seen[0].committed, 1);
  EXPECT_EQ(seen[0].totals.prompts, 2);
}

TEST(RunProgressTest, ReportsAfterEveryMicroBatch) {
  FakeModel m;
  RunOptions o = greedy(2);
  o.batch_size = 2;
  std::vector<std::int64_t> done, tokens;
  o.on_progress = [&](const RunProgress& p) {
    done.push_back(p.totals.prompts);
    tokens.push_back(p.totals.completion_tokens);
    EXPECT_EQ(p.total, 5);
  };
  run(m, id_requests({{1}, {2}, {3}, {4}, {5}}), o);
  EXPECT_EQ(done, (std::vector<std::int64_t>{2, 4, 5}));
  EXPECT_EQ(tokens, (std::vector<std::int64_t>{4, 8, 10}));
}

TEST(RunTokens, StreamsEachTokenByRequestAsItIsChosen) {
  FakeModel m;
  RunOptions o = greedy(3);
  std::vector<std::pair<std::int64_t, std::int32_t>> seen;
  o.on_token = [&](std::int64_t r, std::int32_t t) { seen.emplace_back(r, t); };
  run(m, id_requests({{1}, {5}}), o);
  EXPECT_EQ(seen, (std::vector<std::pair<std::int64_t, std::int32_t>>{{0, 2}, {1, 6}, {0, 3}, {1, 7}, {0, 4}, {1, 8}}));
}

// ---- outputs: written whole or not at all, and locked while written ----

// A sink that creates its file at the path it is given, as the HDF5 sink does.
std::shared_ptr<NiceMock<MockSink>> file_sink(Received& got, std::vector<std::string>& opened) {
  auto sink = recording_sink(got);
  ON_CALL(*sink, open(_, _, _)).WillByDefault(Invoke([&opened](const SinkOptions& so, const RunMetadata&, const std::vector<HookPoint>&) {
    opened.push_back(so.path);
    std::ofstream(so.path) << "new";
    return CommitMark{};
  }));
  return sink;
}

TEST(RunOutputs, AOneShotFileAppearsOnlyWhenTheRunSucceeds) {
  const fs::path dir = temp_dir();
  const auto out = dir / "g.h5";
  std::ofstream(out) << "old";
  FakeModel m;
  Received got;
  std::vector<std::string> opened;
  RunOptions o = greedy(3);
  o.sinks = {SinkSpec{"mock", out.string(), /*overwrite=*/true, file_sink(got, opened)}};
  m.lm_.fail_at_call = 1;  // the second decode step
  EXPECT_THROW(run(m, id_requests({{1, 2}}), o), Error);
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0], out.string() + ".partial");
  EXPECT_FALSE(fs::exists(opened[0])) << "a failed run left its partial file";
  EXPECT_EQ(read_file(out), "old") << "a failed run replaced the file it was to overwrite";

  m.lm_.fail_at_call = -1;
  run(m, id_requests({{1, 2}}), o);
  EXPECT_EQ(read_file(out), "new");
  EXPECT_FALSE(fs::exists(opened[0]));
  EXPECT_FALSE(fs::exists(out.string() + ".lock"));

  o.sinks[0].overwrite = false;
  try {
    run(m, id_requests({{1, 2}}), o);
    FAIL() << "an existing file was replaced without overwrite";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr(out.string() + " exists (resume to continue that run, or overwrite to replace it)"));
  }
}

TEST(RunOutputs, ASecondWriterOfTheSameOutputsIsRefusedWithTheHoldersPid) {
  const fs::path dir = temp_dir();
  const auto results = (dir / "r.jsonl").string();
  FakeModel m;
  RunOptions o = greedy(1);
  o.results_path = results;
  {
    OutputLock held(results);  // another run writing r.jsonl
    try {
      run(m, id_requests({{1}}), o);
      FAIL() << "a second writer was let in";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("{} is being written by another run (process {})", results, ::getpid())));
    }
    EXPECT_FALSE(fs::exists(results)) << "the refused run wrote";
  }
  run(m, id_requests({{1}}), o);  // released: the next run goes ahead
  EXPECT_TRUE(fs::exists(results));
  // A lock file left by a killed holder is no lock: the kernel released it with the process.
  std::ofstream(results + ".lock") << "999999";
  o.resume = true;
  EXPECT_NO_THROW(run(m, id_requests({{1}, {2}}), o));
}

// The overwrite policy is run()'s, so every front end has the same: an existing results file is
// refused and left as it was, replaced with overwrite, continued with resume; both at once refused.
TEST(RunOutputs, AnExistingResultsFileIsRefusedUnlessOverwrittenOrResumed) {
  const fs::path dir = temp_dir();
  const auto results = (dir / "r.jsonl").string();
  std::ofstream(results) << "{\"id\": \"someone else's\"}\n";
  FakeModel m;
  RunOptions o = greedy(1);
  o.results_path = results;
  try {
    run(m, id_requests({{1}}), o);
    FAIL() << "an existing results file was truncated";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_EQ(e.setting(), "output");
    EXPECT_THAT(e.what(), HasSubstr(results + " exists"));
  }
  EXPECT_EQ(read_file(results), "{\"id\": \"someone else's\"}\n");
  o.resume = o.overwrite = true;
  try {
    check_outputs(o);
    FAIL() << "resume and overwrite were both taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.setting(), "resume");
  }
  o.resume = false;
  run(m, id_requests({{1}}), o);
  EXPECT_EQ(complete_lines(results).lines, 1);
  EXPECT_EQ(read_file(results).find("someone else"), std::string::npos);
  o.overwrite = false;
  o.resume = true;
  run(m, id_requests({{1}, {2}}), o);
  EXPECT_EQ(complete_lines(results).lines, 2);
}

// ---- the forward kind ----

TEST(RunForward, OneForwardWritesRowsLogitsAndIds) {
  FakeModel m;
  Received got;
  std::vector<std::string> arrays;
  auto sink = recording_sink(got);
  ON_CALL(*sink, write_array(_, _)).WillByDefault(Invoke([&](const std::string& p, const TensorView& v) {
    arrays.push_back(p + " " + v.shape.str());
  }));
  RunOptions o;
  o.kind = RunKind::Forward;
  o.capture.hooks = "blocks.0.hook_resid_post";
  o.sinks = {SinkSpec{"mock", "f.h5", false, sink}};
  const RunResult r = run(m, id_requests({{3, kEos, 5}}), o);
  EXPECT_EQ(m.forwards, 1);
  EXPECT_EQ(r.logits.shape(), (Shape{3, kVocab}));
  EXPECT_EQ(r.logits.data<float>()[kVocab + 1], 5.0f);  // slot 1 holds eos (39): predicts 40 mod 39
  EXPECT_EQ(got.first_cols["blocks.0.hook_resid_post"], (std::vector<float>{3, 39, 5}));
  ASSERT_EQ(got.rows.size(), 3u);
  EXPECT_EQ(got.rows[1].kind, RowKind::Special);
  EXPECT_EQ(got.rows[2].kind, RowKind::Prompt);
  EXPECT_EQ(arrays.size(), 2u);
  EXPECT_THAT(arrays[0], HasSubstr("/input_ids"));
  EXPECT_EQ(got.events.back(), "close");
  EXPECT_THROW(run(m, id_requests({{1}, {2}}), o), Error);  // a forward pass runs one request
}

}  // namespace
}  // namespace sonde::test
