#pragma once
// Shared by the sink tests: writing the scenario through a sink, the values expected back, and
// small readers of dataset creation properties.
#include "h5_read.h"
#include "scenario.h"
#include "sink_under_test.h"

#include <sonde/dtype.h>
#include <sonde/error.h>
#include <sonde/tensor.h>

#include <gtest/gtest.h>
#include <test_paths.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace sonde::test {

// Runs f, which must throw sonde::Error of `kind`; returns the message.
template <typename F>
std::string error_of(F&& f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no sonde::Error thrown";
  return "";
}

// Runs a shell command; its exit status and combined output.
inline std::pair<int, std::string> run_shell(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) output.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

inline SinkOptions options_for(const std::string& path, DType storage) {
  SinkOptions o;
  o.path = path;
  o.storage = storage;
  return o;
}

inline std::int64_t row_size(const HookPoint& hook) {
  std::int64_t n = 1;
  for (auto d : hook.row_shape) n *= d;
  return n;
}

// Rows [begin, end) of a prompt for hook h, as a [n, *row_shape] f32 tensor. With `padded`, each
// row is followed by two junk floats and the view is strided (not contiguous), as a slice of a
// larger activation would be.
struct RowsBuffer {
  Tensor storage;
  TensorView view;
};

inline RowsBuffer make_rows(int h, const HookPoint& hook, const std::vector<RowRecord>& rows, std::size_t begin,
                            std::size_t end, bool padded) {
  const std::int64_t n = static_cast<std::int64_t>(end - begin), width = row_size(hook), pitch = width + (padded ? 2 : 0);
  RowsBuffer b{Tensor(DType::f32, {n, pitch}), {}};
  float* data = b.storage.data<float>();
  for (std::int64_t r = 0; r < n; ++r) {
    const auto& row = rows[begin + static_cast<std::size_t>(r)];
    for (std::int64_t c = 0; c < pitch; ++c)
      data[r * pitch + c] = c < width ? act_value(h, row.prompt_idx, row.pos, c) : -12345.0f;
  }
  std::vector<std::int64_t> dims{n};
  dims.insert(dims.end(), hook.row_shape.begin(), hook.row_shape.end());
  b.view = TensorView(data, DType::f32, Shape::of(dims.data(), static_cast<int>(dims.size())));
  b.view.strides[0] = pitch;
  return b;
}

// Prompt 3 arrives in one delivery per hook; prompt 8 in two, the second through a strided view.
inline void write_prompts(Sink& sink) {
  const auto hooks = scenario_hooks();
  for (const auto& p : scenario_prompts()) {
    const std::size_t n = p.rows.size(), split = n > 3 ? 2 : n;
    for (int h = 0; h < static_cast<int>(hooks.size()); ++h) {
      const TapRecord rec{hooks[static_cast<std::size_t>(h)].name, p.record.prompt_idx};
      sink.write(rec, make_rows(h, hooks[static_cast<std::size_t>(h)], p.rows, 0, split, false).view);
      if (split < n) sink.write(rec, make_rows(h, hooks[static_cast<std::size_t>(h)], p.rows, split, n, true).view);
    }
    sink.add_rows(p.rows);
    sink.end_prompt(p.record);
  }
}

inline std::string write_scenario_file(const std::filesystem::path& dir, DType storage) {
  const auto path = (dir / ("scenario-" + std::string(dtype_name(storage)) + ".h5")).string();
  auto sink = make_hdf5_sink();
  sink->open(options_for(path, storage), scenario_meta(), scenario_hooks());
  write_prompts(*sink);
  sink->close();
  return path;
}

inline float rounded(float x, DType storage) {
  if (storage == DType::bf16) return bf16_to_f32(f32_to_bf16(x));
  if (storage == DType::f16) return f16_to_f32(f32_to_f16(x));
  return x;
}

// Every row of hook h over the scenario's prompts, flattened, as storage `storage` holds them.
inline std::vector<float> expected_acts(int h, DType storage) {
  const auto hook = scenario_hooks()[static_cast<std::size_t>(h)];
  std::vector<float> out;
  for (const auto& p : scenario_prompts())
    for (const auto& row : p.rows)
      for (std::int64_t c = 0; c < row_size(hook); ++c) out.push_back(rounded(act_value(h, row.prompt_idx, row.pos, c), storage));
  return out;
}

// "" when equal bit for bit, else the first differing index and both values.
inline std::string first_mismatch(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return "index " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
  return "";
}

inline std::vector<hsize_t> chunk_dims(const H5Reader& f, const std::string& path) {
  const hid_t ds = H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(ds);
  std::vector<hsize_t> chunk(8);
  const int rank = H5Pget_chunk(dcpl, 8, chunk.data());
  chunk.resize(rank > 0 ? static_cast<std::size_t>(rank) : 0);
  H5Pclose(dcpl);
  H5Dclose(ds);
  return chunk;
}

inline std::vector<H5Z_filter_t> filters_of(const H5Reader& f, const std::string& path) {
  const hid_t ds = H5Dopen2(f.id(), path.c_str(), H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(ds);
  std::vector<H5Z_filter_t> out;
  for (int i = 0; i < H5Pget_nfilters(dcpl); ++i) {
    unsigned flags = 0, config = 0;
    std::size_t n = 0;
    out.push_back(H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &n, nullptr, 0, nullptr, &config));
  }
  H5Pclose(dcpl);
  H5Dclose(ds);
  return out;
}

}  // namespace sonde::test
