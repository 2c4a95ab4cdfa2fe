// Compressed datasets larger than a chunk: whole chunks are shuffled and deflated by the sink
// itself (outside HDF5's lock) and written with H5Dwrite_chunk. HDF5 must read every value back
// through its own filter pipeline, and the chunks must really be compressed.
#include "h5_read.h"
#include "sink_test_support.h"
#include "stream_scenario.h"

#include <sonde/sink.h>

#include <gtest/gtest.h>

#include <cmath>

namespace sonde::test {
namespace {

struct CompressCase {
  DType storage;
  bool streaming;
};

class CompressedChunks : public ::testing::TestWithParam<CompressCase> {};

TEST_P(CompressedChunks, ValuesReadBackThroughHdf5sFiltersAndTakeLessSpace) {
  const auto [storage, streaming] = GetParam();
  const std::string path = (temp_dir() / "c.h5").string();
  const HookPoint hook{"blocks.0.hook_resid_post", {64}};  // 256-byte f32 rows: 4096-row chunks
  SinkOptions o = options_for(path, storage);
  o.compress = true;
  o.streaming = streaming;
  auto sink = make_hdf5_sink();
  sink->open(o, stream_meta(), {hook});
  // Smooth values compress; 11 000 rows in prompts of 100 span two whole chunks and a partial one.
  const std::int64_t prompts = 110, per = 100, d = 64;
  std::vector<float> expected;
  CommitMark mark;
  for (std::int64_t p = 0; p < prompts; ++p) {
    std::vector<float> rows(static_cast<std::size_t>(per * d));
    for (std::int64_t i = 0; i < per * d; ++i)
      rows[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(0.001 * static_cast<double>(p * per * d + i)));
    sink->write({hook.name, p}, TensorView(rows.data(), DType::f32, Shape{per, d}));
    std::vector<RowRecord> recs;
    for (std::int64_t r = 0; r < per; ++r) recs.push_back({p, static_cast<std::int32_t>(r), 1, -1, RowKind::Prompt});
    sink->add_rows(recs);
    PromptRecord pr;
    pr.prompt_idx = p;
    pr.id = std::to_string(p);
    sink->end_prompt(pr);
    mark.prompts = p + 1;
    mark.rows += per;
    // A checkpoint after 9 000 rows: whole chunks before it, a partial chunk flushed mid-run.
    if (streaming && p + 1 == 90) sink->checkpoint(mark);
    for (float v : rows) expected.push_back(storage == DType::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v);
  }
  if (streaming) sink->checkpoint(mark);
  sink->close();

  H5Reader f(path);
  const auto got = f.read<float>("/acts/" + hook.name, H5T_NATIVE_FLOAT);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "values differ after the compressed round trip";
  hid_t ds = H5Dopen2(f.id(), ("/acts/" + hook.name).c_str(), H5P_DEFAULT);
  const hsize_t stored = H5Dget_storage_size(ds);
  H5Dclose(ds);
  const double raw = static_cast<double>(expected.size()) * static_cast<double>(dtype_size(storage));
  EXPECT_LT(static_cast<double>(stored), 0.8 * raw) << "stored " << stored << " bytes of " << raw;
}

INSTANTIATE_TEST_SUITE_P(Hdf5Sink, CompressedChunks,
                         ::testing::Values(CompressCase{DType::f32, false}, CompressCase{DType::f32, true},
                                           CompressCase{DType::bf16, true}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.storage)) + (info.param.streaming ? "_streaming" : "_oneshot");
                         });

}  // namespace
}  // namespace sonde::test
