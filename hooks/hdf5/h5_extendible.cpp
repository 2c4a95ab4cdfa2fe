#include "h5_extendible.h"

#include "chunk_codec.h"

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
  e.compressed_ = spec.compress;
  e.chunk_rows_ = spec.chunk_rows;
  e.file_elem_size_ = H5Tget_size(spec.file_type);
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
  // A reopened dataset keeps its layout: compressed iff created with filters (ours: shuffle +
  // deflate), and its chunk rows.
  Handle dcpl(check_id(H5Dget_create_plist(e.ds_.id()), "get the creation properties of", e.ds_.where()), H5Pclose,
              e.ds_.file(), e.ds_.object());
  e.compressed_ = H5Pget_nfilters(dcpl.id()) > 0;
  std::vector<hsize_t> chunk(static_cast<std::size_t>(rank));
  if (H5Pget_chunk(dcpl.id(), rank, chunk.data()) == rank) e.chunk_rows_ = chunk.front();
  Handle type(check_id(H5Dget_type(e.ds_.id()), "get the type of", e.ds_.where()), H5Tclose, e.ds_.file(), e.ds_.object());
  e.file_elem_size_ = H5Tget_size(type.id());
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

std::size_t row_elems(const std::vector<hsize_t>& row_dims) {
  std::size_t n = 1;
  for (auto d : row_dims) n *= d;
  return n;
}
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
  // Compressed datasets wait for a whole chunk (compressed by us); others write ~kPendingBytes.
  if (compressed_ ? pending_rows_ >= chunk_rows_ : pending_.size() >= kPendingBytes) write_gathered(false);
}

// Whole chunks bypass HDF5's filters only when our bytes are exactly the file's: same element
// size (little-endian host, as every supported one is).
bool Extendible::can_write_chunks() const {
  return compressed_ && chunk_rows_ > 0 && file_elem_size_ == H5Tget_size(pending_type_);
}

void Extendible::write_gathered(bool all) {
  if (pending_rows_ == 0) return;
  const std::size_t row_bytes = H5Tget_size(pending_type_) * row_elems(row_dims_);
  hsize_t done = 0;
  if (can_write_chunks()) {
    // Up to the next chunk boundary through HDF5, then whole chunks compressed here.
    const hsize_t head = std::min(pending_rows_, (chunk_rows_ - rows_ % chunk_rows_) % chunk_rows_);
    if (head) write_rows(pending_.data(), head);
    done = head;
    for (; pending_rows_ - done >= chunk_rows_; done += chunk_rows_) write_compressed_chunk(pending_.data() + done * row_bytes);
    if (!all) {
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done * row_bytes));
      pending_rows_ -= done;
      return;
    }
  }
  if (pending_rows_ > done) write_rows(pending_.data() + done * row_bytes, pending_rows_ - done);
  pending_.clear();
  pending_rows_ = 0;
}

void Extendible::write_rows(const unsigned char* data, hsize_t rows) {
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
  check_rc(H5Dwrite(ds_.id(), pending_type_, mem_space.id(), file_space.id(), H5P_DEFAULT, data), what, ds_.where());
  rows_ += rows;
}

void Extendible::write_compressed_chunk(const unsigned char* data) {
  const std::size_t bytes = chunk_rows_ * row_elems(row_dims_) * file_elem_size_;
  const auto packed = shuffle_deflate(data, bytes, file_elem_size_, 1);  // outside the HDF5 lock
  std::vector<hsize_t> extent{rows_ + chunk_rows_}, offset{rows_};
  extent.insert(extent.end(), row_dims_.begin(), row_dims_.end());
  offset.resize(extent.size(), 0);
  const std::string what = "write a compressed chunk at row " + std::to_string(rows_) + " of";
  check_rc(H5Dset_extent(ds_.id(), extent.data()), what, ds_.where());
  check_rc(H5Dwrite_chunk(ds_.id(), H5P_DEFAULT, 0, offset.data(), packed.size(), packed.data()), what, ds_.where());
  rows_ += chunk_rows_;
}

}  // namespace sonde::h5
