#pragma once
// Every dataset of a file as raw bytes in its stored type (no conversion), for exact comparisons
// between files: a resumed run against an uninterrupted one, streaming against one-shot.
#include <hdf5.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace sonde::test {

struct RawDataset {
  std::vector<hsize_t> dims;
  std::size_t elem_size = 0;
  std::vector<unsigned char> bytes;
};

using RawFile = std::map<std::string, RawDataset>;

inline RawDataset read_raw(hid_t file, const std::string& path) {
  RawDataset d;
  const hid_t ds = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (ds < 0) throw std::runtime_error("cannot open " + path);
  const hid_t space = H5Dget_space(ds), type = H5Dget_type(ds);
  d.dims.resize(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)));
  H5Sget_simple_extent_dims(space, d.dims.data(), nullptr);
  d.elem_size = H5Tget_size(type);
  d.bytes.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)) * d.elem_size);
  const bool ok = d.bytes.empty() || H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.bytes.data()) >= 0;
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(ds);
  if (!ok) throw std::runtime_error("cannot read " + path);
  return d;
}

inline RawFile read_all(const std::string& file_path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + file_path);
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* out) -> herr_t {
    if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
    return 0;
  };
  H5Ovisit(f, H5_INDEX_NAME, H5_ITER_NATIVE, visit, &names);
  RawFile out;
  for (const auto& n : names) out[n] = read_raw(f, n);
  H5Fclose(f);
  return out;
}

// "" when `got` holds exactly the datasets of `want` (those under `prefix`), else the first difference.
inline std::string raw_difference(const RawFile& got, const RawFile& want, const std::string& prefix = "/") {
  for (const auto& [name, w] : want) {
    if (name.rfind(prefix, 0) != 0) continue;
    const auto it = got.find(name);
    if (it == got.end()) return name + " is missing";
    if (it->second.dims != w.dims) return name + " has a different shape";
    if (it->second.bytes != w.bytes) return name + " has different contents";
  }
  for (const auto& [name, g] : got)
    if (name.rfind(prefix, 0) == 0 && !want.count(name)) return name + " is unexpected";
  return "";
}

// The element count of a 1-D dataset, or the rows of a higher-rank one.
inline hsize_t rows_of(const RawDataset& d) { return d.dims.empty() ? 1 : d.dims.front(); }

// True if `got` is the first rows of `want`.
inline bool is_row_prefix(const RawDataset& got, const RawDataset& want) {
  if (got.dims.size() != want.dims.size() || rows_of(got) > rows_of(want)) return false;
  return std::equal(got.bytes.begin(), got.bytes.end(), want.bytes.begin());
}

}  // namespace sonde::test
