#pragma once
// Storage types of /acts. HDF5 1.10 has no 16-bit float, so f16 and bf16 are described as IEEE
// floats with custom fields (toolchain §4): h5py reads the first as numpy float16 and converts the
// second, which numpy lacks, to float32 exactly. The f32 -> 16-bit rounding is done here, never
// by HDF5 (its conversion is 30x slower and not round-to-nearest-even on subnormals).
#include "h5_handles.h"

#include <sonde/dtype.h>

#include <cstdint>
#include <vector>

namespace sonde::h5 {

// A transient float type for f16 or bf16 (little-endian, 2 bytes).
Handle make_half_type(DType t);

// One storage choice: the type datasets are created with and the identical in-memory type, so
// that H5Dwrite copies bytes without converting.
struct StorageType {
  DType dtype = DType::f32;
  Handle committed;  // /types/<name> for f16 and bf16; empty for f32
  hid_t file_type() const { return committed ? committed.id() : H5T_IEEE_F32LE; }
  hid_t mem_type() const { return committed ? mem.id() : H5T_NATIVE_FLOAT; }
  std::size_t size() const { return committed ? 2 : 4; }
  Handle mem;
};

// For f16 and bf16, commits the type as `name` under `types_group`.
StorageType make_storage_type(DType t, const Handle& types_group);
// The same for a file written earlier (streaming reopen).
StorageType open_storage_type(DType t, const Handle& types_group);

// Rounds f32 values to f16 or bf16 bits, nearest even (sonde/dtype.h).
std::vector<std::uint16_t> to_half_bits(const float* values, std::size_t n, DType t);

}  // namespace sonde::h5
