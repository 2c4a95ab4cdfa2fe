// SparseActs (sparse_acts.h): CSR storage of SAE feature activations.
#include "sparse_acts.h"

#include <sonde/error.h>
#include <sonde/sae.h>

#include <algorithm>
#include <memory>
#include <numeric>

namespace sonde::hdf5 {
namespace {

h5::Extendible column(const h5::Handle& g, const char* name, hid_t type, std::size_t bytes, bool compress) {
  h5::ExtendibleSpec spec;
  spec.file_type = type;
  spec.chunk_rows = h5::chunk_rows_for(bytes, std::size_t{1} << 18);
  spec.compress = compress;
  return h5::Extendible::create(g, name, spec);
}

}  // namespace

bool sparse_hook(const std::string& hook) { return sae_acts_post_hook(hook); }

void SparseActs::create(const h5::Handle& file, const std::vector<HookPoint>& hooks, const h5::StorageType& storage,
                        std::int64_t top_k, bool compress) {
  if (hooks.empty()) return;
  group_ = h5::create_group(file, "sparse");
  for (const auto& h : hooks) {
    h5::Handle g = h5::create_group(group_, h.name);
    Act a{h, top_k, column(g, "indptr", H5T_STD_I64LE, 8, compress), column(g, "indices", H5T_STD_I32LE, 4, compress),
          column(g, "values", storage.file_type(), storage.size(), compress)};
    h5::write_attr(g, "hook", h.name);
    h5::write_attr(g, "format", std::string("csr"));
    h5::write_attr(g, "n_cols", h.row_shape.at(0));
    h5::write_attr(g, "top_k", top_k);
    h5::write_attr(g, "dtype", std::string(dtype_name(storage.dtype)));
    const std::int64_t zero = 0;
    a.indptr.append(&zero, 1, H5T_NATIVE_INT64);
    a.indptr.write_pending();
    acts_.emplace(h.name, std::move(a));
  }
}

void SparseActs::open(const h5::Handle& file, const std::vector<HookPoint>& hooks, DType storage, const std::string& path) {
  if (hooks.empty()) return;
  if (!h5::has_link(file, "sparse")) bad_input("cannot reopen {}: it has no /sparse (a run without sparse storage wrote it)", path);
  group_ = h5::open_group(file, "sparse");
  for (const auto& h : hooks) {
    if (!h5::has_link(group_, h.name)) bad_input("cannot reopen {}: it has no /sparse/{}", path, h.name);
    h5::Handle g = h5::open_group(group_, h.name);
    if (h5::read_string_attr(g, "dtype") != dtype_name(storage) || h5::read_int_attr(g, "n_cols") != h.row_shape.at(0))
      bad_input("cannot reopen {}: /sparse/{} is {} with {} columns, this run stores {} with {}", path, h.name,
                h5::read_string_attr(g, "dtype"), h5::read_int_attr(g, "n_cols"), dtype_name(storage), h.row_shape.at(0));
    Act a{h, h5::read_int_attr(g, "top_k"), h5::Extendible::open(g, "indptr"), h5::Extendible::open(g, "indices"),
          h5::Extendible::open(g, "values")};
    if (a.indptr.rows() < 1) bad_input("cannot reopen {}: /sparse/{}/indptr is empty", path, h.name);
    a.indptr.read_at(a.indptr.rows() - 1, &a.nnz, H5T_NATIVE_INT64);
    acts_.emplace(h.name, std::move(a));
  }
}

void SparseActs::truncate(std::int64_t rows) {
  for (auto& [name, a] : acts_) {
    a.indptr.truncate(static_cast<hsize_t>(rows + 1));
    a.indptr.read_at(static_cast<hsize_t>(rows), &a.nnz, H5T_NATIVE_INT64);
    a.indices.truncate(static_cast<hsize_t>(a.nnz));
    a.values.truncate(static_cast<hsize_t>(a.nnz));
  }
}

std::function<void()> SparseActs::prepare(const std::string& hook, const TensorView& rows, const h5::StorageType& storage,
                                          std::size_t& bytes) {
  Act& a = acts_.at(hook);
  const std::int64_t n = rows.shape[0], cols = a.hook.row_shape.at(0);
  if (rows.shape.rank != 2 || rows.shape[1] != cols || !is_float(rows.dtype))
    runtime_error("HDF5 sink: hook '{}' got rows {} {}, expected [N, {}] floats", hook, dtype_name(rows.dtype), rows.shape.str(), cols);
  // f32 rows are cut where they are (write_captured's are contiguous), as to_storage does: a copy
  // first would write and read again 64 KB a row for a 16,384-feature SAE.
  const bool as_is = rows.dtype == DType::f32 && rows.contiguous();
  const Tensor copy = as_is ? Tensor() : to_f32(rows);
  const float* dense = as_is ? rows.as<const float>() : copy.data<float>();
  auto ptr = std::make_shared<std::vector<std::int64_t>>();
  auto idx = std::make_shared<std::vector<std::int32_t>>();
  std::vector<float> vals;
  std::vector<std::int32_t> row_idx;
  for (std::int64_t r = 0; r < n; ++r) {
    const float* row = dense + r * cols;
    sparse_row_entries(row, cols, a.top_k, row_idx);
    for (auto j : row_idx) {
      idx->push_back(j);
      vals.push_back(row[j]);
    }
    a.nnz += static_cast<std::int64_t>(row_idx.size());
    ptr->push_back(a.nnz);
  }
  auto f32 = std::make_shared<std::vector<float>>();
  auto half = std::make_shared<std::vector<std::uint16_t>>();
  if (storage.dtype == DType::f32) *f32 = std::move(vals);
  else *half = h5::to_half_bits(vals.data(), vals.size(), storage.dtype);
  bytes = ptr->size() * 8 + idx->size() * 4 + f32->size() * 4 + half->size() * 2;
  Act* act = &a;
  const hid_t mem = storage.mem_type();
  return [act, ptr, idx, f32, half, mem] {
    act->indptr.append(ptr->data(), ptr->size(), H5T_NATIVE_INT64);
    if (idx->empty()) return;
    act->indices.append(idx->data(), idx->size(), H5T_NATIVE_INT32);
    act->values.append(half->empty() ? static_cast<const void*>(f32->data()) : half->data(), idx->size(), mem);
  };
}

void SparseActs::flush() {
  for (auto& [name, a] : acts_) {
    a.indptr.flush();
    a.indices.flush();
    a.values.flush();
  }
}

void SparseActs::close() {
  for (auto& [name, a] : acts_) {
    a.indptr.close();
    a.indices.close();
    a.values.close();
  }
  acts_.clear();
  group_.close();
}

}  // namespace sonde::hdf5
