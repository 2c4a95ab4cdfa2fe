// The feature dashboard file (feature_file.h).
#include "feature_file.h"

#include "h5_handles.h"
#include "h5_rewrite.h"

#include <sonde/error.h>


#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

namespace sonde::feature_stats {
namespace {

using h5::Handle;

void write_f64(const Handle& f, const std::string& n, const std::vector<double>& v, std::vector<hsize_t> dims) {
  h5::write_all(f, n, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, std::move(dims));
}
void write_i64(const Handle& f, const std::string& n, const std::vector<std::int64_t>& v, std::vector<hsize_t> dims) {
  h5::write_all(f, n, H5T_STD_I64LE, H5T_NATIVE_INT64, v, std::move(dims));
}
void write_i32(const Handle& f, const std::string& n, const std::vector<std::int32_t>& v, std::vector<hsize_t> dims) {
  h5::write_all(f, n, H5T_STD_I32LE, H5T_NATIVE_INT32, v, std::move(dims));
}

using h5::read_all;

void write_hook(const Handle& f, const std::string& name, const FeatureState& s) {
  const std::string g = "/features/" + name + "/";
  const auto F = static_cast<hsize_t>(s.features);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> freq(F), mean(F);
  for (std::size_t j = 0; j < F; ++j) {
    freq[j] = s.rows ? static_cast<double>(s.n_fire[j]) / static_cast<double>(s.rows) : nan;
    mean[j] = s.n_fire[j] ? s.sum[j] / static_cast<double>(s.n_fire[j]) : nan;
  }
  write_i64(f, g + "rows", {s.rows}, {1});
  write_i64(f, g + "n_fire", s.n_fire, {F});
  write_f64(f, g + "frequency", freq, {F});
  write_f64(f, g + "sum", s.sum, {F});
  write_f64(f, g + "mean_active", mean, {F});
  write_f64(f, g + "max", s.max, {F});
  write_i64(f, g + "hist", s.hist, {F, static_cast<hsize_t>(kBins)});
  write_f64(f, g + "hist_edges", hist_edges(), {static_cast<hsize_t>(kBins + 1)});
  const std::size_t N = kTopN;
  std::vector<double> value(F * N, nan);
  std::vector<std::int64_t> row(F * N, -1), prompt(F * N, -1);
  std::vector<std::int32_t> pos(F * N, -1), step(F * N, -1), ctx(F * N * kContext, -1);
  for (std::size_t j = 0; j < F; ++j)
    for (std::size_t k = 0; k < s.top[j].size(); ++k) {
      const TopEntry& e = s.top[j][k];
      const std::size_t at = j * N + k;
      value[at] = e.value;
      row[at] = e.row;
      prompt[at] = e.prompt_idx;
      pos[at] = e.pos;
      step[at] = e.step;
      std::copy(e.context, e.context + kContext, ctx.begin() + static_cast<std::ptrdiff_t>(at * kContext));
    }
  write_f64(f, g + "top_value", value, {F, N});
  write_i64(f, g + "top_row", row, {F, N});
  write_i64(f, g + "top_prompt_idx", prompt, {F, N});
  write_i32(f, g + "top_pos", pos, {F, N});
  write_i32(f, g + "top_step", step, {F, N});
  write_i32(f, g + "top_context", ctx, {F, N, static_cast<hsize_t>(kContext)});
}

FeatureState read_hook(const Handle& f, const std::string& name, std::int64_t features, const std::string& path) {
  const std::string g = "/features/" + name + "/";
  if (!h5::has_link(f, "features") || H5Lexists(f.id(), ("/features/" + name).c_str(), H5P_DEFAULT) <= 0)
    bad_input("resume: {} has no feature statistics for hook '{}'", path, name);
  FeatureState s(features);
  s.rows = read_all<std::int64_t>(f, g + "rows", H5T_NATIVE_INT64).at(0);
  s.n_fire = read_all<std::int64_t>(f, g + "n_fire", H5T_NATIVE_INT64);
  s.sum = read_all<double>(f, g + "sum", H5T_NATIVE_DOUBLE);
  s.max = read_all<double>(f, g + "max", H5T_NATIVE_DOUBLE);
  s.hist = read_all<std::int64_t>(f, g + "hist", H5T_NATIVE_INT64);
  if (static_cast<std::int64_t>(s.n_fire.size()) != features || static_cast<std::int64_t>(s.hist.size()) != features * kBins)
    bad_input("resume: {} holds {} features for hook '{}', this run's SAE has {}", path, s.n_fire.size(), name, features);
  const auto value = read_all<double>(f, g + "top_value", H5T_NATIVE_DOUBLE);
  const auto row = read_all<std::int64_t>(f, g + "top_row", H5T_NATIVE_INT64);
  const auto prompt = read_all<std::int64_t>(f, g + "top_prompt_idx", H5T_NATIVE_INT64);
  const auto pos = read_all<std::int32_t>(f, g + "top_pos", H5T_NATIVE_INT32);
  const auto step = read_all<std::int32_t>(f, g + "top_step", H5T_NATIVE_INT32);
  const auto ctx = read_all<std::int32_t>(f, g + "top_context", H5T_NATIVE_INT32);
  for (std::size_t j = 0; j < static_cast<std::size_t>(features); ++j)
    for (std::size_t k = 0; k < static_cast<std::size_t>(kTopN); ++k) {
      const std::size_t at = j * kTopN + k;
      if (row[at] < 0) break;
      TopEntry e;
      e.value = value[at];
      e.row = row[at];
      e.prompt_idx = prompt[at];
      e.pos = pos[at];
      e.step = step[at];
      std::copy(ctx.begin() + static_cast<std::ptrdiff_t>(at * kContext), ctx.begin() + static_cast<std::ptrdiff_t>((at + 1) * kContext), e.context);
      s.top[j].push_back(e);
    }
  return s;
}

// The hooks of a file's /features group.
std::vector<std::string> hook_names(const Handle& f) {
  std::vector<std::string> names;
  if (!h5::has_link(f, "features")) return names;
  Handle g = h5::open_group(f, "features");
  H5G_info_t info;
  h5::check_rc(H5Gget_info(g.id(), &info), "list", g.where());
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<std::size_t>(std::max<ssize_t>(n, 0)), '\0');
    H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    names.push_back(name);
  }
  return names;
}

}  // namespace

