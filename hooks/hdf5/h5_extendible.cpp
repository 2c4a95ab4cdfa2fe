#include "h5_extendible.h"

#include <sonde/error.h>

#include <bit>

namespace sonde::h5 {
namespace {

Handle chunked_props(const ExtendibleSpec& spec, const std::string& where) {
  Handle dcpl = create_props(H5P_DATASET_CREATE, "for " + where);
  std::vector<hsize_t> chunk{spec.chunk_rows};
  chunk.insert(chunk.end(), spec.row_dims.begin(), spec.row_dims.end());
  for (auto& d : chunk) d = d ? d : 1;  // a zero-sized dimension still needs a chunk extent
  check_rc(H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()), "set chunking of", where);
  if (spec.compress) {
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0) fail("compress (deflate is not available)", where);
    check_rc(H5Pset_shuffle(dcpl.id()), "set the shuffle filter of", where);
    // Level 1: higher levels cost twice the time for no gain on float mantissas (toolchain §4).
    check_rc(H5Pset_deflate(dcpl.id(), 1), "set the deflate filter of", where);
  }
  return dcpl;
}

}  // namespace

hsize_t chunk_rows_for(std::size_t row_bytes, std::size_t target) {
  if (row_bytes == 0 || row_bytes >= target) return 1;
  return std::bit_floor(target / row_bytes);
}

Extendible Extendible::create(const Handle& loc, const std::string& name, const ExtendibleSpec& spec) {
  const std::string where = "'" + loc.child(name) + "' in " + loc.file();
  std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED};
  dims.insert(dims.end(), spec.row_dims.begin(), spec.row_dims.end());
  maxdims.insert(maxdims.end(), spec.row_dims.begin(), spec.row_dims.end());
  Extendible e;
  e.ds_ = create_dataset(loc, name, spec.file_type, create_space(dims, maxdims),
                         chunked_props(spec, where));
  e.row_dims_ = spec.row_dims;
  return e;
}

Extendible Extendible::open(const Handle& loc, const std::string& name) {
  Extendible e;
  e.ds_ = open_dataset(loc, name);
  Handle space = dataset_space(e.ds_);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 1) fail("use as a table of rows", e.ds_.where());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  check_rc(H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr), "get the extent of", e.ds_.where());
  e.rows_ = dims.front();
  e.row_dims_.assign(dims.begin() + 1, dims.end());
  return e;
}

void Extendible::truncate(hsize_t rows) {
  write_pending();
  if (rows > rows_)
    throw Error(ErrorKind::Runtime, "HDF5: cannot trim " + ds_.where() + " to " + std::to_string(rows) +
                                        " committed rows: it holds only " + std::to_string(rows_));
  std::vector<hsize_t> extent{rows};
  extent.insert(extent.end(), row_dims_.begin(), row_dims_.end());
  check_rc(H5Dset_extent(ds_.id(), extent.data()), "trim to " + std::to_string(rows) + " rows", ds_.where());
  rows_ = rows;
}

void Extendible::flush() {
  write_pending();
  check_rc(H5Dflush(ds_.id()), "flush", ds_.where());
}

void Extendible::read_at(hsize_t row, void* out, hid_t mem_type) const {
  const std::string what = "read row " + std::to_string(row) + " of";
  if (row >= rows_ || !row_dims_.empty()) fail(what, ds_.where());  // gathered rows are not readable yet
  Handle file_space = dataset_space(ds_);
  const hsize_t one = 1;
  check_rc(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, &row, nullptr, &one, nullptr), what, ds_.where());
  Handle mem_space = create_space({1}, {1});
  check_rc(H5Dread(ds_.id(), mem_type, mem_space.id(), file_space.id(), H5P_DEFAULT, out), what, ds_.where());
}

namespace {
constexpr std::size_t kPendingBytes = std::size_t{256} << 10;
}

void Extendible::append(const void* data, hsize_t rows, hid_t mem_type) {
  if (rows == 0) return;
  if (pending_rows_ && H5Tequal(mem_type, pending_type_) <= 0) write_pending();
  std::size_t row_bytes = H5Tget_size(mem_type);
  for (auto d : row_dims_) row_bytes *= d;
  const auto* bytes = static_cast<const unsigned char*>(data);
  pending_.insert(pending_.end(), bytes, bytes + row_bytes * rows);
  pending_rows_ += rows;
  pending_type_ = mem_type;
  if (pending_.size() >= kPendingBytes) write_pending();
}

void Extendible::write_pending() {
  if (pending_rows_ == 0) return;
  const hsize_t rows = pending_rows_;
  std::vector<hsize_t> extent{rows_ + rows}, start{rows_}, count{rows};
  extent.insert(extent.end(), row_dims_.begin(), row_dims_.end());
  count.insert(count.end(), row_dims_.begin(), row_dims_.end());
  start.resize(count.size(), 0);
  const std::string what = "append " + std::to_string(rows) + " rows at row " + std::to_string(rows_) + " to";
  check_rc(H5Dset_extent(ds_.id(), extent.data()), what, ds_.where());
  Handle file_space = dataset_space(ds_);
  check_rc(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
           what, ds_.where());
  Handle mem_space = create_space(count, count);
  check_rc(H5Dwrite(ds_.id(), pending_type_, mem_space.id(), file_space.id(), H5P_DEFAULT, pending_.data()), what,
           ds_.where());
  rows_ += rows;
  pending_.clear();
  pending_rows_ = 0;
}

}  // namespace sonde::h5
