#include "h5_float_types.h"

#include <sonde/error.h>

#include <bit>
#include <string>

namespace sonde::h5 {

// The values are written as the host's uint16 bit patterns into a little-endian type.
static_assert(std::endian::native == std::endian::little, "16-bit float storage assumes a little-endian host");

Handle make_half_type(DType t) {
  if (t != DType::f16 && t != DType::bf16) bad_input("no 16-bit HDF5 float type for dtype {}", dtype_name(t));
  const bool bf = t == DType::bf16;
  const std::string what = "for " + std::string(dtype_name(t));
  Handle type = copy_type(H5T_IEEE_F32LE, what);
  // Fields: sign bit 15; exponent at bit 10 (f16, 5 bits) or 7 (bf16, 8 bits); mantissa at 0.
  const std::size_t exp_pos = bf ? 7 : 10, exp_bits = bf ? 8 : 5, mant_bits = bf ? 7 : 10;
  check_rc(H5Tset_fields(type.id(), 15, exp_pos, exp_bits, 0, mant_bits), "set the float fields", what);
  check_rc(H5Tset_size(type.id(), 2), "set the size of a float type", what);
  check_rc(H5Tset_ebias(type.id(), bf ? 127 : 15), "set the exponent bias", what);
  return type;
}

StorageType make_storage_type(DType t, const Handle& types_group) {
  StorageType s;
  s.dtype = t;
  if (t == DType::f32) return s;
  Handle committed = make_half_type(t);
  commit_type(types_group, std::string(dtype_name(t)), committed);
  // After H5Tcommit2 the same id names /types/<name>; keep it with that name for messages.
  s.committed = Handle(committed.release(), H5Tclose, types_group.file(), types_group.child(std::string(dtype_name(t))));
  s.mem = make_half_type(t);
  return s;
}

StorageType open_storage_type(DType t, const Handle& types_group) {
  StorageType s;
  s.dtype = t;
  if (t == DType::f32) return s;
  const std::string name(dtype_name(t));
  const hid_t id = H5Topen2(types_group.id(), name.c_str(), H5P_DEFAULT);
  s.committed = Handle(check_id(id, "open datatype", "'" + types_group.child(name) + "' in " + types_group.file()), H5Tclose,
                       types_group.file(), types_group.child(name));
  s.mem = make_half_type(t);
  return s;
}

std::vector<std::uint16_t> to_half_bits(const float* values, std::size_t n, DType t) {
  std::vector<std::uint16_t> out(n);
  if (t == DType::bf16) {
    for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(values[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_f16(values[i]);
  }
  return out;
}

}  // namespace sonde::h5
