#pragma once
// Reading arrays that edits need (a steering vector, a direction, a mean, a previous run's rows)
// from files: NumPy .npy in core, other formats through the plugins that implement ArrayReader
// (the hdf5 sink does: core links no HDF5), found by what they read, not by their names.
#include <sonde/tensor.h>

#include <memory>
#include <optional>
#include <string>

namespace sonde {

class ArrayReader {
 public:
  virtual ~ArrayReader();
  // The whole dataset `dataset` ("/dir/v") of HDF5 file `file`: floating types as f32, integers
  // as i64 (u8 for 1-byte unsigned). BadInput naming the file and dataset when either is missing
  // or the type is neither.
  virtual Tensor read(const std::string& file, const std::string& dataset) const = 0;
  virtual bool has(const std::string& file, const std::string& dataset) const = 0;
  // A string attribute of the root group, nullopt if absent.
  virtual std::optional<std::string> root_attr(const std::string& file, const std::string& name) const = 0;
  // Whether `file` is of this reader's format (its extension or signature); a missing file of its
  // extension too, so that read() names what is wrong.
  virtual bool reads(const std::string& file) const = 0;
};

// The reader for `file`: the first sink plugin that is an ArrayReader and reads() it (BadInput
// naming the file when none does).
std::shared_ptr<const ArrayReader> array_reader_for(const std::string& file);

// A .npy file (version 1-3, little-endian f2/f4/f8 or integers, C order): floats as f32,
// integers as i64. BadInput naming the file for anything else.
Tensor read_npy(const std::string& path);

// "file.npy", or "file.h5:/path/in/file" (also .hdf5): BadInput for a missing file or dataset.
Tensor read_array_source(const std::string& source);

}  // namespace sonde
