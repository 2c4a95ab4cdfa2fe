#include "hdf5_sink.h"

#include "output_path.h"

#include <sonde/error.h>
#include <sonde/plugin.h>

#include <set>

namespace sonde::hdf5 {
namespace {

std::string shape_str(const std::vector<std::int64_t>& dims, bool leading_n) {
  std::string s = leading_n ? "[N" : "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i || leading_n ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

void check_hook(const HookPoint& h, const std::string& path) {
  if (h.name.empty() || h.name.find('/') != std::string::npos || h.name == "." || h.name == "..")
    bad_input("HDF5 sink {}: hook name '{}' cannot be a dataset name under /acts", path, h.name);
  if (h.row_shape.size() + 1 > static_cast<std::size_t>(kMaxRank))
    bad_input("HDF5 sink {}: hook '{}' has rows of rank {}; at most {} is supported", path, h.name,
              h.row_shape.size(), kMaxRank - 1);
  for (auto d : h.row_shape)
    if (d <= 0) bad_input("HDF5 sink {}: hook '{}' has row shape {}", path, h.name, shape_str(h.row_shape, false));
}

void check_metadata(const RunMetadata& meta, const std::string& path) {
  for (const char* reserved : {"schema", "complete"})
    if (meta.strings.count(reserved) || meta.ints.count(reserved))
      bad_input("HDF5 sink {}: root attribute '{}' is written by the sink and cannot be given", path, reserved);
  for (const auto& [key, value] : meta.ints)
    if (meta.strings.count(key)) bad_input("HDF5 sink {}: root attribute '{}' given as both string and integer", path, key);
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

}  // namespace

Hdf5Sink::Hdf5Sink() { h5::skip_library_cleanup_at_exit(); }

Hdf5Sink::~Hdf5Sink() {
  // `complete` stays 0, so readers see a partial file.
  h5::silence_errors();
  abandon();
}

void Hdf5Sink::require_open(const char* op) const {
  if (!file_) runtime_error("HDF5 sink: {} called on a sink that is not open{}", op, path_.empty() ? "" : " (" + path_ + ")");
}

CommitMark Hdf5Sink::open(const SinkOptions& options, const RunMetadata& meta, const std::vector<HookPoint>& hooks) {
  if (options.streaming || options.resume || options.diffusion)
    runtime_error("HDF5 sink: streaming, resume and /steps are not implemented yet ({})", options.path);
  h5::silence_errors();
  if (file_) runtime_error("HDF5 sink: open({}) called while {} is open", options.path, path_);
  if (options.storage != DType::f32 && options.storage != DType::bf16 && options.storage != DType::f16)
    bad_input("HDF5 sink {}: storage dtype {} is not one of f32, bf16, f16", options.path, dtype_name(options.storage));
  std::set<std::string> names;
  for (const auto& h : hooks) {
    check_hook(h, options.path);
    if (!names.insert(h.name).second) bad_input("HDF5 sink {}: hook '{}' selected twice", options.path, h.name);
  }
  check_metadata(meta, options.path);
  check_output_path(options.path, options.overwrite);

  path_ = options.path;
  try {
    file_ = h5::create_file(path_, options.overwrite);
    write_root_attrs(meta);
    types_group_ = h5::create_group(file_, "types");
    storage_ = h5::make_storage_type(options.storage, types_group_);
    create_acts(hooks, options.compress);
    rows_.create(file_);
    prompts_.create(file_);
    prompt_row_start_ = 0;
  } catch (...) {
    abandon();  // a half-made file is left as it is (complete = 0), and the sink is not open
    throw;
  }
  return {};
}

void Hdf5Sink::add_steps(const std::vector<StepRecord>&) {
  runtime_error("HDF5 sink: /steps is not implemented yet ({})", path_);
}

void Hdf5Sink::checkpoint(const CommitMark&) { flush(); }

void Hdf5Sink::abandon() noexcept {
  acts_.clear();
  rows_ = {};
  prompts_ = {};
  storage_ = {};
  acts_group_.reset();
  types_group_.reset();
  file_.reset();
}

void Hdf5Sink::write_root_attrs(const RunMetadata& meta) {
  for (const auto& [key, value] : meta.strings) h5::write_attr(file_, key, value);
  for (const auto& [key, value] : meta.ints) h5::write_attr(file_, key, value);
  h5::write_attr(file_, "schema", std::string(kSchema));
  // Created now and set to 1 by close(): a file left by a crash or an exception reads as partial.
  h5::write_attr(file_, "complete", std::int64_t{0});
}

void Hdf5Sink::create_acts(const std::vector<HookPoint>& hooks, bool compress) {
  acts_group_ = h5::create_group(file_, "acts");
  const std::string dtype(dtype_name(storage_.dtype));
  for (const auto& h : hooks) {
    h5::ExtendibleSpec spec;
    spec.file_type = storage_.file_type();
    spec.row_dims.assign(h.row_shape.begin(), h.row_shape.end());
    std::size_t row_bytes = storage_.size();
    for (auto d : h.row_shape) row_bytes *= static_cast<std::size_t>(d);
    spec.chunk_rows = h5::chunk_rows_for(row_bytes);
    spec.compress = compress;
    Act act{h, h5::Extendible::create(acts_group_, h.name, spec)};
    h5::write_attr(act.data.handle(), "hook", h.name);
    h5::write_attr(act.data.handle(), "dtype", dtype);
    h5::write_attr(act.data.handle(), "row_shape", h.row_shape);
    acts_.emplace(h.name, std::move(act));
  }
}

void Hdf5Sink::check_rows(const Act& act, const TensorView& rows) const {
  const auto& want = act.hook.row_shape;
  bool ok = rows.shape.rank == static_cast<int>(want.size()) + 1;
  for (std::size_t i = 0; ok && i < want.size(); ++i) ok = rows.shape[static_cast<int>(i) + 1] == want[i];
  if (!ok)
    runtime_error("HDF5 sink {}: hook '{}' got rows of shape {}, expected {}", path_, act.hook.name,
                  rows.shape.str(), shape_str(want, true));
  if (!is_float(rows.dtype))
    runtime_error("HDF5 sink {}: hook '{}' got rows of dtype {}, expected a float type", path_, act.hook.name,
                  dtype_name(rows.dtype));
}

void Hdf5Sink::write(const TapRecord& rec, const TensorView& rows) {
  h5::silence_errors();
  require_open("write");
  auto it = acts_.find(rec.hook);
  if (it == acts_.end()) runtime_error("HDF5 sink {}: hook '{}' was not selected at open", path_, rec.hook);
  check_rows(it->second, rows);
  const bool as_is = rows.dtype == DType::f32 && rows.contiguous();
  const Tensor copy = as_is ? Tensor() : to_f32(rows);
  const float* values = as_is ? rows.as<const float>() : copy.data<float>();
  const auto n = static_cast<hsize_t>(rows.shape[0]);
  if (storage_.dtype == DType::f32) {
    it->second.data.append(values, n, storage_.mem_type());
  } else {
    const auto bits = h5::to_half_bits(values, static_cast<std::size_t>(rows.numel()), storage_.dtype);
    it->second.data.append(bits.data(), n, storage_.mem_type());
  }
}

void Hdf5Sink::add_rows(const std::vector<RowRecord>& rows) {
  h5::silence_errors();
  require_open("add_rows");
  rows_.append(rows);
}

void Hdf5Sink::end_prompt(const PromptRecord& prompt) {
  h5::silence_errors();
  require_open("end_prompt");
  const std::int64_t end = rows_.size();
  prompts_.append(prompt, prompt_row_start_, end - prompt_row_start_);
  prompt_row_start_ = end;
}

void Hdf5Sink::write_array(const std::string& path, const TensorView& data) {
  h5::silence_errors();
  require_open("write_array");
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

void Hdf5Sink::flush() {
  h5::silence_errors();
  require_open("flush");
  h5::check_rc(H5Fflush(file_.id(), H5F_SCOPE_GLOBAL), "flush", path_);
}

void Hdf5Sink::close() {
  h5::silence_errors();
  if (!file_) return;
  h5::write_attr(file_, "complete", std::int64_t{1});
  close_objects();
  file_.close();  // writes the remaining metadata: a full disk shows up here
}

void Hdf5Sink::close_objects() {
  for (auto& [name, act] : acts_) act.data.close();
  rows_.close();
  prompts_.close();
  storage_.committed.close();
  storage_.mem.close();
  acts_group_.close();
  types_group_.close();
}

}  // namespace sonde::hdf5

SONDE_PLUGIN(sonde::hdf5::Hdf5Sink, "sink", "hdf5", "0.1.0", "", 0)
