#pragma once
// Minimal HDF5 reading for tests: a dataset as doubles with its shape, and attributes.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sonde::test {

struct Array {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
  // The sub-array at index i of the first dimension.
  Array at(std::int64_t i) const;
};

std::vector<std::int64_t> as_ints(const Array& a);  // integer datasets read as doubles, back to ints
Array read_dataset(const std::filesystem::path& file, const std::string& path);
bool has_object(const std::filesystem::path& file, const std::string& path);
std::string read_string_attr(const std::filesystem::path& file, const std::string& name);
std::int64_t read_int_attr(const std::filesystem::path& file, const std::string& name);

// max|a - b| / max|b|; +inf on a shape mismatch or any NaN/Inf in a.
double normalised_error(const Array& a, const Array& ref);

}  // namespace sonde::test
