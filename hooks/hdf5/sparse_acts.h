#pragma once
// Sparse storage of SAE feature activations (docs/hdf5-layout.md, docs/sae.md): a hook named
// `*.hook_sae_acts_post` is written, when SinkOptions::sparse_top_k >= 0, as CSR under
// /sparse/<hook>/ instead of dense under /acts/<hook>:
//   indptr  int64 [N + 1], from 0: row r's entries are [indptr[r], indptr[r+1])
//   indices int32 [nnz]: feature indices, ascending within a row
//   values  the storage dtype [nnz]
// keeping each row's non-zero values (top_k 0) or the top_k largest of them (ties: the lower
// index). scipy.sparse.csr_matrix((values, indices, indptr), shape=(N, n_cols)) reads it.
#include "h5_extendible.h"
#include "h5_float_types.h"

#include <sonde/model.h>
#include <sonde/tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sonde::hdf5 {

// Whether `hook` is stored sparsely when sparse storage is on.
bool sparse_hook(const std::string& hook);

class SparseActs {
 public:
  bool empty() const { return acts_.empty(); }
  bool has(const std::string& hook) const { return acts_.count(hook) > 0; }
  // Creates /sparse and one group per hook (indptr holding its leading 0).
  void create(const h5::Handle& file, const std::vector<HookPoint>& hooks, const h5::StorageType& storage, std::int64_t top_k,
              bool compress);
  // Reopens them (streaming, resume); checks the stored dtype and width.
  void open(const h5::Handle& file, const std::vector<HookPoint>& hooks, DType storage, const std::string& path);
  // Keeps the first `rows` rows (resume).
  void truncate(std::int64_t rows);
  // On the caller's thread: the rows' entries, converted and owned; the returned job appends them.
  std::function<void()> prepare(const std::string& hook, const TensorView& rows, const h5::StorageType& storage,
                                std::size_t& bytes);
  void flush();
  void close();

 private:
  struct Act {
    HookPoint hook;
    std::int64_t top_k = 0;
    h5::Extendible indptr, indices, values;
    std::int64_t nnz = 0;  // entries handed over so far (the caller's count)
  };
  std::map<std::string, Act> acts_;
  h5::Handle group_;
};

}  // namespace sonde::hdf5
