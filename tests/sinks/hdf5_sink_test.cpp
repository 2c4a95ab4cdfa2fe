// The hdf5 sink, loaded through the plugin registry, checked by reading its files back with the
// plain HDF5 C API (h5_read.h) and, in h5py_test.cpp, with stock h5py.
#include "sink_test_support.h"

#include <sonde/error.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

namespace sonde::test {
namespace {

using ::testing::HasSubstr;

class StorageRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(StorageRoundTrip, ActivationsReadBackAsTheRoundedValues) {
  const DType storage = GetParam();
  const auto path = write_scenario_file(temp_dir(), storage);
  H5Reader f(path);
  const auto hooks = scenario_hooks();
  for (int h = 0; h < static_cast<int>(hooks.size()); ++h) {
    const std::string ds = "/acts/" + hooks[h].name;
    SCOPED_TRACE(ds);
    std::vector<hsize_t> want_dims{7};  // 3 rows of prompt 3, then 4 of prompt 8
    want_dims.insert(want_dims.end(), hooks[h].row_shape.begin(), hooks[h].row_shape.end());
    EXPECT_EQ(f.dims(ds), want_dims);
    const auto got = f.read<float>(ds, H5T_NATIVE_FLOAT);
    const auto want = expected_acts(h, storage);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(first_mismatch(got, want), "") << "storage " << dtype_name(storage);
    EXPECT_EQ(f.attr_string(ds, "dtype"), dtype_name(storage));
    EXPECT_EQ(f.attr_string(ds, "hook"), hooks[h].name);
    EXPECT_EQ(f.attr_ints(ds, "row_shape"), hooks[h].row_shape);
  }
}

TEST_P(StorageRoundTrip, SixteenBitStorageIsACommittedTwoByteFloat) {
  const DType storage = GetParam();
  const auto path = write_scenario_file(temp_dir(), storage);
  H5Reader f(path);
  const auto type = f.type_of("/acts/blocks.0.hook_resid_post");
  EXPECT_EQ(type.cls, H5T_FLOAT);
  EXPECT_EQ(type.size, storage == DType::f32 ? 4u : 2u);
  EXPECT_EQ(type.committed, storage != DType::f32);
  if (storage != DType::f32) {
    EXPECT_TRUE(f.exists("/types/" + std::string(dtype_name(storage))));
  }
}

INSTANTIATE_TEST_SUITE_P(Hdf5Sink, StorageRoundTrip, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Hdf5Sink, RowsTableHoldsEveryRowInOrder) {
  H5Reader f(write_scenario_file(temp_dir(), DType::f32));
  std::vector<RowRecord> want;
  for (const auto& p : scenario_prompts()) want.insert(want.end(), p.rows.begin(), p.rows.end());
  const auto prompt_idx = f.read<std::int64_t>("/rows/prompt_idx", H5T_NATIVE_INT64);
  const auto pos = f.read<std::int32_t>("/rows/pos", H5T_NATIVE_INT32);
  const auto token = f.read<std::int32_t>("/rows/token_id", H5T_NATIVE_INT32);
  const auto step = f.read<std::int32_t>("/rows/step", H5T_NATIVE_INT32);
  const auto kind = f.read<std::uint8_t>("/rows/kind", H5T_NATIVE_UINT8);
  ASSERT_EQ(prompt_idx.size(), want.size());
  ASSERT_EQ(kind.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(prompt_idx[i], want[i].prompt_idx);
    EXPECT_EQ(pos[i], want[i].pos);
    EXPECT_EQ(token[i], want[i].token_id);
    EXPECT_EQ(step[i], want[i].step);
    EXPECT_EQ(kind[i], static_cast<std::uint8_t>(want[i].kind));
  }
  EXPECT_EQ(f.type_of("/rows/kind").size, 1u);
  EXPECT_EQ(f.type_of("/rows/pos").size, 4u);
}

TEST(Hdf5Sink, PromptsTableHasOffsetsRowRangesAndStrings) {
  H5Reader f(write_scenario_file(temp_dir(), DType::f32));
  const auto prompts = scenario_prompts();
  EXPECT_EQ(f.read<std::int64_t>("/prompts/prompt_idx", H5T_NATIVE_INT64), (std::vector<std::int64_t>{3, 8}));
  EXPECT_EQ(f.read<std::int64_t>("/prompts/row_start", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(f.read<std::int64_t>("/prompts/row_count", H5T_NATIVE_INT64), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(f.read<std::uint64_t>("/prompts/seed", H5T_NATIVE_UINT64),
            (std::vector<std::uint64_t>{7, 9223372036854775813ull}));
  EXPECT_EQ(f.read<std::int64_t>("/prompts/token_offsets", H5T_NATIVE_INT64), (std::vector<std::int64_t>{0, 3, 8}));
  EXPECT_EQ(f.read<std::int32_t>("/prompts/token_ids", H5T_NATIVE_INT32),
            (std::vector<std::int32_t>{11, 12, 13, 21, 22, 23, 24, 25}));
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    SCOPED_TRACE(p);
    EXPECT_EQ(f.prompt_string("id", p), prompts[p].record.id);
    EXPECT_EQ(f.prompt_string("text", p), prompts[p].record.text);
    EXPECT_EQ(f.prompt_string("completion", p), prompts[p].record.completion);
    EXPECT_EQ(f.prompt_string("finish_reason", p), prompts[p].record.finish_reason);
  }
  const auto text_offsets = f.read<std::int64_t>("/prompts/text_offsets", H5T_NATIVE_INT64);
  ASSERT_EQ(text_offsets.size(), 3u);
  EXPECT_EQ(text_offsets[0], 0);
  EXPECT_EQ(text_offsets[2], static_cast<std::int64_t>(prompts[0].record.text.size() + prompts[1].record.text.size()));
  EXPECT_THAT(f.attr_string("/prompts", "layout"), HasSubstr("text_bytes[text_offsets[p]:text_offsets[p+1]]"));
}

TEST(Hdf5Sink, RootAttributesAndCompleteFlag) {
  H5Reader f(write_scenario_file(temp_dir(), DType::bf16));
  EXPECT_EQ(f.attr_string("/", "schema"), "sonde.acts/1");
  EXPECT_EQ(f.attr_int("/", "complete"), 1);
  for (const auto& [key, value] : scenario_meta().strings) EXPECT_EQ(f.attr_string("/", key), value) << key;
  for (const auto& [key, value] : scenario_meta().ints) EXPECT_EQ(f.attr_int("/", key), value) << key;
}

TEST(Hdf5Sink, FileIsMarkedIncompleteUntilClose) {
  const auto path = (temp_dir() / "partial.h5").string();
  auto sink = make_hdf5_sink();
  sink->open(options_for(path, DType::f32), scenario_meta(), scenario_hooks());
  write_prompts(*sink);
  sink->flush();
  {
    H5Reader f(path);  // shares the writer's open file inside this process
    EXPECT_EQ(f.attr_int("/", "complete"), 0);
  }
  sink.reset();  // destroyed without close(): the file stays marked incomplete
  H5Reader f(path);
  EXPECT_EQ(f.attr_int("/", "complete"), 0);
  EXPECT_EQ(f.dims("/acts/blocks.0.hook_resid_post"), (std::vector<hsize_t>{7, 6}));
  EXPECT_EQ(first_mismatch(f.read<float>("/acts/blocks.0.hook_resid_post", H5T_NATIVE_FLOAT),
                           expected_acts(0, DType::f32)),
            "");
}

TEST(Hdf5Sink, WriteArrayKeepsNativeDtypeAndShape) {
  const auto path = (temp_dir() / "arrays.h5").string();
  auto sink = make_hdf5_sink();
  sink->open(options_for(path, DType::bf16), scenario_meta(), {});
  std::vector<std::int32_t> ids{5, 6, 7};
  std::vector<float> logits(3 * 5);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = act_value(2, 0, static_cast<int>(i), 1 + static_cast<int>(i));
  std::vector<std::int64_t> nested{-1, 1LL << 40};
  sink->write_array("/input_ids", TensorView(ids.data(), DType::i32, {3}));
  sink->write_array("/logits", TensorView(logits.data(), DType::f32, {3, 5}));
  sink->write_array("/extra/wide", TensorView(nested.data(), DType::i64, {2}));
  sink->close();
  H5Reader f(path);
  EXPECT_EQ(f.dims("/input_ids"), (std::vector<hsize_t>{3}));
  EXPECT_EQ(f.type_of("/input_ids").cls, H5T_INTEGER);
  EXPECT_EQ(f.type_of("/input_ids").size, 4u);
  EXPECT_EQ(f.read<std::int32_t>("/input_ids", H5T_NATIVE_INT32), ids);
  EXPECT_EQ(f.dims("/logits"), (std::vector<hsize_t>{3, 5}));
  EXPECT_EQ(f.type_of("/logits").size, 4u);  // f32 even though activations are stored as bf16
  EXPECT_EQ(first_mismatch(f.read<float>("/logits", H5T_NATIVE_FLOAT), logits), "");
  EXPECT_EQ(f.read<std::int64_t>("/extra/wide", H5T_NATIVE_INT64), nested);
}

TEST(Hdf5Sink, ChunksRunAlongRowsAndHoldAQuarterToOneMebibyte) {
  for (DType storage : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(storage));
    const auto path = (temp_dir() / "chunks.h5").string();
    auto sink = make_hdf5_sink();
    const std::vector<HookPoint> hooks{{"blocks.0.hook_resid_post", {896}}, {"blocks.0.attn.hook_q", {14, 64}}};
    sink->open(options_for(path, storage), scenario_meta(), hooks);
    sink->close();
    H5Reader f(path);
    for (const auto& hook : hooks) {
      const auto chunk = chunk_dims(f, "/acts/" + hook.name);
      ASSERT_EQ(chunk.size(), hook.row_shape.size() + 1);
      std::size_t bytes = chunk[0] * dtype_size(storage);
      for (std::size_t i = 0; i < hook.row_shape.size(); ++i) {
        EXPECT_EQ(chunk[i + 1], static_cast<hsize_t>(hook.row_shape[i]));
        bytes *= chunk[i + 1];
      }
      EXPECT_GE(bytes, 256u * 1024u) << hook.name;
      EXPECT_LE(bytes, 1024u * 1024u) << hook.name;
    }
  }
}

TEST(Hdf5Sink, CompressionAddsShuffleAndDeflateAndRoundTrips) {
  const auto path = (temp_dir() / "compressed.h5").string();
  auto sink = make_hdf5_sink();
  auto options = options_for(path, DType::f16);
  options.compress = true;
  sink->open(options, scenario_meta(), scenario_hooks());
  write_prompts(*sink);
  sink->close();
  H5Reader f(path);
  EXPECT_EQ(filters_of(f, "/acts/blocks.1.attn.hook_q"), (std::vector<H5Z_filter_t>{H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE}));
  EXPECT_EQ(first_mismatch(f.read<float>("/acts/blocks.1.attn.hook_q", H5T_NATIVE_FLOAT), expected_acts(1, DType::f16)), "");
}

TEST(Hdf5Sink, WantsOnlyTheHooksGivenToOpen) {
  auto sink = make_hdf5_sink();
  sink->open(options_for((temp_dir() / "w.h5").string(), DType::f32), scenario_meta(), scenario_hooks());
  EXPECT_TRUE(sink->wants("blocks.0.hook_resid_post"));
  EXPECT_TRUE(sink->wants("blocks.1.attn.hook_q"));
  EXPECT_FALSE(sink->wants("blocks.1.hook_resid_post"));
  EXPECT_FALSE(sink->wants("blocks.0"));
}

}  // namespace
}  // namespace sonde::test
