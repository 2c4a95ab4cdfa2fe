// Hdf5Sink::join: the complete parts of a data-parallel run (one file per model copy) as one
// sonde.acts/1 file. Activations, rows and every per-prompt and per-step value column are virtual
// datasets over the parts, concatenated in part order, with source paths relative to the joined
// file (the folder can be moved as a whole). Only what depends on position in the concatenation
// is written for real: /prompts/row_start and every *_offsets column (shifted by the rows and
// values of the parts before), and /index, one entry per prompt in prompt_idx order.
#include "hdf5_sink.h"

#include <sonde/error.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

namespace sonde::hdf5 {
namespace {
namespace fs = std::filesystem;

struct Part {
  std::string path;
  h5::Handle file;
};

const char* const kRows[] = {"prompt_idx", "pos", "token_id", "step", "kind", "fresh", "computed_step"};
const char* const kPromptValues[] = {"prompt_idx", "row_count", "seed", "id_bytes", "text_bytes", "completion_bytes",
                                     "finish_reason_bytes", "token_ids"};
const char* const kPromptOffsets[] = {"id_offsets", "text_offsets", "completion_offsets", "finish_reason_offsets",
                                      "token_offsets"};
const char* const kStepValues[] = {"prompt_idx", "step", "t", "n_transfer", "block", "n_recomputed", "canvas"};

std::vector<hsize_t> dims_of(const h5::Handle& d) {
  h5::Handle space = h5::dataset_space(d);
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space.id())));
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  return dims;
}

template <typename T>
std::vector<T> read_all(const h5::Handle& file, const std::string& name, hid_t mem_type) {
  h5::Handle d = h5::open_dataset(file, name);
  const auto dims = dims_of(d);
  std::vector<T> v(dims.empty() ? 1 : dims[0]);
  if (!v.empty())
    h5::check_rc(H5Dread(d.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), "read", d.where());
  return v;
}

void write_i64(const h5::Handle& file, const std::string& name, const std::vector<std::int64_t>& v) {
  h5::Handle space = h5::create_space({v.size()}, {v.size()});
  h5::Handle dcpl = h5::create_props(H5P_DATASET_CREATE, name);
  h5::Handle d = h5::create_dataset(file, name, H5T_STD_I64LE, space, dcpl, h5::with_parent_groups());
  if (!v.empty())
    h5::check_rc(H5Dwrite(d.id(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), "write", d.where());
}

// Every attribute of `src` onto `dst` (strings, integers and integer lists, as the sink writes them).
void copy_attrs(const h5::Handle& src, const h5::Handle& dst) {
  H5O_info_t info;
  h5::check_rc(H5Oget_info2(src.id(), &info, H5O_INFO_NUM_ATTRS), "attribute count", src.where());
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    h5::Handle a(h5::check_id(H5Aopen_by_idx(src.id(), ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT),
                              "open attribute", src.where()),
                 H5Aclose, src.file(), src.object());
    if (a.id() < 0) continue;
    char name[256] = {};
    H5Aget_name(a.id(), sizeof name, name);
    h5::Handle type(H5Aget_type(a.id()), H5Tclose, src.file(), name);
    h5::Handle space(H5Aget_space(a.id()), H5Sclose, src.file(), name);
    const auto n = static_cast<std::size_t>(std::max<hssize_t>(1, H5Sget_simple_extent_npoints(space.id())));
    std::vector<unsigned char> buf(n * H5Tget_size(type.id()));
    h5::check_rc(H5Aread(a.id(), type.id(), buf.data()), "read attribute " + std::string(name), src.where());
    h5::Handle out(h5::check_id(H5Acreate2(dst.id(), name, type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
                                "create attribute " + std::string(name), dst.where()),
                   H5Aclose, dst.file(), dst.object());
    h5::check_rc(H5Awrite(out.id(), type.id(), buf.data()), "write attribute " + std::string(name), dst.where());
    if (H5Tis_variable_str(type.id()) > 0) H5Dvlen_reclaim(type.id(), space.id(), H5P_DEFAULT, buf.data());
  }
}

// Dataset `name` of every part, concatenated along its first dimension, as a virtual dataset.
void virtual_concat(const h5::Handle& out, const std::string& name, const std::vector<Part>& parts,
                    const std::string& out_dir) {
  h5::Handle first = h5::open_dataset(parts[0].file, name);
  // A copy: the parts' bf16/f16 types are committed in their own files.
  h5::Handle source_type(h5::check_id(H5Dget_type(first.id()), "type", first.where()), H5Tclose, first.file(), name);
  h5::Handle type = h5::copy_type(source_type.id(), name);
  std::vector<hsize_t> dims = dims_of(first);
  std::vector<std::vector<hsize_t>> each;
  hsize_t total = 0;
  for (const auto& p : parts) {
    h5::Handle d = h5::open_dataset(p.file, name);
    auto pd = dims_of(d);
    if (pd.size() != dims.size() || !std::equal(pd.begin() + 1, pd.end(), dims.begin() + 1))
      runtime_error("HDF5 join: {} has another row shape in {} than in {}", name, p.path, parts[0].path);
    total += pd[0];
    each.push_back(std::move(pd));
  }
  dims[0] = total;
  h5::Handle vspace = h5::create_space(dims, dims);
  h5::Handle dcpl = h5::create_props(H5P_DATASET_CREATE, name);
  hsize_t at = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (each[i][0] == 0) continue;
    h5::Handle src = h5::create_space(each[i], each[i]);
    std::vector<hsize_t> start(dims.size(), 0);
    start[0] = at;
    h5::check_rc(H5Sselect_hyperslab(vspace.id(), H5S_SELECT_SET, start.data(), nullptr, each[i].data(), nullptr),
                 "select", name);
    const std::string rel = fs::path(parts[i].path).lexically_relative(out_dir).string();
    h5::check_rc(H5Pset_virtual(dcpl.id(), vspace.id(), rel.c_str(), ("/" + name).c_str(), src.id()), "map", name);
    at += each[i][0];
  }
  h5::Handle space = h5::create_space(dims, dims);
  h5::Handle d = h5::create_dataset(out, name, type.id(), space, dcpl, h5::with_parent_groups());
  copy_attrs(first, d);
}

