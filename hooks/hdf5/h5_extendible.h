#pragma once
// A dataset that grows along its first dimension: shape [0, *row_dims], maxdims
// [UNLIMITED, *row_dims], chunked along rows only. It is created whole at open time, because a
// later SWMR mode may create no objects once writing starts (toolchain §4).
#include "h5_handles.h"

#include <cstddef>
#include <string>
#include <vector>

namespace sonde::h5 {

// Rows per chunk: the largest power of two with rows * row_bytes <= target (at least one row).
// With the 1 MiB default this gives chunks of 512 KiB to 1 MiB, which fit HDF5's default
// per-dataset chunk cache (1 MiB) so partial-chunk appends do not re-read from disk.
hsize_t chunk_rows_for(std::size_t row_bytes, std::size_t target = std::size_t{1} << 20);

struct ExtendibleSpec {
  hid_t file_type = H5I_INVALID_HID;
  std::vector<hsize_t> row_dims;  // empty for a 1-D column
  hsize_t chunk_rows = 1;
  bool compress = false;          // shuffle + deflate(1)
};

class Extendible {
 public:
  Extendible() = default;
  static Extendible create(const Handle& loc, const std::string& name, const ExtendibleSpec& spec);
  // An existing dataset (streaming reopen); rows() is its current extent.
  static Extendible open(const Handle& loc, const std::string& name);

  // Appends `rows` contiguous rows of `mem_type` elements. Rows are gathered in memory and
  // written about 256 KiB at a time: one extent change and one write per batch instead of per
  // call, which is what keeps per-prompt appends cheap. write_pending() and flush() write them.
  void append(const void* data, hsize_t rows, hid_t mem_type);
  // Writes the gathered rows. The extent is only counted once the write succeeded.
  void write_pending() { write_gathered(true); }
  hsize_t rows() const { return rows_ + pending_rows_; }
  // Shrinks the extent to `rows` (resume drops uncommitted rows); more rows than the dataset
  // holds means the file does not match its /progress, which is an error.
  void truncate(hsize_t rows);
  // Writes the gathered rows, then makes the dataset's data and metadata durable for a SWMR
  // reader or a crash (H5Dflush).
  void flush();
  // Element `row` of a 1-D column.
  void read_at(hsize_t row, void* out, hid_t mem_type) const;
  const Handle& handle() const { return ds_; }
  void close() {  // gathered rows not yet written are dropped: call flush() first to keep them
    pending_.clear();
    pending_rows_ = 0;
    ds_.close();
  }

 private:
  // Writes what was gathered: with `all` false, a compressed dataset writes only up to its last
  // whole chunk and keeps the rest gathered.
  void write_gathered(bool all);
  // Rows through HDF5's own write (and filter pipeline).
  void write_rows(const unsigned char* data, hsize_t rows);
  // One whole, chunk-aligned chunk, compressed by us and written with H5Dwrite_chunk.
  void write_compressed_chunk(const unsigned char* data);
  bool can_write_chunks() const;

  Handle ds_;
  std::vector<hsize_t> row_dims_;
  hsize_t rows_ = 0;
  std::vector<unsigned char> pending_;
  hsize_t pending_rows_ = 0;
  hid_t pending_type_ = H5I_INVALID_HID;
  bool compressed_ = false;  // shuffle + deflate(1), as chunked_props() sets them
  hsize_t chunk_rows_ = 1;
  std::size_t file_elem_size_ = 0;
};

}  // namespace sonde::h5
