#pragma once
// Recovery of a SWMR file whose writer was killed. HDF5 1.10 leaves the superblock's status flags
// set and its end-of-allocation stale; the file then refuses to open for writing, and objects
// beyond the stale EOA (the global heap among them) are unreadable. The library has no public call
// to repair this, so we run its tool: `h5clear -s --increment` (toolchain §4; plain -s is not
// enough). Only for files no live process is writing.
#include <string>

namespace sonde::hdf5 {

// Throws Runtime naming the file and the package (hdf5-tools) if h5clear is missing or fails.
void clear_status_flags(const std::string& path);

// True if the file starts with the HDF5 signature (we never write a user block).
bool looks_like_hdf5(const std::string& path);

}  // namespace sonde::hdf5
