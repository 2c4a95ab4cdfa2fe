#pragma once
// The "hdf5" sink: writes the file layout sonde.acts/1 (design §5, docs/hdf5-layout.md).
// Every dataset is created in open(); write/add_rows/end_prompt only extend them, which is what
// a later SWMR mode needs. Calls must not overlap (one writer thread).
#include "h5_float_types.h"
#include "h5_handles.h"
#include "tables.h"

#include <sonde/sink.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sonde::hdf5 {

inline constexpr const char* kSchema = "sonde.acts/1";

class Hdf5Sink final : public Sink {
 public:
  Hdf5Sink();
  ~Hdf5Sink() override;  // closes without marking the file complete

  CommitMark open(const SinkOptions& options, const RunMetadata& meta, const std::vector<HookPoint>& hooks) override;
  bool wants(const std::string& hook) const override { return acts_.count(hook) > 0; }
  void write(const TapRecord& rec, const TensorView& rows) override;
  void add_rows(const std::vector<RowRecord>& rows) override;
  void add_steps(const std::vector<StepRecord>& steps) override;
  void end_prompt(const PromptRecord& prompt) override;
  void write_array(const std::string& path, const TensorView& data) override;
  void checkpoint(const CommitMark& mark) override;
  void flush() override;
  void close() override;

 private:
  struct Act {
    HookPoint hook;
    h5::Extendible data;
  };

  void require_open(const char* op) const;
  void write_root_attrs(const RunMetadata& meta);
  void create_acts(const std::vector<HookPoint>& hooks, bool compress);
  void check_rows(const Act& act, const TensorView& rows) const;
  void close_objects();
  void abandon() noexcept;  // closes every handle, ignoring failures, without marking complete

  std::string path_;
  h5::Handle file_;  // declared first, so destroyed after every object in the file
  h5::Handle acts_group_, types_group_;
  h5::StorageType storage_;
  std::map<std::string, Act> acts_;
  h5::RowsTable rows_;
  h5::PromptsTable prompts_;
  std::int64_t prompt_row_start_ = 0;  // first /rows entry of the prompt being captured
};

}  // namespace sonde::hdf5
