// Streaming mode in one process: the file equals a one-shot file of the same capture, /progress
// and /steps hold what was handed over, and misuse and resume refusals are clear sonde::Errors.
#include "h5_compare.h"
#include "stream_scenario.h"

#include <sonde/error.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

namespace sonde::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;


SinkOptions streaming(const std::string& path, DType storage = DType::f32) {
  SinkOptions o = options_for(path, storage);
  o.streaming = true;
  return o;
}

struct Mark {
  std::int64_t prompts, rows, steps;
  std::uint64_t results_bytes;
};

Mark progress_of(const std::string& path) {
  H5Reader f(path);
  const auto raw = read_raw(f.id(), "/progress/mark");
  Mark m{};
  EXPECT_EQ(raw.bytes.size(), sizeof m);
  std::memcpy(&m, raw.bytes.data(), std::min(sizeof m, raw.bytes.size()));
  return m;
}

// The scenario of sink_test_support.h, checkpointed after each prompt.
void stream_scenario(Sink& sink) {
  const auto hooks = scenario_hooks();
  CommitMark mark;
  for (const auto& p : scenario_prompts()) {
    for (int h = 0; h < static_cast<int>(hooks.size()); ++h) {
      const auto& hook = hooks[static_cast<std::size_t>(h)];
      sink.write({hook.name, p.record.prompt_idx}, make_rows(h, hook, p.rows, 0, p.rows.size(), h == 1).view);
    }
    sink.add_rows(p.rows);
    sink.end_prompt(p.record);
    mark.prompts += 1;
    mark.rows += static_cast<std::int64_t>(p.rows.size());
    mark.results_bytes += 10;
    sink.checkpoint(mark);
  }
}

class StreamingRoundTrip : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(StreamingRoundTrip, EqualsTheOneShotFileAndRecordsTheMark) {
  const auto [storage, compress] = GetParam();
  const auto dir = temp_dir();
  auto one_shot = options_for((dir / "one.h5").string(), storage);
  one_shot.compress = compress;
  auto sink = make_hdf5_sink();
  sink->open(one_shot, scenario_meta(), scenario_hooks());
  write_prompts(*sink);
  sink->close();

  auto o = streaming((dir / "stream.h5").string(), storage);
  o.compress = compress;
  o.queue_bytes = 64;  // smaller than one delivery: every write waits for the writer
  auto streamed = make_hdf5_sink();
  const CommitMark start = streamed->open(o, scenario_meta(), scenario_hooks());
  EXPECT_EQ(start.prompts, 0);
  stream_scenario(*streamed);
  streamed->close();

  const RawFile want = read_all(one_shot.path), got = read_all(o.path);
  for (const char* group : {"/acts/", "/rows/", "/prompts/"}) EXPECT_EQ(raw_difference(got, want, group), "") << group;
  const Mark m = progress_of(o.path);
  EXPECT_EQ(m.prompts, 2);
  EXPECT_EQ(m.rows, 7);
  EXPECT_EQ(m.steps, 0);
  EXPECT_EQ(m.results_bytes, 20u);
  H5Reader f(o.path);
  EXPECT_EQ(f.attr_int("/", "complete"), 1);
  EXPECT_EQ(f.attr_string("/", "schema"), "sonde.acts/1");
  EXPECT_EQ(f.type_of("/acts/blocks.0.hook_resid_post").committed, storage != DType::f32);
  EXPECT_EQ(filters_of(f, "/acts/blocks.0.hook_resid_post").size(), compress ? 2u : 0u);
}

INSTANTIATE_TEST_SUITE_P(Hdf5Sink, StreamingRoundTrip,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_deflate" : "_plain");
                         });

TEST(Hdf5Streaming, StepsTableHoldsEveryStepAndItsCanvas) {
  const auto path = (temp_dir() / "steps.h5").string();
  auto o = streaming(path);
  o.diffusion = true;
  auto sink = make_hdf5_sink();
  sink->open(o, stream_meta(), stream_hooks());
  CommitMark mark;
  for (std::int64_t p = 0; p < 3; ++p) {
    stream_one(*sink, p, true);
    mark.prompts += 1;
    mark.rows += static_cast<std::int64_t>(stream_prompt(p).rows.size());
  }
  sink->checkpoint(mark);
  sink->close();
  std::vector<std::int64_t> prompt_idx, offsets{0};
  std::vector<std::int32_t> step, n_transfer, canvas;
  std::vector<float> t;
  for (std::int64_t p = 0; p < 3; ++p)
    for (const auto& s : stream_steps(p)) {
      prompt_idx.push_back(s.prompt_idx);
      step.push_back(s.step);
      t.push_back(s.t);
      n_transfer.push_back(s.n_transfer);
      canvas.insert(canvas.end(), s.canvas.begin(), s.canvas.end());
      offsets.push_back(static_cast<std::int64_t>(canvas.size()));
    }
  H5Reader f(path);
  EXPECT_EQ(f.read<std::int64_t>("/steps/prompt_idx", H5T_NATIVE_INT64), prompt_idx);
  EXPECT_EQ(f.read<std::int32_t>("/steps/step", H5T_NATIVE_INT32), step);
  EXPECT_EQ(f.read<float>("/steps/t", H5T_NATIVE_FLOAT), t);
  EXPECT_EQ(f.read<std::int32_t>("/steps/n_transfer", H5T_NATIVE_INT32), n_transfer);
  EXPECT_EQ(f.read<std::int32_t>("/steps/canvas", H5T_NATIVE_INT32), canvas);
  EXPECT_EQ(f.read<std::int64_t>("/steps/canvas_offsets", H5T_NATIVE_INT64), offsets);
  EXPECT_EQ(progress_of(path).steps, 6);
}

