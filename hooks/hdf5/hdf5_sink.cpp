#include "hdf5_sink.h"

#include <sonde/error.h>
#include <sonde/plugin.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sonde::hdf5 {
namespace {

std::string row_shape_str(const std::vector<std::int64_t>& dims) {
  std::string s = "[N";
  for (auto d : dims) s += ", " + std::to_string(d);
  return s + "]";
}

struct NativeType {
  hid_t file, mem;
};

NativeType native_type(DType t, const std::string& where) {
  switch (t) {
    case DType::f32: return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
    case DType::f64: return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE};
    case DType::i32: return {H5T_STD_I32LE, H5T_NATIVE_INT32};
    case DType::i64: return {H5T_STD_I64LE, H5T_NATIVE_INT64};
    case DType::u8: return {H5T_STD_U8LE, H5T_NATIVE_UINT8};
    default: runtime_error("HDF5 sink: {} has dtype {}; write_array takes f32, f64, i32, i64 or u8", where, dtype_name(t));
  }
}

// Rows in the storage type, owned, ready for the writer thread: the conversion runs on the
// caller's thread, outside HDF5's global lock.
struct StoredRows {
  std::vector<float> f32;
  std::vector<std::uint16_t> half;
  const void* data() const { return half.empty() ? static_cast<const void*>(f32.data()) : half.data(); }
  std::size_t bytes() const { return f32.size() * 4 + half.size() * 2; }
};

StoredRows to_storage(const TensorView& rows, DType storage) {
  const bool as_is = rows.dtype == DType::f32 && rows.contiguous();
  const Tensor copy = as_is ? Tensor() : to_f32(rows);
  const float* values = as_is ? rows.as<const float>() : copy.data<float>();
  const auto n = static_cast<std::size_t>(rows.numel());
  StoredRows out;
  if (storage == DType::f32)
    out.f32.assign(values, values + n);
  else
    out.half = h5::to_half_bits(values, n, storage);
  return out;
}

std::size_t prompt_bytes(const PromptRecord& p) {
  return sizeof p + p.id.size() + p.text.size() + p.completion.size() + p.finish_reason.size() + p.token_ids.size() * 4;
}

std::size_t steps_bytes(const std::vector<StepRecord>& steps) {
  std::size_t n = 0;
  for (const auto& s : steps) n += sizeof s + s.canvas.size() * 4;
  return n;
}

void fsync_file(const h5::Handle& file) {
  void* handle = nullptr;
  h5::check_rc(H5Fget_vfd_handle(file.id(), H5P_DEFAULT, &handle), "get the file descriptor of", file.where());
  if (::fsync(*static_cast<int*>(handle)) != 0)
    runtime_error("HDF5 sink: cannot fsync {}: {}", file.where(), std::strerror(errno));
}

}  // namespace

Hdf5Sink::Hdf5Sink() { h5::skip_library_cleanup_at_exit(); }

Hdf5Sink::~Hdf5Sink() {
  // `complete` stays 0, so readers see a partial file; a streaming file keeps its last checkpoint.
  h5::silence_errors();
  abandon();
}

void Hdf5Sink::require_open(const char* op) const {
  if (!file_) runtime_error("HDF5 sink: {} called on a sink that is not open{}", op, path_.empty() ? "" : " (" + path_ + ")");
  if (queue_) queue_->rethrow_if_failed();
}

void Hdf5Sink::submit(std::size_t bytes, WriteQueue::Job job) {
  if (queue_)
    queue_->push(bytes, std::move(job));
  else
    job();
}

void Hdf5Sink::abandon() noexcept {
  if (queue_) queue_->stop();  // before any handle closes: the writer thread may be using them
  queue_.reset();
  acts_.clear();
  sparse_.close();
  rows_ = {};
  prompts_ = {};
  steps_ = {};
  progress_ = {};
  storage_ = {};
  acts_group_.reset();
  types_group_.reset();
  file_.reset();
}