void write_feature_file(const std::string& path, const FileState& s, bool durable) {
  h5::silence_errors();
  const std::string tmp = path + ".tmp";
  {
    Handle f = h5::create_file(tmp, true);
    h5::write_attr(f, "schema", std::string("sonde.features/1"));
    h5::write_attr(f, "complete", std::int64_t{s.complete ? 1 : 0});
    for (const auto& [k, v] : s.meta.strings) h5::write_attr(f, k, v);
    for (const auto& [k, v] : s.meta.ints) h5::write_attr(f, k, v);
    h5::write_attr(f, "top_n", std::int64_t{kTopN});
    h5::write_attr(f, "window", std::int64_t{kWindow});
    write_i64(f, "/progress/mark", {s.mark.prompts, s.mark.rows, 0, static_cast<std::int64_t>(s.mark.results_bytes)}, {4});
    std::vector<std::uint8_t> bytes;
    std::vector<std::int64_t> offsets{0};
    for (const auto& id : s.prompt_id) {
      bytes.insert(bytes.end(), id.begin(), id.end());
      offsets.push_back(static_cast<std::int64_t>(bytes.size()));
    }
    write_i64(f, "/prompts/prompt_idx", s.prompt_idx, {s.prompt_idx.size()});
    h5::write_all(f, "/prompts/id_bytes", H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes, {bytes.size()});
    write_i64(f, "/prompts/id_offsets", offsets, {offsets.size()});
    for (const auto& [name, st] : s.hooks) write_hook(f, name, st);
    for (const auto& [name, v] : s.sae_sparsity)
      if (s.hooks.count(name)) write_f64(f, "/features/" + name + "/sae_sparsity", v, {v.size()});
    f.close();
  }
  h5::replace_file(tmp, path, durable, "feature stats");
}