// An offsets column (N+1 entries from 0) of every part as one: each part's entries shifted by the
// values of the parts before it.
std::vector<std::int64_t> joined_offsets(const std::vector<Part>& parts, const std::string& name) {
  std::vector<std::int64_t> out{0};
  std::int64_t base = 0;
  for (const auto& p : parts) {
    const auto off = read_all<std::int64_t>(p.file, name, H5T_NATIVE_INT64);
    for (std::size_t k = 1; k < off.size(); ++k) out.push_back(base + off[k]);
    base += off.back();
  }
  return out;
}

void check_part(const Part& p, const RunMetadata& meta) {
  if (!h5::has_attr(p.file, "schema") || h5::read_string_attr(p.file, "schema") != kSchema)
    runtime_error("HDF5 join: {} is not a sonde file", p.path);
  if (h5::read_int_attr(p.file, "complete") != 1)
    runtime_error("HDF5 join: {} is not complete (its run was stopped); resume the run first", p.path);
  const auto want = meta.strings.find("run_config_sha256");
  if (want != meta.strings.end() && h5::read_string_attr(p.file, "run_config_sha256") != want->second)
    runtime_error("HDF5 join: {} was written by another run (run_config_sha256 {} vs {})", p.path,
                  h5::read_string_attr(p.file, "run_config_sha256"), want->second);
}

std::vector<std::string> group_names(const h5::Handle& file, const std::string& group) {
  h5::Handle acts = h5::open_group(file, group);
  H5G_info_t info;
  h5::check_rc(H5Gget_info(acts.id(), &info), "list", acts.where());
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[1024] = {};
    H5Lget_name_by_idx(acts.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    names.emplace_back(name);
  }
  return names;
}

std::vector<std::string> act_names(const h5::Handle& file) { return group_names(file, "acts"); }

// /sparse (SAE feature activations as CSR): entries and values are virtual like the rest; each
// part's indptr starts at 0, so the joined one is written shifted by the entries of the parts before.
void join_sparse(const h5::Handle& out, const std::vector<Part>& parts, const std::string& dir) {
  const bool first = h5::has_link(parts[0].file, "sparse");
  for (const auto& p : parts)
    if (h5::has_link(p.file, "sparse") != first) runtime_error("HDF5 join: {} and {} differ in /sparse", p.path, parts[0].path);
  if (!first) return;
  const auto hooks = group_names(parts[0].file, "sparse");
  for (const auto& p : parts)
    if (group_names(p.file, "sparse") != hooks) runtime_error("HDF5 join: {} holds other /sparse hooks than {}", p.path, parts[0].path);
  h5::Handle sparse = h5::create_group(out, "sparse");
  for (const auto& h : hooks) {
    const std::string g = "sparse/" + h;
    h5::Handle group = h5::create_group(sparse, h);
    copy_attrs(h5::open_group(parts[0].file, g), group);
    virtual_concat(out, g + "/indices", parts, dir);
    virtual_concat(out, g + "/values", parts, dir);
    write_i64(out, g + "/indptr", joined_offsets(parts, g + "/indptr"));
  }
}