TEST(Hdf5Streaming, WriteArrayIsARuntimeError) {
  const auto path = (temp_dir() / "wa.h5").string();
  auto sink = make_hdf5_sink();
  sink->open(streaming(path), stream_meta(), stream_hooks());
  std::vector<std::int32_t> ids{1, 2};
  const auto msg = error_of([&] { sink->write_array("/input_ids", TensorView(ids.data(), DType::i32, {2})); },
                            ErrorKind::Runtime);
  EXPECT_THAT(msg, AllOf(HasSubstr("/input_ids"), HasSubstr(path), HasSubstr("one-shot")));
}

TEST(Hdf5Streaming, CheckpointMarkThatDisagreesWithWhatWasHandedOverIsRuntime) {
  const auto path = (temp_dir() / "mark.h5").string();
  auto sink = make_hdf5_sink();
  sink->open(streaming(path), stream_meta(), stream_hooks());
  stream_one(*sink, 0, false);
  const auto rows = static_cast<std::int64_t>(stream_prompt(0).rows.size());
  const auto msg = error_of([&] { sink->checkpoint({1, rows + 1, 0}); }, ErrorKind::Runtime);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr(std::to_string(rows + 1) + " rows"),
                         HasSubstr(std::to_string(rows) + " rows")));
}

TEST(Hdf5Streaming, CloseWithoutCheckpointingEverythingIsRuntimeAndLeavesTheFileIncomplete) {
  const auto path = (temp_dir() / "unckpt.h5").string();
  auto sink = make_hdf5_sink();
  sink->open(streaming(path), stream_meta(), stream_hooks());
  stream_one(*sink, 0, false);
  const auto msg = error_of([&] { sink->close(); }, ErrorKind::Runtime);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("1 prompts ended but only 0 checkpointed")));
  H5Reader f(path);
  EXPECT_EQ(f.attr_int("/", "complete"), 0);
}

TEST(Hdf5Streaming, ExistingFileIsRefusedWithoutResumeOrOverwrite) {
  const auto path = (temp_dir() / "exists.h5").string();
  { std::ofstream(path) << "precious"; }
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(streaming(path), stream_meta(), stream_hooks()); }, ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("already exists")));
}

// Streams prompts [0, n), checkpointing after `committed` of them, then drops the sink without
// close(): the destructor of a sink whose process is going away.
void stream_and_abandon(const std::string& path, std::int64_t committed, std::int64_t n, const std::string& sha) {
  auto sink = make_hdf5_sink();
  sink->open(streaming(path), stream_meta(sha), stream_hooks());
  CommitMark mark;
  for (std::int64_t p = 0; p < n; ++p) {
    stream_one(*sink, p, false);
    mark.prompts += 1;
    mark.rows += static_cast<std::int64_t>(stream_prompt(p).rows.size());
    mark.results_bytes += result_line(p).size();
    if (p + 1 == committed) sink->checkpoint(mark);
  }
}

SinkOptions resuming(const std::string& path) {
  SinkOptions o = streaming(path);
  o.resume = true;
  return o;
}

TEST(Hdf5Streaming, RunConfigMismatchOnResumeIsBadInputNamingBothValues) {
  const auto path = (temp_dir() / "sha.h5").string();
  stream_and_abandon(path, 1, 2, "aaaa1111");
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(resuming(path), stream_meta("bbbb2222"), stream_hooks()); },
                            ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("aaaa1111"), HasSubstr("bbbb2222"), HasSubstr("run_config_sha256")));
}

// A file from before /rows/fresh existed (made here by deleting the column) is refused with one
// line naming the file and the column, not an HDF5 error.
TEST(Hdf5Streaming, ResumeOfAFileWithoutTheFreshColumnIsBadInput) {
  const auto path = (temp_dir() / "older.h5").string();
  stream_and_abandon(path, 1, 2, "aaaa1111");
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, "/rows/fresh", H5P_DEFAULT), 0);
  H5Fclose(f);
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(resuming(path), stream_meta("aaaa1111"), stream_hooks()); },
                            ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("no 'fresh' column"), HasSubstr("older sonde")));
}

