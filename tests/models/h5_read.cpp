#include "h5_read.h"

#include <hdf5.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace sonde::test {

namespace {
struct Closer {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Closer() {
    if (id >= 0) close(id);
  }
};
hid_t open_file(const std::filesystem::path& file) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + file.string());
  return f;
}
}  // namespace

Array Array::at(std::int64_t i) const {
  Array a;
  a.shape.assign(shape.begin() + 1, shape.end());
  std::int64_t n = 1;
  for (auto d : a.shape) n *= d;
  a.values.assign(values.begin() + i * n, values.begin() + (i + 1) * n);
  return a;
}

std::vector<std::int64_t> as_ints(const Array& a) { return {a.values.begin(), a.values.end()}; }

Array read_dataset(const std::filesystem::path& file, const std::string& path) {
  Closer f{open_file(file), H5Fclose};
  Closer d{H5Dopen2(f.id, path.c_str(), H5P_DEFAULT), H5Dclose};
  if (d.id < 0) throw std::runtime_error(file.string() + ": no dataset " + path);
  Closer s{H5Dget_space(d.id), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(s.id);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(s.id, dims.data(), nullptr);
  Array a;
  std::size_t n = 1;
  for (auto x : dims) a.shape.push_back(static_cast<std::int64_t>(x)), n *= x;
  a.values.resize(n);
  if (n && H5Dread(d.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.values.data()) < 0)
    throw std::runtime_error(file.string() + ": cannot read " + path);
  return a;
}

bool has_object(const std::filesystem::path& file, const std::string& path) {
  Closer f{open_file(file), H5Fclose};
  return H5Lexists(f.id, path.c_str(), H5P_DEFAULT) > 0;
}

std::string read_string_attr(const std::filesystem::path& file, const std::string& name) {
  Closer f{open_file(file), H5Fclose};
  Closer a{H5Aopen(f.id, name.c_str(), H5P_DEFAULT), H5Aclose};
  if (a.id < 0) throw std::runtime_error(file.string() + ": no attribute " + name);
  Closer t{H5Aget_type(a.id), H5Tclose};
  if (H5Tis_variable_str(t.id) > 0) {
    char* s = nullptr;
    Closer mt{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mt.id, H5T_VARIABLE);
    H5Tset_cset(mt.id, H5Tget_cset(t.id));
    if (H5Aread(a.id, mt.id, &s) < 0) throw std::runtime_error("cannot read attribute " + name);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string out(H5Tget_size(t.id), '\0');
  H5Aread(a.id, t.id, out.data());
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

std::int64_t read_int_attr(const std::filesystem::path& file, const std::string& name) {
  Closer f{open_file(file), H5Fclose};
  Closer a{H5Aopen(f.id, name.c_str(), H5P_DEFAULT), H5Aclose};
  if (a.id < 0) throw std::runtime_error(file.string() + ": no attribute " + name);
  std::int64_t v = 0;
  H5Aread(a.id, H5T_NATIVE_INT64, &v);
  return v;
}

double normalised_error(const Array& a, const Array& ref) {
  if (a.shape != ref.shape) return std::numeric_limits<double>::infinity();
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    if (!std::isfinite(a.values[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(a.values[i] - ref.values[i]));
    scale = std::max(scale, std::abs(ref.values[i]));
  }
  return scale > 0 ? err / scale : err;
}

}  // namespace sonde::test
