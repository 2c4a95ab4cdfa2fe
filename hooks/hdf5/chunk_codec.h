#pragma once
// HDF5's shuffle + deflate filters, done in our own code so that compression runs outside the
// HDF5 library's global lock; the result is written with H5Dwrite_chunk and read back by any
// HDF5 reader (h5py included) through the dataset's ordinary filter pipeline.
#include <cstddef>
#include <vector>

namespace sonde::h5 {

// Byte-transposes `n_bytes` of `elem_size`-byte elements (all first bytes, then all second
// bytes, ...) as H5Z_FILTER_SHUFFLE does, then compresses with zlib at `level` as
// H5Z_FILTER_DEFLATE does. Throws sonde::Error if zlib fails.
std::vector<unsigned char> shuffle_deflate(const unsigned char* data, std::size_t n_bytes, std::size_t elem_size,
                                           int level);

}  // namespace sonde::h5