void build(const h5::Handle& out, const std::vector<Part>& parts, const RunMetadata& meta, const std::string& dir) {
  for (const auto& [k, v] : meta.strings) h5::write_attr(out, k, v);
  for (const auto& [k, v] : meta.ints) h5::write_attr(out, k, v);
  h5::write_attr(out, "schema", std::string(kSchema));
  h5::write_attr(out, "data_parallel_parts", static_cast<std::int64_t>(parts.size()));

  const auto hooks = act_names(parts[0].file);
  for (const auto& p : parts)
    if (act_names(p.file) != hooks) runtime_error("HDF5 join: {} holds other hooks than {}", p.path, parts[0].path);
  h5::Handle acts = h5::create_group(out, "acts");
  for (const auto& h : hooks) virtual_concat(out, "acts/" + h, parts, dir);
  join_sparse(out, parts, dir);

  h5::Handle rows = h5::create_group(out, "rows");
  copy_attrs(h5::open_group(parts[0].file, "rows"), rows);
  for (const char* c : kRows) virtual_concat(out, std::string("rows/") + c, parts, dir);

  h5::Handle prompts = h5::create_group(out, "prompts");
  copy_attrs(h5::open_group(parts[0].file, "prompts"), prompts);
  for (const char* c : kPromptValues) virtual_concat(out, std::string("prompts/") + c, parts, dir);
  for (const char* c : kPromptOffsets) write_i64(out, std::string("prompts/") + c, joined_offsets(parts, std::string("prompts/") + c));

  // Where each prompt's rows are in the concatenation, and the index by prompt_idx.
  std::vector<std::int64_t> row_start, idx, part_of, entry, count;
  std::int64_t rows_before = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto starts = read_all<std::int64_t>(parts[i].file, "prompts/row_start", H5T_NATIVE_INT64);
    const auto counts = read_all<std::int64_t>(parts[i].file, "prompts/row_count", H5T_NATIVE_INT64);
    const auto pidx = read_all<std::int64_t>(parts[i].file, "prompts/prompt_idx", H5T_NATIVE_INT64);
    for (std::size_t k = 0; k < starts.size(); ++k) {
      row_start.push_back(rows_before + starts[k]);
      idx.push_back(pidx[k]);
      part_of.push_back(static_cast<std::int64_t>(i));
      entry.push_back(static_cast<std::int64_t>(row_start.size()) - 1);
      count.push_back(counts[k]);
    }
    rows_before += static_cast<std::int64_t>(dims_of(h5::open_dataset(parts[i].file, "rows/prompt_idx"))[0]);
  }
  write_i64(out, "prompts/row_start", row_start);
  std::vector<std::size_t> order(idx.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return idx[a] < idx[b]; });
  auto sorted = [&](const std::vector<std::int64_t>& v) {
    std::vector<std::int64_t> s;
    for (auto o : order) s.push_back(v[o]);
    return s;
  };
  h5::Handle index = h5::create_group(out, "index");
  h5::write_attr(index, "layout",
                 std::string("one entry per prompt, by prompt_idx: its part (rank-<part>.h5), its entry in /prompts, "
                             "and its rows [row_start, row_start + row_count) of /rows and /acts"));
  write_i64(out, "index/prompt_idx", sorted(idx));
  write_i64(out, "index/part", sorted(part_of));
  write_i64(out, "index/entry", sorted(entry));
  write_i64(out, "index/row_start", sorted(row_start));
  write_i64(out, "index/row_count", sorted(count));

  if (h5::has_link(parts[0].file, "steps")) {
    h5::Handle steps = h5::create_group(out, "steps");
    copy_attrs(h5::open_group(parts[0].file, "steps"), steps);
    for (const char* c : kStepValues) virtual_concat(out, std::string("steps/") + c, parts, dir);
    write_i64(out, "steps/canvas_offsets", joined_offsets(parts, "steps/canvas_offsets"));
  }
  h5::write_attr(out, "complete", std::int64_t{1});
}

}  // namespace

void Hdf5Sink::join(const std::vector<std::string>& paths, const std::string& path, const RunMetadata& meta) {
  h5::silence_errors();
  if (paths.empty()) runtime_error("HDF5 join: no parts to join into {}", path);
  std::vector<Part> parts;
  for (const auto& p : paths) {
    parts.push_back({fs::absolute(p).lexically_normal().string(), h5::open_file(p, H5F_ACC_RDONLY)});
    check_part(parts.back(), meta);
  }
  const std::string dir = fs::absolute(path).lexically_normal().parent_path().string();
  const std::string partial = path + ".partial";
  try {
    h5::Handle out = h5::create_file(partial, true, true);
    build(out, parts, meta, dir);
    out.close();
  } catch (...) {
    std::error_code ec;
    fs::remove(partial, ec);
    throw;
  }
  std::error_code ec;
  fs::rename(partial, path, ec);
  if (ec) runtime_error("HDF5 join: cannot rename {} to {}: {}", partial, path, ec.message());
}

}  // namespace sonde::hdf5
