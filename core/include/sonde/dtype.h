#pragma once
// Element types and the scalar conversions for the 16-bit floats. Conversions round to nearest
// even, as PyTorch and numpy do, so bf16/f16 values written by sonde match theirs bit for bit.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace sonde {

enum class DType : std::uint8_t { f32, f16, bf16, f64, i32, i64, u8 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);                             // "f32", "bf16", ...
std::optional<DType> parse_dtype(std::string_view name);          // inverse of dtype_name
std::optional<DType> dtype_from_safetensors(std::string_view s);  // "F32", "BF16", ...
std::string_view dtype_to_safetensors(DType t);
bool is_float(DType t);

inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// Reads element i of a float buffer of type t (f32, f16, bf16, f64) as double.
double load_as_double(const void* data, DType t, std::size_t i);

}  // namespace sonde
