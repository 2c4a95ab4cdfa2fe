#include "h5_check.h"

#include <hdf5.h>

namespace sonde::test {

namespace {

// Closes an HDF5 id with its matching function when it goes out of scope.
struct Id {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Id() {
    if (id >= 0) close(id);
  }
};

hid_t open_file(const std::filesystem::path& file) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // no error stack dumps in test output
  return H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
}

}  // namespace

std::optional<std::int64_t> complete_attr(const std::filesystem::path& file) { return int_attr(file, "complete"); }

std::optional<std::int64_t> int_attr(const std::filesystem::path& file, const std::string& name) {
  Id f{open_file(file), H5Fclose};
  if (f.id < 0 || H5Aexists(f.id, name.c_str()) <= 0) return std::nullopt;
  Id a{H5Aopen(f.id, name.c_str(), H5P_DEFAULT), H5Aclose};
  std::int64_t v = -1;
  if (a.id < 0 || H5Aread(a.id, H5T_NATIVE_INT64, &v) < 0) return std::nullopt;
  return v;
}

std::vector<std::int64_t> dataset_shape(const std::filesystem::path& file, const std::string& path) {
  Id f{open_file(file), H5Fclose};
  if (f.id < 0 || H5Lexists(f.id, path.c_str(), H5P_DEFAULT) <= 0) return {};
  Id d{H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose};
  Id s{H5Dget_space(d.id), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(s.id);
  if (rank <= 0) return {};
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(s.id, dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

std::vector<std::int64_t> read_ints(const std::filesystem::path& file, const std::string& path) {
  const auto shape = dataset_shape(file, path);
  if (shape.size() != 1) return {};
  Id f{open_file(file), H5Fclose};
  Id d{H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose};
  std::vector<std::int64_t> v(static_cast<std::size_t>(shape[0]));
  if (!v.empty() && H5Dread(d.id, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) return {};
  return v;
}

}  // namespace sonde::test
