#include "chunk_codec.h"

#include <sonde/error.h>

#include <zlib.h>

namespace sonde::h5 {

std::vector<unsigned char> shuffle_deflate(const unsigned char* data, std::size_t n_bytes, std::size_t elem_size,
                                           int level) {
  // Shuffle: byte b of element i goes to b * n + i; trailing bytes that do not fill an element
  // stay in place (HDF5 does the same; whole rows never leave any).
  std::vector<unsigned char> shuffled(data, data + n_bytes);
  const std::size_t n = elem_size > 1 ? n_bytes / elem_size : 0;
  for (std::size_t b = 0; b < elem_size && n; ++b)
    for (std::size_t i = 0; i < n; ++i) shuffled[b * n + i] = data[i * elem_size + b];
  uLongf out_len = compressBound(static_cast<uLong>(n_bytes));
  std::vector<unsigned char> out(out_len);
  const int rc = compress2(out.data(), &out_len, shuffled.data(), static_cast<uLong>(n_bytes), level);
  if (rc != Z_OK) runtime_error("HDF5 sink: zlib compress2 failed with code {} on a {}-byte chunk", rc, n_bytes);
  out.resize(out_len);
  return out;
}

}  // namespace sonde::h5
