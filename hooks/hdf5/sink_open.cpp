// Hdf5Sink::open: argument checks, the one-shot file, and the streaming file (fresh or resumed).
#include "config_diff.h"
#include "h5clear.h"
#include "hdf5_sink.h"
#include "output_path.h"

#include <sonde/error.h>

#include <filesystem>
#include <set>

namespace sonde::hdf5 {
namespace {

std::string shape_str(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

void check_hook(const HookPoint& h, const std::string& path) {
  if (h.name.empty() || h.name.find('/') != std::string::npos || h.name == "." || h.name == "..")
    bad_input("HDF5 sink {}: hook name '{}' cannot be a dataset name under /acts", path, h.name);
  if (h.row_shape.size() + 1 > static_cast<std::size_t>(kMaxRank))
    bad_input("HDF5 sink {}: hook '{}' has rows of rank {}; at most {} is supported", path, h.name,
              h.row_shape.size(), kMaxRank - 1);
  for (auto d : h.row_shape)
    if (d <= 0) bad_input("HDF5 sink {}: hook '{}' has row shape {}", path, h.name, shape_str(h.row_shape));
}

void check_metadata(const RunMetadata& meta, const std::string& path) {
  for (const char* reserved : {"schema", "complete"})
    if (meta.strings.count(reserved) || meta.ints.count(reserved))
      bad_input("HDF5 sink {}: root attribute '{}' is written by the sink and cannot be given", path, reserved);
  for (const auto& [key, value] : meta.ints)
    if (meta.strings.count(key)) bad_input("HDF5 sink {}: root attribute '{}' given as both string and integer", path, key);
}

void check_modes(const SinkOptions& o) {
  if (!o.streaming && (o.resume || o.durable))
    bad_input("HDF5 sink {}: resume and durable need streaming mode", o.path);
  if (o.resume && o.overwrite) bad_input("HDF5 sink {}: resume and overwrite exclude each other", o.path);
  if (o.streaming && o.queue_bytes == 0) bad_input("HDF5 sink {}: queue_bytes must be positive", o.path);
}

// A missing file is resumed from nothing: the run was killed before its file was renamed into
// place (or before it started), which is the same as a run killed before its first checkpoint.
bool resumable_file_exists(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    check_output_path(path, false);
    return false;
  }
  if (!std::filesystem::is_regular_file(path, ec)) bad_input("cannot resume {}: it is not a regular file", path);
  if (!looks_like_hdf5(path)) bad_input("cannot resume {}: it is not an HDF5 file", path);
  return true;
}

}  // namespace

void Hdf5Sink::check_open_args(const SinkOptions& options, const RunMetadata& meta,
                               const std::vector<HookPoint>& hooks) {
  if (file_) runtime_error("HDF5 sink: open({}) called while {} is open", options.path, path_);
  if (options.storage != DType::f32 && options.storage != DType::bf16 && options.storage != DType::f16)
    bad_input("HDF5 sink {}: storage dtype {} is not one of f32, bf16, f16", options.path, dtype_name(options.storage));
  check_modes(options);
  std::set<std::string> names;
  for (const auto& h : hooks) {
    check_hook(h, options.path);
    if (!names.insert(h.name).second) bad_input("HDF5 sink {}: hook '{}' selected twice", options.path, h.name);
  }
  check_metadata(meta, options.path);
  if (!options.resume) check_output_path(options.path, options.overwrite);
}

CommitMark Hdf5Sink::open(const SinkOptions& options, const RunMetadata& meta, const std::vector<HookPoint>& all_hooks) {
  h5::silence_errors();
  check_open_args(options, meta, all_hooks);
  if (options.sparse_top_k < -1) bad_input("HDF5 sink {}: sparse_top_k {} is below -1", options.path, options.sparse_top_k);
  std::vector<HookPoint> hooks;  // stored dense, under /acts
  sparse_hooks_.clear();
  for (const auto& h : all_hooks) (options.sparse_top_k >= 0 && sparse_hook(h.name) && h.row_shape.size() == 1 ? sparse_hooks_ : hooks).push_back(h);
  options_ = options;
  path_ = options.path;
  counts_ = {};
  last_mark_ = {};
  try {
    if (!options.streaming) {
      file_ = h5::create_file(path_, options.overwrite);
      build_layout(meta, hooks);
      return {};
    }
    h5::ProgressValues v;
    if (options.resume && resumable_file_exists(path_))
      v = prepare_resume(meta, hooks);
    else
      create_streaming(meta, hooks);
    start_streaming(hooks);
    counts_ = {v.rows, v.steps, v.prompts, v.rows, v.steps};
    last_mark_ = {v.prompts, v.rows, v.results_bytes};
    return last_mark_;
  } catch (...) {
    abandon();  // a half-made file is left as it is (complete = 0), and the sink is not open
    throw;
  }
}

void Hdf5Sink::build_layout(const RunMetadata& meta, const std::vector<HookPoint>& hooks) {
  write_root_attrs(meta);
  types_group_ = h5::create_group(file_, "types");
  storage_ = h5::make_storage_type(options_.storage, types_group_);
  create_acts(hooks, options_.compress);
  sparse_.create(file_, sparse_hooks_, storage_, options_.sparse_top_k, options_.compress);
  rows_.create(file_);
  prompts_.create(file_);
  if (options_.diffusion) steps_.create(file_);
  if (options_.streaming) progress_.create(file_);
}

// Everything is created under a temporary name and renamed into place only when whole, so a kill
// during creation never leaves a broken file at the output path (nor replaces an old one).
void Hdf5Sink::create_streaming(const RunMetadata& meta, const std::vector<HookPoint>& hooks) {
  const std::string partial = path_ + ".partial";
  file_ = h5::create_file(partial, true, true);
  build_layout(meta, hooks);
  close_objects();
  file_.close();
  std::error_code ec;
  std::filesystem::rename(partial, path_, ec);
  if (ec) runtime_error("HDF5 sink: cannot rename {} to {}: {}", partial, path_, ec.message());
}

h5::ProgressValues Hdf5Sink::prepare_resume(const RunMetadata& meta, const std::vector<HookPoint>& hooks) {
  try {
    file_ = h5::open_file(path_, H5F_ACC_RDWR);
  } catch (const Error&) {
    // Most likely the status flags a killed SWMR writer left; anything else fails again below.
    clear_status_flags(path_);
    file_ = h5::open_file(path_, H5F_ACC_RDWR);
  }
  check_resumable(meta);
  open_objects(hooks);
  h5::ProgressValues v = progress_.read();
  if (v.prompts < 0 || v.rows < 0 || v.steps < 0)
    runtime_error("cannot resume {}: /progress/mark holds negative counts ({} prompts, {} rows, {} steps)", path_,
                  v.prompts, v.rows, v.steps);
  if (options_.resume_at) v = rewound(v, *options_.resume_at);
  // Shrinking an extent is not allowed under SWMR, so the trim happens before SWMR writing starts.
  for (auto& [name, act] : acts_) act.data.truncate(static_cast<hsize_t>(v.rows));
  sparse_.truncate(v.rows);
  rows_.truncate(v.rows);
  prompts_.truncate(v.prompts);
  if (steps_) steps_.truncate(v.steps);
  progress_.write(v);  // a kill before the first checkpoint must not find the old, later mark
  close_objects();
  file_.close();
  return v;
}

// The committed counts at `at`, a mark at or before the file's own `v`.
h5::ProgressValues Hdf5Sink::rewound(const h5::ProgressValues& v, const CommitMark& at) const {
  if (at.prompts > v.prompts || at.rows > v.rows || at.results_bytes > v.results_bytes)
    runtime_error("cannot resume {}: the run continues after {} prompts ({} rows) but the file committed only {} ({} rows)",
                  path_, at.prompts, at.rows, v.prompts, v.rows);
  const std::int64_t steps = steps_ ? steps_.count_before(at.prompts, v.steps) : 0;
  return {at.prompts, at.rows, steps, at.results_bytes};
}

void Hdf5Sink::check_resumable(const RunMetadata& meta) {
  if (!h5::has_attr(file_, "schema") || h5::read_string_attr(file_, "schema") != kSchema)
    bad_input("cannot resume {}: it is not a sonde file (no schema '{}')", path_, kSchema);
  if (!h5::has_link(file_, "progress"))
    bad_input("cannot resume {}: it was not written in streaming mode (it has no /progress)", path_);
  if (!options_.resume_complete && h5::read_int_attr(file_, "complete") != 0)
    bad_input("cannot resume {}: the run that wrote it completed; there is nothing to resume", path_);
  const auto want = meta.strings.find("run_config_sha256");
  if (want == meta.strings.end()) bad_input("cannot resume {}: this run gives no run_config_sha256 to check", path_);
  const std::string have =
      h5::has_attr(file_, "run_config_sha256") ? h5::read_string_attr(file_, "run_config_sha256") : "(none)";
  if (have != want->second) {
    const auto now = meta.strings.find("run_config_json");
    const std::string changes = now != meta.strings.end() && h5::has_attr(file_, "run_config_json")
                                    ? config_changes(h5::read_string_attr(file_, "run_config_json"), now->second)
                                    : "";
    if (!changes.empty())
      bad_input("cannot resume {}: the run's options changed: {} (resume with the options it was started with)", path_,
                changes);
    bad_input("cannot resume {}: its run_config_sha256 is {} but this run's is {}; the run configuration changed",
              path_, have, want->second);
  }
  if (options_.diffusion != h5::has_link(file_, "steps"))
    bad_input("cannot resume {}: the file {} /steps but this run is {}diffusion", path_,
              options_.diffusion ? "lacks" : "has", options_.diffusion ? "" : "not ");
}

void Hdf5Sink::open_objects(const std::vector<HookPoint>& hooks) {
  types_group_ = h5::open_group(file_, "types");
  storage_ = h5::open_storage_type(options_.storage, types_group_);
  acts_group_ = h5::open_group(file_, "acts");
  for (const auto& h : hooks) {
    if (!h5::has_link(acts_group_, h.name)) bad_input("cannot reopen {}: it has no dataset /acts/{}", path_, h.name);
    Act act{h, h5::Extendible::open(acts_group_, h.name)};
    check_act(act);
    acts_.emplace(h.name, std::move(act));
  }
  sparse_.open(file_, sparse_hooks_, options_.storage, path_);
  rows_.open(file_);
  prompts_.open(file_);
  if (options_.diffusion) steps_.open(file_);
  progress_.open(file_);
}

void Hdf5Sink::check_act(const Act& act) const {
  const auto dtype = h5::read_string_attr(act.data.handle(), "dtype");
  if (dtype != dtype_name(options_.storage))
    bad_input("cannot reopen {}: /acts/{} is stored as {}, this run asks for {}", path_, act.hook.name, dtype,
              dtype_name(options_.storage));
  h5::Handle space = h5::dataset_space(act.data.handle());
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space.id())));
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  const std::vector<std::int64_t> row(dims.begin() + 1, dims.end());
  if (row != act.hook.row_shape)
    bad_input("cannot reopen {}: /acts/{} has rows of shape {}, this run's are {}", path_, act.hook.name,
              shape_str(row), shape_str(act.hook.row_shape));
}

void Hdf5Sink::start_streaming(const std::vector<HookPoint>& hooks) {
  file_ = h5::open_file(path_, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE);
  open_objects(hooks);
  queue_ = std::make_unique<WriteQueue>(options_.queue_bytes, [] { h5::silence_errors(); });
}

void Hdf5Sink::write_root_attrs(const RunMetadata& meta) {
  for (const auto& [key, value] : meta.strings) h5::write_attr(file_, key, value);
  for (const auto& [key, value] : meta.ints) h5::write_attr(file_, key, value);
  h5::write_attr(file_, "schema", std::string(kSchema));
  // Created now (SWMR allows no new attributes later) and set to 1 by close(): a file left by a
  // crash or an exception reads as partial.
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

}  // namespace sonde::hdf5
