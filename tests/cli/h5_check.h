#pragma once
// Just enough HDF5 reading for the CLI tests, through the HDF5 C API.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sonde::test {

// The root attribute `complete` (int64), or nullopt when the file cannot be opened as HDF5 or
// has no such attribute.
std::optional<std::int64_t> complete_attr(const std::filesystem::path& file);
// Any integer root attribute, the same way.
std::optional<std::int64_t> int_attr(const std::filesystem::path& file, const std::string& name);
// A string root attribute (fixed or variable length), or nullopt when absent or unreadable.
std::optional<std::string> string_attr(const std::filesystem::path& file, const std::string& name);
// The dimensions of a dataset (empty when it is absent).
std::vector<std::int64_t> dataset_shape(const std::filesystem::path& file, const std::string& path);
// A dataset of any rank read as f32, flattened (empty when absent).
std::vector<float> read_floats(const std::filesystem::path& file, const std::string& path);
// A 1-D integer dataset read as int64.
std::vector<std::int64_t> read_ints(const std::filesystem::path& file, const std::string& path);

}  // namespace sonde::test