TEST(Hdf5Streaming, ResumeOfAOneShotFileIsBadInput) {
  const auto path = (temp_dir() / "oneshot.h5").string();
  auto one = make_hdf5_sink();
  one->open(options_for(path, DType::f32), stream_meta(), stream_hooks());
  one->close();
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(resuming(path), stream_meta(), stream_hooks()); }, ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("streaming")));
}

TEST(Hdf5Streaming, ResumeOfACompleteFileIsBadInput) {
  const auto path = (temp_dir() / "done.h5").string();
  auto first = make_hdf5_sink();
  first->open(streaming(path), stream_meta(), stream_hooks());
  first->close();
  auto sink = make_hdf5_sink();
  const auto msg = error_of([&] { sink->open(resuming(path), stream_meta(), stream_hooks()); }, ErrorKind::BadInput);
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("completed")));
}

TEST(Hdf5Streaming, ResumeOfAMissingFileStartsFromNothing) {
  const auto path = (temp_dir() / "never-made.h5").string();
  auto sink = make_hdf5_sink();
  const CommitMark m = sink->open(resuming(path), stream_meta(), stream_hooks());
  EXPECT_EQ(m.prompts, 0);
  EXPECT_EQ(m.results_bytes, 0u);
  sink->close();
  EXPECT_EQ(progress_of(path).prompts, 0);
}

// Every table holds exactly its first `prompts` prompts of an uninterrupted run.
void expect_prefix_of(const std::string& path, const std::string& reference, std::int64_t prompts) {
  std::int64_t rows = 0;
  for (std::int64_t p = 0; p < prompts; ++p) rows += static_cast<std::int64_t>(stream_prompt(p).rows.size());
  const RawFile got = read_all(path), want = read_all(reference);
  for (const auto& [name, g] : got) {
    if (name.rfind("/progress", 0) == 0) continue;
    ASSERT_TRUE(want.count(name)) << name;
    EXPECT_TRUE(is_row_prefix(g, want.at(name))) << name;
  }
  EXPECT_EQ(rows_of(got.at("/acts/blocks.0.hook_resid_post")), static_cast<hsize_t>(rows));
  EXPECT_EQ(rows_of(got.at("/rows/pos")), static_cast<hsize_t>(rows));
  EXPECT_EQ(rows_of(got.at("/prompts/seed")), static_cast<hsize_t>(prompts));
  EXPECT_EQ(rows_of(got.at("/prompts/text_offsets")), static_cast<hsize_t>(prompts + 1));
  H5Reader f(path);
  const auto text_offsets = f.read<std::int64_t>("/prompts/text_offsets", H5T_NATIVE_INT64);
  EXPECT_EQ(rows_of(got.at("/prompts/text_bytes")), static_cast<hsize_t>(text_offsets.back()));
}

TEST(Hdf5Streaming, ResumeTrimsToTheLastCheckpointAndContinuesToTheUninterruptedFile) {
  const auto dir = temp_dir();
  const auto path = (dir / "resume.h5").string(), reference = (dir / "ref.h5").string();
  stream_and_abandon(reference, 6, 6, "s");
  stream_and_abandon(path, 3, 5, "s");  // prompts 3 and 4 were handed over but never committed
  {
    auto sink = make_hdf5_sink();
    const CommitMark m = sink->open(resuming(path), stream_meta("s"), stream_hooks());
    EXPECT_EQ(m.prompts, 3);
    EXPECT_EQ(m.results_bytes, result_line(0).size() + result_line(1).size() + result_line(2).size());
  }  // dropped: the trimmed file stays as it is
  expect_prefix_of(path, reference, 3);
  auto sink = make_hdf5_sink();
  CommitMark mark = sink->open(resuming(path), stream_meta("s"), stream_hooks());
  for (std::int64_t p = mark.prompts; p < 6; ++p) {
    stream_one(*sink, p, false);
    mark.prompts += 1;
    mark.rows += static_cast<std::int64_t>(stream_prompt(p).rows.size());
    mark.results_bytes += result_line(p).size();
  }
  sink->checkpoint(mark);
  sink->close();
  RawFile got = read_all(path), want = read_all(reference);
  EXPECT_EQ(raw_difference(got, want), "");
}

TEST(Hdf5Streaming, NothingCheckpointedResumesFromZero) {
  const auto path = (temp_dir() / "zero.h5").string();
  stream_and_abandon(path, 0, 3, "s");
  auto sink = make_hdf5_sink();
  const CommitMark m = sink->open(resuming(path), stream_meta("s"), stream_hooks());
  EXPECT_EQ(m.prompts, 0);
  EXPECT_EQ(m.rows, 0);
  sink.reset();
  H5Reader f(path);
  EXPECT_EQ(f.dims("/acts/blocks.0.hook_resid_post"), (std::vector<hsize_t>{0, 512}));
  EXPECT_EQ(f.read<std::int64_t>("/prompts/id_offsets", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(f.attr_int("/", "complete"), 0);
}

}  // namespace
}  // namespace sonde::test
