#include "output_path.h"

#include <sonde/error.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace sonde::hdf5 {

void check_output_path(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  if (path.empty()) bad_input("HDF5 sink: no output path given");
  const fs::path file(path);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    bad_input("cannot write {}: output directory {} does not exist or is not a directory", path, dir.string());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    bad_input("cannot write {}: output directory {} is not writable ({})", path, dir.string(), std::strerror(errno));
  if (fs::is_directory(file, ec)) bad_input("cannot write {}: it is a directory", path);
  if (fs::exists(file, ec) && !overwrite)
    bad_input("{} already exists; refusing to overwrite it (ask for overwrite to replace it)", path);
}

}  // namespace sonde::hdf5
