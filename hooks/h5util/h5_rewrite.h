#pragma once
// Small files rewritten whole at each checkpoint (the stats and feature-stats sinks): whole
// datasets in and out, and the rename that makes a new version appear at once.
#include "h5_handles.h"

#include <string>
#include <vector>

namespace sonde::h5 {

// A dataset `name` of `dims` from v (parent groups made), stored as file_type.
template <typename T>
void write_all(const Handle& f, const std::string& name, hid_t file_type, hid_t mem_type, const std::vector<T>& v,
               std::vector<hsize_t> dims) {
  const Handle space = create_space(dims, dims);
  const Handle d = create_dataset(f, name, file_type, space, Handle(), with_parent_groups());
  if (!v.empty()) check_rc(H5Dwrite(d.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), "write", d.where());
}

// Every element of dataset `name`, read as mem.
template <typename T>
std::vector<T> read_all(const Handle& f, const std::string& name, hid_t mem) {
  const Handle d = open_dataset(f, name);
  const Handle space = dataset_space(d);
  const auto n = H5Sget_simple_extent_npoints(space.id());
  std::vector<T> v(static_cast<std::size_t>(n));
  if (n > 0) check_rc(H5Dread(d.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), "read", d.where());
  return v;
}

// Renames the finished `tmp` over `path` (a reader sees the old file or the new, never half of
// one); `durable`: the file and then its directory synced to disk. Runtime error naming `what`.
void replace_file(const std::string& tmp, const std::string& path, bool durable, const char* what);

}  // namespace sonde::h5
