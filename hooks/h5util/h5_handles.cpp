#include "h5_handles.h"

#include <sonde/error.h>

#include <utility>

namespace sonde::h5 {
namespace {

herr_t collect(unsigned n, const H5E_error2_t* e, void* out) {
  auto& lines = *static_cast<std::vector<std::string>*>(out);
  std::string line = e->desc ? e->desc : "";
  char minor[128] = "";
  if (H5Eget_msg(e->min_num, nullptr, minor, sizeof minor) > 0 && line.find(minor) == std::string::npos)
    line += line.empty() ? minor : std::string(" (") + minor + ")";
  if (!line.empty()) lines.push_back(std::move(line));
  return 0;
}

// I/O failures carry "time = ..., filename = ..., errno = 28, error message = 'No space left on
// device', buf = 0x..., ..." over several lines; keep the action and the system's message.
std::string simplify(std::string line) {
  const std::string key = "error message = '";
  const auto k = line.find(key);
  if (k != std::string::npos) {
    const auto e = line.find('\'', k + key.size());
    line = line.substr(0, line.find(':')) + " (" + line.substr(k + key.size(), e - k - key.size()) + ")";
  }
  for (char& c : line)
    if (c == '\n') c = ' ';
  return line;
}

// The outermost entry says which API call failed; the innermost says why (errno text for I/O).
std::string error_stack_reason() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return "no detail from HDF5";
  if (lines.size() == 1) return simplify(lines.front());
  return simplify(lines.front()) + ": " + simplify(lines.back());
}

template <typename T>
void write_scalar_attr(const Handle& obj, const std::string& name, hid_t type, const T* value,
                       const Handle& space) {
  const std::string what = "write attribute '" + name + "' of";
  const htri_t exists = H5Aexists(obj.id(), name.c_str());
  if (exists < 0) fail(what, obj.where());
  hid_t a = exists ? H5Aopen(obj.id(), name.c_str(), H5P_DEFAULT)
                   : H5Acreate2(obj.id(), name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT);
  Handle attr(check_id(a, what, obj.where()), H5Aclose, obj.file(), obj.object());
  if (H5Sget_simple_extent_type(space.id()) == H5S_NULL) return;  // an empty list has no values to write
  check_rc(H5Awrite(attr.id(), type, value), what, obj.where());
}

}  // namespace

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void skip_library_cleanup_at_exit() { H5dont_atexit(); }

void fail(const std::string& what, const std::string& where) {
  throw Error(ErrorKind::Runtime, "HDF5: cannot " + what + " " + where + ": " + error_stack_reason());
}

hid_t check_id(hid_t id, const std::string& what, const std::string& where) {
  if (id < 0) fail(what, where);
  return id;
}

void check_rc(herr_t rc, const std::string& what, const std::string& where) {
  if (rc < 0) fail(what, where);
}

Handle::Handle(hid_t id, Closer closer, std::string file, std::string object)
    : id_(id), closer_(closer), file_(std::move(file)), object_(std::move(object)) {}

Handle::Handle(Handle&& o) noexcept
    : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_), file_(std::move(o.file_)),
      object_(std::move(o.object_)) {}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = std::exchange(o.id_, H5I_INVALID_HID);
    closer_ = o.closer_;
    file_ = std::move(o.file_);
    object_ = std::move(o.object_);
  }
  return *this;
}

std::string Handle::where() const {
  return object_.empty() ? file_ : "'" + object_ + "' in " + file_;
}

std::string Handle::child(const std::string& name) const {
  if (!name.empty() && name.front() == '/') return name;
  return (object_.empty() || object_ == "/" ? "/" : object_ + "/") + name;
}

void Handle::close() {
  if (id_ < 0) return;
  const hid_t id = std::exchange(id_, H5I_INVALID_HID);
  check_rc(closer_(id), "close", where());
}

void Handle::reset() noexcept {
  if (id_ < 0) return;
  closer_(std::exchange(id_, H5I_INVALID_HID));
  H5Eclear2(H5E_DEFAULT);
}

hid_t Handle::release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }

namespace {

Handle latest_format_access(const std::string& path) {
  Handle fapl = create_props(H5P_FILE_ACCESS, "for " + path);
  check_rc(H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), "select the latest format for", path);
  return fapl;
}

}  // namespace

Handle create_file(const std::string& path, bool truncate, bool latest) {
  // Default (earliest) format for one-shot files: toolchain §4 found it readable after a crash at
  // every flush point, and it is what the oldest readers know.
  Handle fapl = latest ? latest_format_access(path) : Handle();
  const hid_t id = H5Fcreate(path.c_str(), truncate ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT,
                             fapl ? fapl.id() : H5P_DEFAULT);
  return Handle(check_id(id, "create file", path), H5Fclose, path, "");
}

Handle open_file(const std::string& path, unsigned flags) {
  Handle fapl = latest_format_access(path);
  const hid_t id = H5Fopen(path.c_str(), flags, fapl.id());
  return Handle(check_id(id, "open file", path), H5Fclose, path, "");
}

namespace {

// Builds the handle of a child object, checking the id with the child's name in the message.
Handle child_handle(hid_t id, Handle::Closer closer, const Handle& loc, const std::string& name,
                    const std::string& what) {
  const std::string object = loc.child(name);
  check_id(id, what, "'" + object + "' in " + loc.file());
  return Handle(id, closer, loc.file(), object);
}

}  // namespace

