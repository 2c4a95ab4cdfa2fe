#pragma once
// Checks on the output path made before HDF5 sees it, so that the common mistakes (a missing or
// read-only directory, an existing file) become BadInput errors in plain words.
#include <string>

namespace sonde::hdf5 {

void check_output_path(const std::string& path, bool overwrite);

}  // namespace sonde::hdf5
