#pragma once
// Read-only HDF5 access for the report: a file opened as a reader of a live SWMR writer when it
// can be (a batch still running), whole 1-D datasets and row ranges as doubles or int64, and the
// root attributes as JSON. Every failure is one sonde::Error naming the file and the object.
#include <hdf5.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sonde::report {

class H5Object {
 public:
  H5Object() = default;
  H5Object(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  H5Object(H5Object&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  H5Object& operator=(H5Object&& o) noexcept;
  H5Object(const H5Object&) = delete;
  H5Object& operator=(const H5Object&) = delete;
  ~H5Object();
  hid_t id() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*closer_)(hid_t) = nullptr;
};

class H5File {
 public:
  // BadInput "<path>: not a readable HDF5 file (...)" for a missing, truncated or foreign file.
  explicit H5File(const std::string& path);
  const std::string& path() const { return path_; }
  bool has(const std::string& object) const;       // "/acts/x": every link on the way exists
  std::vector<std::string> children(const std::string& group) const;  // names, sorted
  // Root attributes: strings as strings, integers as int64, floats as double. A live writer's
  // attributes can be unreadable (docs/hdf5-layout.md): those are left out and `attrs_readable` is false.
  nlohmann::json root_attrs();
  bool attrs_readable() const { return attrs_readable_; }
  std::vector<hsize_t> dims(const std::string& dataset) const;
  // Rows [begin, begin + count) of a dataset (count -1: to its end), flattened, converted by
  // HDF5 (bf16 and f16 widen exactly to double).
  std::vector<double> read_f64(const std::string& dataset, hsize_t begin = 0, hssize_t count = -1) const;
  std::vector<std::int64_t> read_i64(const std::string& dataset, hsize_t begin = 0, hssize_t count = -1) const;
  // A streaming file's committed prompt count (/progress/mark), -1 if it has none.
  std::int64_t mark_prompts() const;

 private:
  // Elements of rows [begin, begin + count); sets count when it is -1. BadInput past the end.
  std::size_t elements(const std::string& dataset, hsize_t begin, hssize_t& count) const;
  void read_rows(const std::string& dataset, hsize_t begin, hssize_t count, hid_t mem, void* out) const;
  std::string path_;
  H5Object file_;
  bool attrs_readable_ = true;
  bool swmr_ = false;  // opened as the reader of a live SWMR writer
};

}  // namespace sonde::report
