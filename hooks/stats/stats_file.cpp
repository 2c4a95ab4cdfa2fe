#include "stats_file.h"

#include "h5_handles.h"
#include "h5_rewrite.h"

#include <sonde/error.h>


#include <filesystem>

namespace sonde::stats {

namespace {

using h5::Handle;

void write_f64(const Handle& f, const std::string& name, const std::vector<double>& v, std::vector<hsize_t> dims) {
  h5::write_all(f, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v, std::move(dims));
}

void write_i64(const Handle& f, const std::string& name, const std::vector<std::int64_t>& v) {
  h5::write_all(f, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v, {v.size()});
}

using h5::read_all;

}  // namespace

void write_stats_file(const std::string& path, const FileState& s, bool durable) {
  h5::silence_errors();
  const std::string tmp = path + ".tmp";
  {
    Handle f = h5::create_file(tmp, true);
    h5::write_attr(f, "schema", std::string("sonde.stats/1"));
    h5::write_attr(f, "complete", std::int64_t{s.complete ? 1 : 0});
    for (const auto& [k, v] : s.meta.strings) h5::write_attr(f, k, v);
    for (const auto& [k, v] : s.meta.ints) h5::write_attr(f, k, v);
    h5::write_attr(f, "layout", std::string("per hook /stats/<hook>: count, mean, var (population, M2/count), m2, min, max, "
                                            "absmax over features [*row_shape]; norms (row L2 norms in row order), "
                                            "norm_mean, norm_quantiles at quantile_probabilities"));
    write_i64(f, "/progress/mark", {s.mark.prompts, s.mark.rows, 0, static_cast<std::int64_t>(s.mark.results_bytes)});
    for (const auto& [name, h] : s.hooks) {
      const std::string g = "/stats/" + name + "/";
      std::vector<hsize_t> row;
      for (auto d : h.hook.row_shape) row.push_back(static_cast<hsize_t>(d));
      const auto& st = h.stats;
      write_i64(f, g + "count", {st.count});
      write_i64(f, g + "row_shape", h.hook.row_shape);
      write_f64(f, g + "mean", st.mean, row);
      write_f64(f, g + "var", st.variance(), row);
      write_f64(f, g + "m2", st.m2, row);
      write_f64(f, g + "min", st.min, row);
      write_f64(f, g + "max", st.max, row);
      write_f64(f, g + "absmax", st.absmax, row);
      write_f64(f, g + "norms", st.norms, {st.norms.size()});
      write_f64(f, g + "norm_mean", {st.norm_mean()}, {1});
      std::vector<double> q;
      for (double p : kQuantiles) q.push_back(st.norm_quantile(p));
      write_f64(f, g + "norm_quantiles", q, {q.size()});
      write_f64(f, g + "quantile_probabilities", kQuantiles, {kQuantiles.size()});
    }
    f.close();
  }
  h5::replace_file(tmp, path, durable, "stats");
}

FileState read_stats_file(const std::string& path, const std::vector<HookPoint>& hooks, const std::string& run_config_sha) {
  h5::silence_errors();
  Handle f = h5::open_file(path, H5F_ACC_RDONLY);
  if (!h5::has_attr(f, "schema") || h5::read_string_attr(f, "schema") != "sonde.stats/1")
    bad_input("{} is not a sonde statistics file", path);
  const auto sha = h5::has_attr(f, "run_config_sha256") ? h5::read_string_attr(f, "run_config_sha256") : "";
  if (sha != run_config_sha) bad_input("resume: {} was written by another run (run_config_sha256 differs)", path);
  FileState s;
  const auto mark = read_all<std::int64_t>(f, "/progress/mark", H5T_NATIVE_INT64);
  s.mark = CommitMark{mark.at(0), mark.at(1), static_cast<std::uint64_t>(mark.at(3))};
  for (const auto& h : hooks) {
    const std::string g = "/stats/" + h.name + "/";
    if (!h5::has_link(f, "stats") || H5Lexists(f.id(), ("/stats/" + h.name).c_str(), H5P_DEFAULT) <= 0)
      bad_input("resume: {} has no statistics for hook '{}'", path, h.name);
    HookState hs{h, RunningStats()};
    auto& st = hs.stats;
    st.count = read_all<std::int64_t>(f, g + "count", H5T_NATIVE_INT64).at(0);
    st.mean = read_all<double>(f, g + "mean", H5T_NATIVE_DOUBLE);
    st.m2 = read_all<double>(f, g + "m2", H5T_NATIVE_DOUBLE);
    st.min = read_all<double>(f, g + "min", H5T_NATIVE_DOUBLE);
    st.max = read_all<double>(f, g + "max", H5T_NATIVE_DOUBLE);
    st.absmax = read_all<double>(f, g + "absmax", H5T_NATIVE_DOUBLE);
    st.norms = read_all<double>(f, g + "norms", H5T_NATIVE_DOUBLE);
    s.hooks.emplace(h.name, std::move(hs));
  }
  return s;
}

}  // namespace sonde::stats
