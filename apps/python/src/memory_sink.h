#pragma once
// A Sink that keeps what a run captures in memory, for the Python package: each hook's rows in
// one growing buffer in the storage dtype (f32, bf16 bits or f16 bits), the /rows table and the
// diffusion /steps. The buffers are handed to NumPy without another copy (arrays.h).
#include <sonde/sink.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sonde::py {

struct HookRows {
  std::vector<std::int64_t> row_shape;
  std::int64_t rows = 0;
  std::vector<float> f32;             // storage f32
  std::vector<std::uint16_t> half;    // storage bf16 or f16: the bits
  // Sparse storage (SinkOptions::sparse_top_k >= 0, an SAE's hook_sae_acts_post): f32/half hold
  // the kept values only, as CSR with these (docs/hdf5-layout.md's /sparse, in memory).
  bool sparse = false;
  std::vector<std::int64_t> indptr{0};
  std::vector<std::int32_t> indices;
};

class MemorySink : public Sink {
 public:
  CommitMark open(const SinkOptions& options, const RunMetadata& meta, const std::vector<HookPoint>& hooks) override;
  bool wants(const std::string& hook) const override { return hooks_.count(hook) > 0; }
  void write(const TapRecord& rec, const TensorView& rows) override;
  void add_rows(const std::vector<RowRecord>& rows) override;
  void add_steps(const std::vector<StepRecord>& steps) override;
  void end_prompt(const PromptRecord&) override {}
  void write_array(const std::string&, const TensorView&) override {}  // logits come from RunResult
  void checkpoint(const CommitMark&) override {}
  void flush() override {}
  void close() override {}

  DType storage() const { return storage_; }
  std::map<std::string, HookRows>& hooks() { return hooks_; }
  std::vector<RowRecord>& rows() { return rows_; }
  std::vector<StepRecord>& steps() { return steps_; }

 private:
  DType storage_ = DType::f32;
  std::int64_t sparse_top_k_ = -1;
  std::map<std::string, HookRows> hooks_;
  std::vector<RowRecord> rows_;
  std::vector<StepRecord> steps_;
};

}  // namespace sonde::py
