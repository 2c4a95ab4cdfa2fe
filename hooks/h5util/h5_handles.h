#pragma once
// A thin RAII layer over the HDF5 C API. Every handle remembers the file and object it names, so
// that a failure becomes one sonde::Error line saying what failed, where, and why (the innermost
// messages of HDF5's error stack). HDF5's own printing of the stack is silenced.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sonde::h5 {

// HDF5 prints its error stack to stderr by default. The setting is per thread in Debian's
// thread-safe build, so every entry point of the sink calls this on its own thread.
void silence_errors();

// HDF5 1.10.8 segfaults in its exit handler (H5F__close_cb) when a file could not be closed
// because its metadata could not be written, e.g. on a full disk: the program would report the
// error and then crash. Skipping the handler avoids that; every file we open is closed by its
// Handle. It only takes effect if called before any other HDF5 call in the process.
void skip_library_cleanup_at_exit();

// Throws Error(Runtime) "HDF5: cannot <what> <where>: <reason from the error stack>".
[[noreturn]] void fail(const std::string& what, const std::string& where);
hid_t check_id(hid_t id, const std::string& what, const std::string& where);
void check_rc(herr_t rc, const std::string& what, const std::string& where);

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  Handle() = default;
  Handle(hid_t id, Closer closer, std::string file, std::string object);
  Handle(Handle&& o) noexcept;
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t id() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  const std::string& file() const { return file_; }
  const std::string& object() const { return object_; }  // "/acts/blocks.0.hook_z"; "" for a file
  std::string where() const;                               // "'/acts/x' in /tmp/a.h5"
  std::string child(const std::string& name) const;        // object path of a child

  void close();            // throws: closing a file is where buffered writes may fail
  void reset() noexcept;   // closes and ignores failures (destructors, error paths)
  hid_t release() noexcept;  // gives up ownership without closing

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
  std::string file_, object_;
};

// Files, groups, dataspaces, property lists, types. `latest` selects the newest file format,
// which SWMR needs (superblock v3); one-shot files keep the default (earliest) format.
Handle create_file(const std::string& path, bool truncate, bool latest = false);
// Opens with the newest format bounds; `flags` is H5F_ACC_RDONLY, H5F_ACC_RDWR, or
// H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE.
Handle open_file(const std::string& path, unsigned flags);
Handle open_group(const Handle& loc, const std::string& name);
Handle open_dataset(const Handle& loc, const std::string& name);
bool has_link(const Handle& loc, const std::string& name);
Handle create_group(const Handle& loc, const std::string& name);
Handle create_space(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& maxdims);
Handle scalar_space();
Handle create_props(hid_t cls, const std::string& what);
Handle copy_type(hid_t type, const std::string& what);
void commit_type(const Handle& loc, const std::string& name, const Handle& type);
Handle create_dataset(const Handle& loc, const std::string& name, hid_t type, const Handle& space,
                      const Handle& dcpl, const Handle& lcpl = Handle());
// Link creation properties that create missing parent groups ("/a/b/c").
Handle with_parent_groups();
Handle dataset_space(const Handle& dataset);

// Attributes on a file, group or dataset. Writing an existing attribute overwrites its value, so
// a flag created early can be updated later without creating objects (SWMR allows no new ones).
void write_attr(const Handle& obj, const std::string& name, const std::string& value);
void write_attr(const Handle& obj, const std::string& name, std::int64_t value);
void write_attr(const Handle& obj, const std::string& name, const std::vector<std::int64_t>& values);
bool has_attr(const Handle& obj, const std::string& name);
std::string read_string_attr(const Handle& obj, const std::string& name);
std::int64_t read_int_attr(const Handle& obj, const std::string& name);

}  // namespace sonde::h5
