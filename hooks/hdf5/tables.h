#pragma once
// The per-row, per-prompt and per-step tables of design §5, as parallel 1-D extendible columns,
// and the /progress mark of streaming files. Variable-length fields are a flat values column plus
// an offsets column with N+1 entries starting at 0, never HDF5 variable-length strings: those live
// in the global heap, which is unreadable in a crashed SWMR file until h5clear (toolchain §4), and
// numeric columns are not.
//
// Every table can be created (a new file) or opened (a streaming file reopened before SWMR
// writing starts), trimmed to a committed count (resume) and flushed (checkpoints).
#include "h5_extendible.h"

#include <sonde/sink.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sonde::h5 {

// How to read the variable-length fields; stored as the `layout` attribute of /prompts.
extern const char* const kPromptsLayout;

class RaggedColumn {
 public:
  // Creates `<values>` (file_type elements) and `<offsets>` (i64, holding the leading 0).
  void create(const Handle& group, const std::string& values, const std::string& offsets, hid_t file_type);
  void open(const Handle& group, const std::string& values, const std::string& offsets);
  void append(const void* data, std::size_t n, hid_t mem_type);
  void append(const std::string& utf8) { append(utf8.data(), utf8.size(), H5T_NATIVE_UINT8); }
  void truncate(std::int64_t entries);  // keeps the first `entries` entries and their values
  void flush();
  void close();

 private:
  Extendible values_, offsets_;
  std::int64_t end_ = 0;
};

// /rows: prompt_idx i64, pos i32, token_id i32, step i32, kind u8, fresh u8, computed_step i32.
class RowsTable {
 public:
  void create(const Handle& file);
  void open(const Handle& file);
  void append(const std::vector<RowRecord>& rows);
  std::int64_t size() const { return static_cast<std::int64_t>(prompt_idx_.rows()); }
  void truncate(std::int64_t n);
  void flush();
  void close();

 private:
  std::vector<Extendible*> columns() { return {&prompt_idx_, &pos_, &token_id_, &step_, &kind_, &fresh_, &computed_step_}; }
  Handle group_;
  Extendible prompt_idx_, pos_, token_id_, step_, kind_, fresh_, computed_step_;
};

// /prompts: prompt_idx i64, row_start i64, row_count i64, seed u64, and the ragged fields
// id, text, completion, finish_reason (UTF-8 bytes) and token_ids (i32).
class PromptsTable {
 public:
  void create(const Handle& file);
  void open(const Handle& file);
  void append(const PromptRecord& p, std::int64_t row_start, std::int64_t row_count);
  std::int64_t size() const { return static_cast<std::int64_t>(prompt_idx_.rows()); }
  void truncate(std::int64_t n);
  void flush();
  void close();

 private:
  std::vector<Extendible*> columns() { return {&prompt_idx_, &row_start_, &row_count_, &seed_}; }
  std::vector<RaggedColumn*> ragged() { return {&id_, &text_, &completion_, &finish_reason_, &token_ids_}; }
  Handle group_;
  Extendible prompt_idx_, row_start_, row_count_, seed_;
  RaggedColumn id_, text_, completion_, finish_reason_, token_ids_;
};

// /steps (diffusion): prompt_idx i64, step i32, t f32, n_transfer i32, block i32, n_recomputed
// i32, canvas i32 + canvas_offsets.
class StepsTable {
 public:
  void create(const Handle& file);
  void open(const Handle& file);
  void append(const std::vector<StepRecord>& steps);
  std::int64_t size() const { return static_cast<std::int64_t>(prompt_idx_.rows()); }
  // How many of the first `n` steps belong to prompts before `prompt`. Steps are written a
  // micro-batch at a time and prompts are committed whole, so those steps come first.
  std::int64_t count_before(std::int64_t prompt, std::int64_t n) const;
  void truncate(std::int64_t n);
  void flush();
  void close();
  explicit operator bool() const { return static_cast<bool>(group_); }

 private:
  std::vector<Extendible*> columns() { return {&prompt_idx_, &step_, &t_, &n_transfer_, &block_, &n_recomputed_}; }
  Handle group_;
  Extendible prompt_idx_, step_, t_, n_transfer_, block_, n_recomputed_;
  RaggedColumn canvas_;
};

// What /progress records: the committed prefix of every table.
struct ProgressValues {
  std::int64_t prompts = 0, rows = 0, steps = 0;
  std::uint64_t results_bytes = 0;
};

// /progress/mark: one compound record {prompts, rows, steps: i64; results_bytes: u64}. A dataset,
// not attributes, because a SWMR reader can refresh a dataset (H5Drefresh) but not an attribute.
class ProgressTable {
 public:
  void create(const Handle& file);
  void open(const Handle& file);
  ProgressValues read() const;
  void write(const ProgressValues& v);  // writes and flushes
  void close();

 private:
  Handle group_, mark_;
};

}  // namespace sonde::h5
