// Stock h5py (Debian's python3-h5py, run by the system interpreter: toolchain §1) reads every
// dataset of a sink file; check_h5py.py recomputes the expected values with numpy.
#include "sink_test_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace sonde::test {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

class StockH5py : public ::testing::TestWithParam<DType> {};

TEST_P(StockH5py, ReadsEveryDatasetWithTheExpectedValues) {
  SONDE_REQUIRE_PACKAGE(run_shell(std::string(kPython) + " -c 'import h5py'").first == 0, "python3-h5py");
  const DType storage = GetParam();
  const auto path = write_scenario_file(temp_dir(), storage);
  std::string command = std::string(kPython) + " " + SONDE_SINK_TEST_DIR "/check_h5py.py '" + path + "' " +
                        std::string(dtype_name(storage));
  for (const auto& h : scenario_hooks()) command += " " + h.name;
  command += " --";
  for (const auto& p : scenario_prompts()) command += " " + hex(p.record.text);
  const auto [status, output] = run_shell(command);
  EXPECT_EQ(status, 0) << command << "\n" << output;
}

INSTANTIATE_TEST_SUITE_P(Hdf5Sink, StockH5py, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace sonde::test
