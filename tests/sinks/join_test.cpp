// Hdf5Sink::join: the parts of a data-parallel run (prompts i % 2 in part i % 2) joined into one
// file must read, prompt by prompt, exactly as the file one process writes with every prompt.
// Both are written here through the sink; stock h5py compares them (check_join.py), from another
// working directory and again after the folder is moved (the parts are found by relative path).
#include "sink_test_support.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

const std::vector<HookPoint> kHooks = {{"blocks.0.hook_resid_post", {3}}, {"blocks.1.attn.hook_z", {2, 2}}};

RunMetadata metadata() {
  RunMetadata m;
  m.strings = {{"run_config_sha256", "abc"}, {"model_arch", "test"}};
  m.ints = {{"rank", 0}, {"world_size", 1}};
  return m;
}

// Prompt p: 2 + p % 3 rows; hook values encode (prompt, row, element); one diffusion step per row.
void write_prompt(Sink& sink, std::int64_t p, std::int64_t& rows_so_far) {
  const std::int64_t n = 2 + p % 3;
  for (const auto& h : kHooks) {
    const std::int64_t size = row_size(h);
    std::vector<float> v(static_cast<std::size_t>(n * size));
    for (std::int64_t i = 0; i < n * size; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(p * 100 + i) * 0.25f;
    Shape shape;
    shape.rank = 1 + static_cast<int>(h.row_shape.size());
    shape[0] = n;
    for (std::size_t k = 0; k < h.row_shape.size(); ++k) shape[static_cast<int>(k) + 1] = h.row_shape[k];
    sink.write(TapRecord{h.name, p}, TensorView(v.data(), DType::f32, shape));
  }
  std::vector<RowRecord> rows;
  std::vector<StepRecord> steps;
  for (std::int64_t r = 0; r < n; ++r) {
    rows.push_back({p, static_cast<std::int32_t>(r), static_cast<std::int32_t>(p * 10 + r), static_cast<std::int32_t>(r),
                    RowKind::Committed});
    steps.push_back({p, static_cast<std::int32_t>(r), 1.0f - 0.1f * static_cast<float>(r), 1,
                     std::vector<std::int32_t>(static_cast<std::size_t>(3 + r), static_cast<std::int32_t>(p))});
  }
  sink.add_rows(rows);
  sink.add_steps(steps);
  PromptRecord rec;
  rec.prompt_idx = p;
  rec.id = fmt::format("id-{}", p);
  rec.text = fmt::format("prompt {} text", p);
  rec.completion = std::string(static_cast<std::size_t>(p), 'x');
  rec.finish_reason = "length";
  rec.token_ids = std::vector<std::int32_t>(static_cast<std::size_t>(p + 1), static_cast<std::int32_t>(7 * p));
  rec.seed = static_cast<std::uint64_t>(p);
  sink.end_prompt(rec);
  rows_so_far += n;
}

void write_file(const std::string& path, const std::vector<std::int64_t>& prompts, DType storage) {
  auto sink = make_hdf5_sink();
  SinkOptions o = options_for(path, storage);
  o.streaming = true;
  o.diffusion = true;
  sink->open(o, metadata(), kHooks);
  std::int64_t rows = 0, done = 0;
  for (auto p : prompts) {
    write_prompt(*sink, p, rows);
    sink->checkpoint(CommitMark{++done, rows, 0});
  }
  sink->close();
}

class Hdf5Join : public ::testing::TestWithParam<DType> {};

TEST_P(Hdf5Join, TheJoinedFileReadsPromptByPromptAsOneProcesssFile) {
  const fs::path dir = temp_dir();
  fs::create_directories(dir / "acts");
  write_file((dir / "whole.h5").string(), {0, 1, 2, 3, 4, 5, 6}, GetParam());
  write_file((dir / "acts/rank-0.h5").string(), {0, 2, 4, 6}, GetParam());
  write_file((dir / "acts/rank-1.h5").string(), {1, 3, 5}, GetParam());
  auto sink = make_hdf5_sink();
  RunMetadata joined = metadata();
  joined.ints["world_size"] = 2;
  sink->join({(dir / "acts/rank-0.h5").string(), (dir / "acts/rank-1.h5").string()}, (dir / "acts/run.h5").string(),
             joined);
  const std::string check = "cd / && /usr/bin/python3 " SONDE_SINK_TEST_DIR "/check_join.py ";
  auto [status, out] = run_shell(check + (dir / "whole.h5").string() + " " + (dir / "acts/run.h5").string());
  EXPECT_EQ(status, 0) << out;
  fs::rename(dir / "acts", dir / "moved");
  std::tie(status, out) = run_shell(check + (dir / "whole.h5").string() + " " + (dir / "moved/run.h5").string());
  EXPECT_EQ(status, 0) << out;
}

TEST_P(Hdf5Join, AnIncompletePartIsRefusedAndNothingIsLeft) {
  const fs::path dir = temp_dir();
  write_file((dir / "rank-0.h5").string(), {0, 2}, GetParam());
  {
    auto sink = make_hdf5_sink();
    SinkOptions o = options_for((dir / "rank-1.h5").string(), GetParam());
    o.streaming = true;
    o.diffusion = true;
    sink->open(o, metadata(), kHooks);
    std::int64_t rows = 0;
    write_prompt(*sink, 1, rows);
    sink->checkpoint(CommitMark{1, rows, 0});
  }  // destroyed without close(): not complete
  auto sink = make_hdf5_sink();
  const auto what = error_of([&] { sink->join({(dir / "rank-0.h5").string(), (dir / "rank-1.h5").string()},
                                              (dir / "run.h5").string(), metadata()); },
                             ErrorKind::Runtime);
  EXPECT_NE(what.find("rank-1.h5 is not complete"), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(dir / "run.h5"));
  EXPECT_FALSE(fs::exists(dir / "run.h5.partial"));
}

INSTANTIATE_TEST_SUITE_P(Parts, Hdf5Join, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace sonde::test