void Hdf5Sink::check_rows(const Act& act, const TensorView& rows) const {
  const auto& want = act.hook.row_shape;
  bool ok = rows.shape.rank == static_cast<int>(want.size()) + 1;
  for (std::size_t i = 0; ok && i < want.size(); ++i) ok = rows.shape[static_cast<int>(i) + 1] == want[i];
  if (!ok)
    runtime_error("HDF5 sink {}: hook '{}' got rows of shape {}, expected {}", path_, act.hook.name,
                  rows.shape.str(), row_shape_str(want));
  if (!is_float(rows.dtype))
    runtime_error("HDF5 sink {}: hook '{}' got rows of dtype {}, expected a float type", path_, act.hook.name,
                  dtype_name(rows.dtype));
}

void Hdf5Sink::write(const TapRecord& rec, const TensorView& rows) {
  h5::silence_errors();
  require_open("write");
  if (sparse_.has(rec.hook)) {
    std::size_t bytes = 0;
    auto job = sparse_.prepare(rec.hook, rows, storage_, bytes);
    return submit(bytes, std::move(job));
  }
  auto it = acts_.find(rec.hook);
  if (it == acts_.end()) runtime_error("HDF5 sink {}: hook '{}' was not selected at open", path_, rec.hook);
  check_rows(it->second, rows);
  auto stored = std::make_shared<StoredRows>(to_storage(rows, storage_.dtype));
  const auto n = static_cast<hsize_t>(rows.shape[0]);
  Act* act = &it->second;
  submit(stored->bytes(), [this, act, stored, n] { act->data.append(stored->data(), n, storage_.mem_type()); });
}

void Hdf5Sink::add_rows(const std::vector<RowRecord>& rows) {
  h5::silence_errors();
  require_open("add_rows");
  counts_.rows_added += static_cast<std::int64_t>(rows.size());
  submit(rows.size() * sizeof(RowRecord), [this, rows] { rows_.append(rows); });
}

void Hdf5Sink::add_steps(const std::vector<StepRecord>& steps) {
  h5::silence_errors();
  require_open("add_steps");
  if (!steps_) runtime_error("HDF5 sink {}: add_steps needs a diffusion run (the file has no /steps)", path_);
  counts_.steps_added += static_cast<std::int64_t>(steps.size());
  submit(steps_bytes(steps), [this, steps] { steps_.append(steps); });
}

void Hdf5Sink::end_prompt(const PromptRecord& prompt) {
  h5::silence_errors();
  require_open("end_prompt");
  const std::int64_t start = counts_.rows, count = counts_.rows_added - counts_.rows;
  counts_.rows = counts_.rows_added;
  counts_.steps = counts_.steps_added;
  ++counts_.prompts;
  submit(prompt_bytes(prompt), [this, prompt, start, count] { prompts_.append(prompt, start, count); });
}

void Hdf5Sink::write_array(const std::string& path, const TensorView& data) {
  h5::silence_errors();
  require_open("write_array");
  if (options_.streaming)
    runtime_error("HDF5 sink {}: write_array('{}') is for one-shot files; a streaming file has only /acts, /rows, "
                  "/prompts, /steps and /progress", path_, path);
  if (path.empty() || path == "/") runtime_error("HDF5 sink {}: write_array needs a dataset path", path_);
  const NativeType type = native_type(data.dtype, "'" + path + "' in " + path_);
  const Tensor copy = data.contiguous() ? Tensor() : Tensor::copy_of(data);
  const void* bytes = copy.empty() ? data.data : copy.view().data;
  std::vector<hsize_t> dims(data.shape.dims.begin(), data.shape.dims.begin() + data.shape.rank);
  h5::Handle space = dims.empty() ? h5::scalar_space() : h5::create_space(dims, dims);
  h5::Handle ds = h5::create_dataset(file_, path, type.file, space, h5::Handle(), h5::with_parent_groups());
  if (data.numel() > 0)
    h5::check_rc(H5Dwrite(ds.id(), type.mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes), "write", ds.where());
  ds.close();
}