Handle open_group(const Handle& loc, const std::string& name) {
  return child_handle(H5Gopen2(loc.id(), name.c_str(), H5P_DEFAULT), H5Gclose, loc, name, "open group");
}

Handle open_dataset(const Handle& loc, const std::string& name) {
  return child_handle(H5Dopen2(loc.id(), name.c_str(), H5P_DEFAULT), H5Dclose, loc, name, "open dataset");
}

bool has_link(const Handle& loc, const std::string& name) {
  const htri_t r = H5Lexists(loc.id(), name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

Handle create_group(const Handle& loc, const std::string& name) {
  const hid_t id = H5Gcreate2(loc.id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  return child_handle(id, H5Gclose, loc, name, "create group");
}

Handle create_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& maxdims) {
  const hid_t id = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data());
  return Handle(check_id(id, "create dataspace", "of rank " + std::to_string(dims.size())), H5Sclose, "", "");
}

Handle scalar_space() {
  return Handle(check_id(H5Screate(H5S_SCALAR), "create", "a scalar dataspace"), H5Sclose, "", "");
}

Handle create_props(hid_t cls, const std::string& what) {
  return Handle(check_id(H5Pcreate(cls), "create property list", what), H5Pclose, "", "");
}

Handle copy_type(hid_t type, const std::string& what) {
  return Handle(check_id(H5Tcopy(type), "copy datatype", what), H5Tclose, "", "");
}

void commit_type(const Handle& loc, const std::string& name, const Handle& type) {
  const herr_t rc = H5Tcommit2(loc.id(), name.c_str(), type.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  check_rc(rc, "commit datatype", "'" + loc.child(name) + "' in " + loc.file());
}

Handle create_dataset(const Handle& loc, const std::string& name, hid_t type, const Handle& space,
                      const Handle& dcpl, const Handle& lcpl) {
  const hid_t id = H5Dcreate2(loc.id(), name.c_str(), type, space.id(), lcpl ? lcpl.id() : H5P_DEFAULT,
                              dcpl ? dcpl.id() : H5P_DEFAULT, H5P_DEFAULT);
  return child_handle(id, H5Dclose, loc, name, "create dataset");
}

Handle with_parent_groups() {
  Handle lcpl = create_props(H5P_LINK_CREATE, "for a dataset link");
  check_rc(H5Pset_create_intermediate_group(lcpl.id(), 1), "set intermediate group creation", "for a dataset link");
  return lcpl;
}

Handle dataset_space(const Handle& dataset) {
  return Handle(check_id(H5Dget_space(dataset.id()), "get the dataspace of", dataset.where()), H5Sclose,
                dataset.file(), dataset.object());
}

void write_attr(const Handle& obj, const std::string& name, const std::string& value) {
  // Variable-length UTF-8: the value lives in the global heap, so config_json may exceed the
  // 64 KiB limit of compact attribute storage.
  Handle type = copy_type(H5T_C_S1, "for a string attribute");
  check_rc(H5Tset_size(type.id(), H5T_VARIABLE), "set the size of a string type for", obj.where());
  check_rc(H5Tset_cset(type.id(), H5T_CSET_UTF8), "set UTF-8 on a string type for", obj.where());
  const char* ptr = value.c_str();
  write_scalar_attr(obj, name, type.id(), &ptr, scalar_space());
}

void write_attr(const Handle& obj, const std::string& name, std::int64_t value) {
  write_scalar_attr(obj, name, H5T_NATIVE_INT64, &value, scalar_space());
}

void write_attr(const Handle& obj, const std::string& name, const std::vector<std::int64_t>& values) {
  const std::vector<hsize_t> dims{values.size()};
  // A zero-length simple dataspace is not allowed for attributes: an empty list is a null space.
  Handle space = values.empty() ? Handle(check_id(H5Screate(H5S_NULL), "create", "a null dataspace"), H5Sclose, "", "")
                                : create_space(dims, dims);
  write_scalar_attr(obj, name, H5T_NATIVE_INT64, values.data(), space);
}

bool has_attr(const Handle& obj, const std::string& name) {
  const htri_t r = H5Aexists(obj.id(), name.c_str());
  if (r < 0) fail("look for attribute '" + name + "' of", obj.where());
  return r > 0;
}

namespace {

Handle open_attr(const Handle& obj, const std::string& name) {
  const hid_t a = H5Aopen(obj.id(), name.c_str(), H5P_DEFAULT);
  return Handle(check_id(a, "open attribute '" + name + "' of", obj.where()), H5Aclose, obj.file(), obj.object());
}

}  // namespace

std::string read_string_attr(const Handle& obj, const std::string& name) {
  Handle attr = open_attr(obj, name);
  Handle type = copy_type(H5T_C_S1, "for a string attribute");
  check_rc(H5Tset_size(type.id(), H5T_VARIABLE), "set the size of a string type for", obj.where());
  check_rc(H5Tset_cset(type.id(), H5T_CSET_UTF8), "set UTF-8 on a string type for", obj.where());
  char* s = nullptr;
  check_rc(H5Aread(attr.id(), type.id(), &s), "read attribute '" + name + "' of", obj.where());
  std::string out = s ? s : "";
  H5free_memory(s);
  return out;
}

std::int64_t read_int_attr(const Handle& obj, const std::string& name) {
  Handle attr = open_attr(obj, name);
  std::int64_t v = 0;
  check_rc(H5Aread(attr.id(), H5T_NATIVE_INT64, &v), "read attribute '" + name + "' of", obj.where());
  return v;
}

}  // namespace sonde::h5
