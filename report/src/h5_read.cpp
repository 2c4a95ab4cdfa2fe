#include "h5_read.h"

#include <sonde/error.h>

#include <algorithm>
#include <filesystem>

namespace sonde::report {

namespace {

// HDF5 prints its error stack to stderr unless told not to (per thread in a thread-safe build);
// the report turns each failure into one line of its own.
void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

struct AttrOut {
  nlohmann::json* json;
  bool ok = true;
};

herr_t collect_attr(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto& out = *static_cast<AttrOut*>(data);
  const H5Object a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (!a) return out.ok = false, 0;
  const H5Object type(H5Aget_type(a.id()), H5Tclose);
  const H5Object space(H5Aget_space(a.id()), H5Sclose);
  if (!type || !space || H5Sget_simple_extent_npoints(space.id()) != 1) return 0;  // lists are not run metadata
  switch (H5Tget_class(type.id())) {
    case H5T_STRING: {
      if (H5Tis_variable_str(type.id()) > 0) {
        const H5Object mem(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(mem.id(), H5T_VARIABLE);
        H5Tset_cset(mem.id(), H5T_CSET_UTF8);
        char* s = nullptr;
        if (H5Aread(a.id(), mem.id(), &s) < 0) return out.ok = false, 0;
        (*out.json)[name] = s ? std::string(s) : std::string();
        H5free_memory(s);
      } else {
        std::string s(H5Tget_size(type.id()), '\0');
        if (H5Aread(a.id(), type.id(), s.data()) < 0) return out.ok = false, 0;
        s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
        (*out.json)[name] = s;
      }
      break;
    }
    case H5T_INTEGER: {
      std::int64_t v = 0;
      if (H5Aread(a.id(), H5T_NATIVE_INT64, &v) >= 0) (*out.json)[name] = v;
      break;
    }
    case H5T_FLOAT: {
      double v = 0;
      if (H5Aread(a.id(), H5T_NATIVE_DOUBLE, &v) >= 0) (*out.json)[name] = v;
      break;
    }
    default:
      break;
  }
  return 0;
}

}  // namespace

H5Object& H5Object::operator=(H5Object&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

H5Object::~H5Object() {
  if (id_ >= 0 && closer_) closer_(id_);
}

H5File::H5File(const std::string& path) : path_(path) {
  quiet();
  if (!std::filesystem::is_regular_file(path)) bad_input("{}: no such file", path);
  if (H5Fis_hdf5(path.c_str()) <= 0)
    bad_input("{}: not a readable HDF5 file (not HDF5, or truncated)", path);
  // A batch still running holds the file open for SWMR writing, which a plain open refuses:
  // then open as its reader. (A file in the default format opens with the SWMR flag but
  // fails its reads, so the plain open goes first.)
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
    swmr_ = id >= 0;
  }
  if (id < 0) bad_input("{}: not a readable HDF5 file (truncated, or a killed writer's: try h5clear -s --increment)", path);
  file_ = H5Object(id, H5Fclose);
}

bool H5File::has(const std::string& object) const {
  std::string prefix;
  std::size_t at = 1;
  while (at <= object.size()) {
    const std::size_t slash = std::min(object.find('/', at), object.size());
    prefix = object.substr(0, slash);
    if (H5Lexists(file_.id(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    at = slash + 1;
  }
  return true;
}

std::vector<std::string> H5File::children(const std::string& group) const {
  std::vector<std::string> names;
  if (!has(group)) return names;
  const H5Object g(H5Gopen2(file_.id(), group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g) bad_input("{}: '{}' is not a group", path_, group);
  H5Literate(g.id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names);
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json H5File::root_attrs() {
  nlohmann::json out = nlohmann::json::object();
  AttrOut data{&out};
  const H5Object root(H5Gopen2(file_.id(), "/", H5P_DEFAULT), H5Gclose);
  if (!root || H5Aiterate2(root.id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attr, &data) < 0) data.ok = false;
  attrs_readable_ = data.ok;
  return out;
}

std::vector<hsize_t> H5File::dims(const std::string& dataset) const {
  const H5Object d(H5Dopen2(file_.id(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d) bad_input("{}: no dataset '{}'", path_, dataset);
  // A live writer's latest extent. Only then: on another file, a refresh invalidates the other
  // open handles of the dataset (their chunk index lookups fail).
  if (swmr_) H5Drefresh(d.id());
  const H5Object space(H5Dget_space(d.id()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  return dims;
}

void H5File::read_rows(const std::string& dataset, hsize_t begin, hssize_t count, hid_t mem, void* out) const {
  const H5Object d(H5Dopen2(file_.id(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d) bad_input("{}: no dataset '{}'", path_, dataset);
  const H5Object space(H5Dget_space(d.id()), H5Sclose);
  std::vector<hsize_t> dims = this->dims(dataset), start(dims.size(), 0), cnt = dims;
  if (dims.empty()) {
    if (H5Dread(d.id(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) bad_input("{}: cannot read '{}'", path_, dataset);
    return;
  }
  start[0] = begin;
  cnt[0] = static_cast<hsize_t>(count);
  H5Sset_extent_simple(space.id(), static_cast<int>(dims.size()), dims.data(), nullptr);
  H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr);
  const H5Object ms(H5Screate_simple(static_cast<int>(cnt.size()), cnt.data(), nullptr), H5Sclose);
  if (H5Dread(d.id(), mem, ms.id(), space.id(), H5P_DEFAULT, out) < 0)
    bad_input("{}: cannot read rows {}..{} of '{}' (truncated file?)", path_, begin, begin + cnt[0], dataset);
}

std::size_t H5File::elements(const std::string& dataset, hsize_t begin, hssize_t& count) const {
  const auto d = dims(dataset);
  std::size_t per_row = 1;
  for (std::size_t i = 1; i < d.size(); ++i) per_row *= d[i];
  if (d.empty()) return count = 1, 1;
  if (begin > d[0]) bad_input("{}: '{}' has {} rows, asked from row {}", path_, dataset, d[0], begin);
  if (count < 0) count = static_cast<hssize_t>(d[0] - begin);
  if (begin + static_cast<hsize_t>(count) > d[0])
    bad_input("{}: '{}' has {} rows, asked for rows {}..{}", path_, dataset, d[0], begin, begin + count);
  return static_cast<std::size_t>(count) * per_row;
}

std::vector<double> H5File::read_f64(const std::string& dataset, hsize_t begin, hssize_t count) const {
  std::vector<double> v(elements(dataset, begin, count));
  if (!v.empty()) read_rows(dataset, begin, count, H5T_NATIVE_DOUBLE, v.data());
  return v;
}

std::vector<std::int64_t> H5File::read_i64(const std::string& dataset, hsize_t begin, hssize_t count) const {
  std::vector<std::int64_t> v(elements(dataset, begin, count));
  if (!v.empty()) read_rows(dataset, begin, count, H5T_NATIVE_INT64, v.data());
  return v;
}

std::int64_t H5File::mark_prompts() const {
  if (!has("/progress/mark")) return -1;
  const H5Object d(H5Dopen2(file_.id(), "/progress/mark", H5P_DEFAULT), H5Dclose);
  if (swmr_) H5Drefresh(d.id());
  const H5Object type(H5Dget_type(d.id()), H5Tclose);
  if (H5Tget_class(type.id()) == H5T_COMPOUND) {
    // Only the member we need: HDF5 converts a compound to one with a subset of its members.
    const H5Object mem(H5Tcreate(H5T_COMPOUND, sizeof(std::int64_t)), H5Tclose);
    H5Tinsert(mem.id(), "prompts", 0, H5T_NATIVE_INT64);
    std::int64_t prompts = 0;
    if (H5Dread(d.id(), mem.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &prompts) < 0) bad_input("{}: cannot read /progress/mark", path_);
    return prompts;
  }
  const auto v = read_i64("/progress/mark");  // the stats file's [prompts, rows, steps, results_bytes]
  return v.empty() ? 0 : v[0];
}

}  // namespace sonde::report
