#pragma once
// Reading back what the sink wrote, through the plain HDF5 C API (independent of the sink's own
// wrapper). Failures throw std::runtime_error naming the object, which gtest reports.
#include <hdf5.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sonde::test {

class H5Reader {
 public:
  explicit H5Reader(const std::string& path) : path_(path) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~H5Reader() { H5Fclose(file_); }
  H5Reader(const H5Reader&) = delete;
  H5Reader& operator=(const H5Reader&) = delete;

  hid_t id() const { return file_; }
  bool exists(const std::string& path) const { return H5Lexists(file_, path.c_str(), H5P_DEFAULT) > 0; }

  std::vector<hsize_t> dims(const std::string& path) const {
    Obj ds(H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose, path);
    Obj space(H5Dget_space(ds.id), H5Sclose, path);
    std::vector<hsize_t> d(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space.id)));
    H5Sget_simple_extent_dims(space.id, d.data(), nullptr);
    return d;
  }

  // Reads the whole dataset converted to `mem_type` (HDF5 converts from the stored type).
  template <typename T>
  std::vector<T> read(const std::string& path, hid_t mem_type) const {
    Obj ds(H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose, path);
    Obj space(H5Dget_space(ds.id), H5Sclose, path);
    std::vector<T> out(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.id)));
    if (!out.empty() && H5Dread(ds.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
      throw std::runtime_error("cannot read " + path);
    return out;
  }

  // The stored type of a dataset: class, size and whether it is a committed (named) type.
  struct TypeInfo {
    H5T_class_t cls;
    std::size_t size;
    bool committed;
  };
  TypeInfo type_of(const std::string& path) const {
    Obj ds(H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose, path);
    Obj t(H5Dget_type(ds.id), H5Tclose, path);
    return {H5Tget_class(t.id), H5Tget_size(t.id), H5Tcommitted(t.id) > 0};
  }

  std::string attr_string(const std::string& obj, const std::string& name) const {
    Obj a(H5Aopen_by_name(file_, obj.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose, obj + "@" + name);
    Obj t(H5Tcopy(H5T_C_S1), H5Tclose, name);
    H5Tset_size(t.id, H5T_VARIABLE);
    H5Tset_cset(t.id, H5T_CSET_UTF8);
    char* s = nullptr;
    if (H5Aread(a.id, t.id, &s) < 0) throw std::runtime_error("cannot read attribute " + obj + "@" + name);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }

  std::vector<std::int64_t> attr_ints(const std::string& obj, const std::string& name) const {
    Obj a(H5Aopen_by_name(file_, obj.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose, obj + "@" + name);
    Obj space(H5Aget_space(a.id), H5Sclose, name);
    std::vector<std::int64_t> out(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.id)));
    if (H5Aread(a.id, H5T_NATIVE_INT64, out.data()) < 0) throw std::runtime_error("cannot read " + obj + "@" + name);
    return out;
  }
  std::int64_t attr_int(const std::string& obj, const std::string& name) const { return attr_ints(obj, name).at(0); }

  // Entry p of a bytes+offsets string field of /prompts.
  std::string prompt_string(const std::string& field, std::size_t p) const {
    auto bytes = read<std::uint8_t>("/prompts/" + field + "_bytes", H5T_NATIVE_UINT8);
    auto offsets = read<std::int64_t>("/prompts/" + field + "_offsets", H5T_NATIVE_INT64);
    const auto b = static_cast<std::size_t>(offsets.at(p)), e = static_cast<std::size_t>(offsets.at(p + 1));
    return std::string(bytes.begin() + static_cast<std::ptrdiff_t>(b), bytes.begin() + static_cast<std::ptrdiff_t>(e));
  }

 private:
  struct Obj {
    hid_t id;
    herr_t (*close)(hid_t);
    Obj(hid_t i, herr_t (*c)(hid_t), const std::string& what) : id(i), close(c) {
      if (id < 0) throw std::runtime_error("cannot open " + what);
    }
    ~Obj() { close(id); }
  };
  std::string path_;
  hid_t file_;
};

}  // namespace sonde::test