FileState read_feature_file(const std::string& path, const std::vector<HookPoint>& hooks, const std::string& run_config_sha) {
  h5::silence_errors();
  Handle f = h5::open_file(path, H5F_ACC_RDONLY);
  if (!h5::has_attr(f, "schema") || h5::read_string_attr(f, "schema") != "sonde.features/1")
    bad_input("{} is not a sonde feature statistics file", path);
  const auto sha = h5::has_attr(f, "run_config_sha256") ? h5::read_string_attr(f, "run_config_sha256") : "";
  if (sha != run_config_sha) bad_input("resume: {} was written by another run (run_config_sha256 differs)", path);
  FileState s;
  const auto mark = read_all<std::int64_t>(f, "/progress/mark", H5T_NATIVE_INT64);
  s.mark = CommitMark{mark.at(0), mark.at(1), static_cast<std::uint64_t>(mark.at(3))};
  s.prompt_idx = read_all<std::int64_t>(f, "/prompts/prompt_idx", H5T_NATIVE_INT64);
  const auto bytes = read_all<std::uint8_t>(f, "/prompts/id_bytes", H5T_NATIVE_UINT8);
  const auto offsets = read_all<std::int64_t>(f, "/prompts/id_offsets", H5T_NATIVE_INT64);
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
    s.prompt_id.emplace_back(bytes.begin() + offsets[i], bytes.begin() + offsets[i + 1]);
  for (const auto& h : hooks) {
    s.hooks.emplace(h.name, read_hook(f, h.name, h.row_shape.at(0), path));
    if (H5Lexists(f.id(), ("/features/" + h.name + "/sae_sparsity").c_str(), H5P_DEFAULT) > 0)
      s.sae_sparsity[h.name] = read_all<double>(f, "/features/" + h.name + "/sae_sparsity", H5T_NATIVE_DOUBLE);
  }
  s.complete = h5::has_attr(f, "complete") && h5::read_int_attr(f, "complete") == 1;
  return s;
}

FileState join_feature_files(const std::vector<std::string>& parts, const std::string& run_config_sha) {
  h5::silence_errors();
  if (parts.empty()) runtime_error("feature stats join: no parts");
  FileState all;
  std::vector<std::pair<std::int64_t, std::string>> prompts;
  std::vector<std::string> names;
  std::int64_t rows_before = 0;
  for (const auto& path : parts) {
    std::vector<HookPoint> hooks;
    {
      Handle f = h5::open_file(path, H5F_ACC_RDONLY);
      const auto here = hook_names(f);
      if (&path == &parts.front()) names = here;
      if (here != names) runtime_error("feature stats join: {} holds other hooks than {}", path, parts.front());
      for (const auto& n : here) {
        Handle d = h5::open_dataset(f, "/features/" + n + "/n_fire");
        Handle space = h5::dataset_space(d);
        hsize_t dim = 0;
        H5Sget_simple_extent_dims(space.id(), &dim, nullptr);
        hooks.push_back(HookPoint{n, {static_cast<std::int64_t>(dim)}});
      }
    }
    FileState part;
    try {
      part = read_feature_file(path, hooks, run_config_sha);
    } catch (const Error& e) {
      runtime_error("feature stats join: {}", e.what());
    }
    if (!part.complete) runtime_error("feature stats join: {} is not complete (its run was stopped); resume the run first", path);
    // Every hook saw every row of the part; the part's rows follow those of the parts before it.
    const std::int64_t offset = rows_before;
    rows_before += part.hooks.empty() ? 0 : part.hooks.begin()->second.rows;
    for (auto& [name, st] : part.hooks) {
      auto it = all.hooks.find(name);
      if (it == all.hooks.end()) {
        FeatureState empty(st.features);
        it = all.hooks.emplace(name, std::move(empty)).first;
      }
      if (it->second.features != st.features)
        runtime_error("feature stats join: hook '{}' has {} features in {}, {} in {}", name, st.features, path,
                      it->second.features, parts.front());
      it->second.merge(st, offset);
    }
    if (&path == &parts.front()) all.sae_sparsity = part.sae_sparsity;
    for (std::size_t i = 0; i < part.prompt_idx.size(); ++i) prompts.emplace_back(part.prompt_idx[i], part.prompt_id[i]);
    all.mark.prompts += part.mark.prompts;
    all.mark.rows += part.mark.rows;
    all.mark.results_bytes += part.mark.results_bytes;
  }
  std::stable_sort(prompts.begin(), prompts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [idx, id] : prompts) {
    all.prompt_idx.push_back(idx);
    all.prompt_id.push_back(std::move(id));
  }
  all.complete = true;
  return all;
}

}  // namespace sonde::feature_stats
