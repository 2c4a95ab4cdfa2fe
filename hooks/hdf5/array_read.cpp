// The hdf5 plugin as core's ArrayReader (array_reader.h): whole datasets of any sonde file or
// of a file written by h5py, for edits' vectors and patch sources.
#include "hdf5_sink.h"

#include <sonde/error.h>

#include <filesystem>
#include <fstream>

namespace sonde::hdf5 {

namespace {

h5::Handle open_readable(const std::string& file) {
  h5::silence_errors();
  if (!std::filesystem::exists(file)) bad_input("{}: no such file", file);
  return h5::open_file(file, H5F_ACC_RDONLY);
}

}  // namespace

// .h5 / .hdf5, or the HDF5 signature at the start of the file (HDF5 file format spec, superblock).
bool Hdf5Sink::reads(const std::string& file) const {
  const auto ext = std::filesystem::path(file).extension();
  if (ext == ".h5" || ext == ".hdf5") return true;
  std::ifstream in(file, std::ios::binary);
  char sig[8] = {};
  return in.read(sig, 8) && std::string(sig, 8) == std::string("\x89HDF\r\n\x1a\n", 8);
}

bool Hdf5Sink::has(const std::string& file, const std::string& dataset) const {
  const h5::Handle f = open_readable(file);
  // Each step of the path must exist before H5Lexists may look below it.
  std::string at;
  std::size_t from = 1;
  while (from <= dataset.size()) {
    const auto slash = dataset.find('/', from);
    at = dataset.substr(0, slash);
    if (H5Lexists(f.id(), at.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) break;
    from = slash + 1;
  }
  return true;
}

Tensor Hdf5Sink::read(const std::string& file, const std::string& dataset) const {
  if (!has(file, dataset)) bad_input("{}: no dataset '{}'", file, dataset);
  const h5::Handle f = open_readable(file);
  const h5::Handle d = h5::open_dataset(f, dataset);
  const h5::Handle space = h5::dataset_space(d);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0 || rank > 4) bad_input("{}: dataset '{}' has rank {}; at most 4 is read", file, dataset, rank);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  Shape shape;
  shape.rank = rank;
  for (int i = 0; i < rank; ++i) shape[i] = static_cast<std::int64_t>(dims[static_cast<std::size_t>(i)]);
  const h5::Handle type(H5Dget_type(d.id()), H5Tclose, file, dataset);
  const H5T_class_t cls = H5Tget_class(type.id());
  DType dt;
  hid_t mem;
  if (cls == H5T_FLOAT) {
    dt = DType::f32;
    mem = H5T_NATIVE_FLOAT;
  } else if (cls == H5T_INTEGER && H5Tget_size(type.id()) == 1 && H5Tget_sign(type.id()) == H5T_SGN_NONE) {
    dt = DType::u8;
    mem = H5T_NATIVE_UINT8;
  } else if (cls == H5T_INTEGER) {
    dt = DType::i64;
    mem = H5T_NATIVE_INT64;
  } else {
    bad_input("{}: dataset '{}' is neither a float nor an integer array", file, dataset);
  }
  Tensor t(dt, shape);
  if (shape.numel() > 0)
    h5::check_rc(H5Dread(d.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.view().data), "read", d.where());
  return t;
}

std::optional<std::string> Hdf5Sink::root_attr(const std::string& file, const std::string& name) const {
  const h5::Handle f = open_readable(file);
  if (!h5::has_attr(f, name)) return std::nullopt;
  return h5::read_string_attr(f, name);
}

}  // namespace sonde::hdf5
