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

std::optional<std::string> string_attr(const std::filesystem::path& file, const std::string& name) {
  Id f{open_file(file), H5Fclose};
  if (f.id < 0 || H5Aexists(f.id, name.c_str()) <= 0) return std::nullopt;
  Id a{H5Aopen(f.id, name.c_str(), H5P_DEFAULT), H5Aclose};
  Id t{H5Aget_type(a.id), H5Tclose};
  if (a.id < 0 || t.id < 0 || H5Tget_class(t.id) != H5T_STRING) return std::nullopt;
  if (H5Tis_variable_str(t.id) > 0) {
    Id mt{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mt.id, H5T_VARIABLE);
    H5Tset_cset(mt.id, H5Tget_cset(t.id));
    char* s = nullptr;
    if (H5Aread(a.id, mt.id, &s) < 0) return std::nullopt;
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string out(H5Tget_size(t.id), '\0');
  if (H5Aread(a.id, t.id, out.data()) < 0) return std::nullopt;
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
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

std::vector<float> read_floats(const std::filesystem::path& file, const std::string& path) {
  const auto shape = dataset_shape(file, path);
  if (shape.empty()) return {};
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  Id f{open_file(file), H5Fclose};
  Id d{H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose};
  std::vector<float> v(n);
  if (n && H5Dread(d.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) return {};
  return v;
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
