#include "memory_sink.h"

#include <sonde/dtype.h>
#include <sonde/error.h>
#include <sonde/sae.h>
#include <sonde/tensor.h>

namespace sonde::py {

CommitMark MemorySink::open(const SinkOptions& options, const RunMetadata&, const std::vector<HookPoint>& hooks) {
  storage_ = options.storage;
  sparse_top_k_ = options.sparse_top_k;
  hooks_.clear();
  for (const auto& h : hooks) {
    hooks_[h.name].row_shape = h.row_shape;
    hooks_[h.name].sparse = sparse_top_k_ >= 0 && h.row_shape.size() == 1 && sae_acts_post_hook(h.name);
  }
  return {};
}

// Rows arrive as contiguous f32 [n, *row_shape] (the run's taps and write_captured).
void MemorySink::write(const TapRecord& rec, const TensorView& v) {
  auto it = hooks_.find(rec.hook);
  if (it == hooks_.end()) return;
  if (v.dtype != DType::f32) runtime_error("memory sink: hook '{}' delivered as {}, not f32", rec.hook, dtype_name(v.dtype));
  Tensor packed;
  const TensorView* src_view = &v;
  if (!v.contiguous()) {
    packed = Tensor::copy_of(v);
    src_view = &packed.view();
  }
  HookRows& h = it->second;
  auto n = static_cast<std::size_t>(v.shape.numel());
  const float* src = src_view->as<const float>();
  h.rows += v.shape[0];
  std::vector<float> kept;
  if (h.sparse) {  // the row's kept entries only, as the HDF5 sink's /sparse
    const std::int64_t cols = h.row_shape.at(0);
    std::vector<std::int32_t> idx;
    for (std::int64_t r = 0; r < v.shape[0]; ++r) {
      const float* row = src + r * cols;
      sparse_row_entries(row, cols, sparse_top_k_, idx);
      for (auto j : idx) kept.push_back(row[j]);
      h.indices.insert(h.indices.end(), idx.begin(), idx.end());
      h.indptr.push_back(static_cast<std::int64_t>(h.indices.size()));
    }
    src = kept.data();
    n = kept.size();
  }
  if (storage_ == DType::f32) {
    h.f32.insert(h.f32.end(), src, src + n);
    return;
  }
  const bool bf16 = storage_ == DType::bf16;
  h.half.reserve(h.half.size() + n);
  for (std::size_t i = 0; i < n; ++i) h.half.push_back(bf16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]));
}

void MemorySink::add_rows(const std::vector<RowRecord>& rows) { rows_.insert(rows_.end(), rows.begin(), rows.end()); }

void MemorySink::add_steps(const std::vector<StepRecord>& steps) {
  steps_.insert(steps_.end(), steps.begin(), steps.end());
}

}  // namespace sonde::py