void Hdf5Sink::check_mark(const CommitMark& mark) const {
  if (mark.prompts != counts_.prompts || mark.rows != counts_.rows)
    runtime_error("HDF5 sink {}: checkpoint mark says {} prompts and {} rows, but {} prompts with {} rows were ended",
                  path_, mark.prompts, mark.rows, counts_.prompts, counts_.rows);
  if (mark.results_bytes < last_mark_.results_bytes)
    runtime_error("HDF5 sink {}: checkpoint mark's results_bytes went back from {} to {}", path_,
                  last_mark_.results_bytes, mark.results_bytes);
}

void Hdf5Sink::checkpoint(const CommitMark& mark) {
  h5::silence_errors();
  require_open("checkpoint");
  if (!options_.streaming) return flush();
  check_mark(mark);
  const h5::ProgressValues v{mark.prompts, mark.rows, counts_.steps, mark.results_bytes};
  queue_->push(0, [this, v] { write_checkpoint(v); });
  queue_->drain();
  last_mark_ = mark;
}

// Data first, then the mark: a crash between the two leaves the previous mark, which the data
// on disk covers. Flushing each dataset is what makes SWMR files survive a kill (toolchain §4).
void Hdf5Sink::write_checkpoint(const h5::ProgressValues& v) {
  flush_datasets();
  flush_file();
  progress_.write(v);
  flush_file();
  if (options_.durable) fsync_file(file_);
}

// Writes the rows each dataset gathered (Extendible batches its appends) and flushes it.
void Hdf5Sink::flush_datasets() {
  for (auto& [name, act] : acts_) act.data.flush();
  sparse_.flush();
  rows_.flush();
  prompts_.flush();
  if (steps_) steps_.flush();
}

void Hdf5Sink::flush_file() { h5::check_rc(H5Fflush(file_.id(), H5F_SCOPE_LOCAL), "flush", path_); }

void Hdf5Sink::flush() {
  h5::silence_errors();
  require_open("flush");
  submit(0, [this] {
    flush_datasets();
    flush_file();
  });
  if (queue_) queue_->drain();
}

void Hdf5Sink::close() {
  h5::silence_errors();
  if (!file_) return;
  if (queue_) {
    queue_->drain();
    queue_->stop();  // from here on this thread is the only one calling HDF5
    queue_.reset();
  }
  const bool covered = !options_.streaming || (last_mark_.prompts == counts_.prompts && counts_.rows_added == counts_.rows &&
                                               counts_.steps_added == counts_.steps);
  if (!options_.streaming) flush_datasets();  // streaming: the last checkpoint wrote everything covered
  if (covered) {
    h5::write_attr(file_, "complete", std::int64_t{1});
    if (options_.streaming) flush_file();
  }
  close_objects();
  file_.close();  // writes the remaining metadata: a full disk shows up here
  if (!covered)
    runtime_error("HDF5 sink {}: closed with {} prompts ended but only {} checkpointed ({} rows handed over, {} in "
                  "ended prompts); the file is left incomplete, resumable from its last checkpoint",
                  path_, counts_.prompts, last_mark_.prompts, counts_.rows_added, counts_.rows);
}

void Hdf5Sink::close_objects() {
  for (auto& [name, act] : acts_) act.data.close();
  acts_.clear();
  sparse_.close();
  rows_.close();
  prompts_.close();
  if (steps_) steps_.close();
  if (options_.streaming) progress_.close();
  storage_.committed.close();
  storage_.mem.close();
  acts_group_.close();
  types_group_.close();
}

}  // namespace sonde::hdf5

SONDE_PLUGIN(sonde::hdf5::Hdf5Sink, "sink", "hdf5", "0.1.0", "", 0)
