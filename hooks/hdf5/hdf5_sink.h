#pragma once
// The "hdf5" sink: writes the file layout sonde.acts/1 (design §5, docs/hdf5-layout.md).
//
// One-shot mode (sonde forward): every call writes at once on the caller's thread.
// Streaming mode (sonde batch): the file is created whole under a temporary name, renamed into
// place and reopened for SWMR writing; from then on only the writer thread (WriteQueue) calls
// HDF5. The caller's thread validates, converts rows to the storage type and copies them into the
// queue. checkpoint() waits for the queue, flushes every dataset, then records the mark in
// /progress; a resume trims every table back to that mark.
//
// The Sink's own calls must not overlap (one producer thread).
#include "h5_float_types.h"
#include "h5_handles.h"
#include "sparse_acts.h"
#include "tables.h"
#include "write_queue.h"

#include <sonde/array_reader.h>
#include <sonde/sink.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sonde::hdf5 {

inline constexpr const char* kSchema = "sonde.acts/1";

// Also core's ArrayReader (array_read.cpp): edits read vectors and patch sources through it.
class Hdf5Sink final : public Sink, public ArrayReader {
 public:
  Hdf5Sink();
  ~Hdf5Sink() override;  // closes without marking the file complete

  CommitMark open(const SinkOptions& options, const RunMetadata& meta, const std::vector<HookPoint>& hooks) override;
  bool wants(const std::string& hook) const override { return acts_.count(hook) > 0 || sparse_.has(hook); }
  void write(const TapRecord& rec, const TensorView& rows) override;
  void add_rows(const std::vector<RowRecord>& rows) override;
  void add_steps(const std::vector<StepRecord>& steps) override;
  void end_prompt(const PromptRecord& prompt) override;
  void write_array(const std::string& path, const TensorView& data) override;
  void checkpoint(const CommitMark& mark) override;
  void flush() override;
  void close() override;
  void join(const std::vector<std::string>& parts, const std::string& path, const RunMetadata& meta) override;  // join.cpp
  bool joins() const override { return true; }
  bool rewinds() const override { return true; }

  Tensor read(const std::string& file, const std::string& dataset) const override;
  bool has(const std::string& file, const std::string& dataset) const override;
  std::optional<std::string> root_attr(const std::string& file, const std::string& name) const override;
  bool reads(const std::string& file) const override;

 private:
  struct Act {
    HookPoint hook;
    h5::Extendible data;
  };
  // What the caller has handed over, counted on its thread, to check checkpoint marks.
  struct Counts {
    std::int64_t rows_added = 0, steps_added = 0;
    std::int64_t prompts = 0, rows = 0, steps = 0;  // up to the last end_prompt
  };

  // sink_open.cpp
  void check_open_args(const SinkOptions& options, const RunMetadata& meta, const std::vector<HookPoint>& hooks);
  void build_layout(const RunMetadata& meta, const std::vector<HookPoint>& hooks);
  void create_streaming(const RunMetadata& meta, const std::vector<HookPoint>& hooks);
  h5::ProgressValues prepare_resume(const RunMetadata& meta, const std::vector<HookPoint>& hooks);
  h5::ProgressValues rewound(const h5::ProgressValues& v, const CommitMark& at) const;
  void check_resumable(const RunMetadata& meta);
  void open_objects(const std::vector<HookPoint>& hooks);
  void check_act(const Act& act) const;
  void start_streaming(const std::vector<HookPoint>& hooks);
  void write_root_attrs(const RunMetadata& meta);
  void create_acts(const std::vector<HookPoint>& hooks, bool compress);

  // hdf5_sink.cpp
  void require_open(const char* op) const;
  void submit(std::size_t bytes, WriteQueue::Job job);
  void check_rows(const Act& act, const TensorView& rows) const;
  void check_mark(const CommitMark& mark) const;
  void write_checkpoint(const h5::ProgressValues& v);  // on the writer thread
  void flush_datasets();
  void flush_file();
  void close_objects();
  void abandon() noexcept;  // closes every handle, ignoring failures, without marking complete

  SinkOptions options_;
  std::string path_;
  h5::Handle file_;  // declared first, so destroyed after every object in the file
  h5::Handle acts_group_, types_group_;
  h5::StorageType storage_;
  std::map<std::string, Act> acts_;
  // SAE feature activations stored as CSR (SinkOptions::sparse_top_k >= 0): their hooks are
  // taken out of the hook list open() passes on, and kept here.
  std::vector<HookPoint> sparse_hooks_;
  SparseActs sparse_;
  h5::RowsTable rows_;
  h5::PromptsTable prompts_;
  h5::StepsTable steps_;
  h5::ProgressTable progress_;
  std::unique_ptr<WriteQueue> queue_;  // streaming only; declared last, so stopped first
  Counts counts_;
  CommitMark last_mark_;
};

}  // namespace sonde::hdf5
