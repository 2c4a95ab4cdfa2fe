#include <sonde/dtype.h>
#include <sonde/error.h>

#include <cmath>

namespace sonde {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

namespace {
struct Names {
  DType t;
  std::string_view ours, safetensors;
};
constexpr Names kNames[] = {
    {DType::f32, "f32", "F32"}, {DType::f16, "f16", "F16"}, {DType::bf16, "bf16", "BF16"},
    {DType::f64, "f64", "F64"}, {DType::i32, "i32", "I32"}, {DType::i64, "i64", "I64"},
    {DType::u8, "u8", "U8"},
};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& n : kNames)
    if (n.t == t) return n.ours;
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& n : kNames)
    if (n.ours == name) return n.t;
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  for (const auto& n : kNames)
    if (n.safetensors == s) return n.t;
  return std::nullopt;
}

std::string_view dtype_to_safetensors(DType t) {
  for (const auto& n : kNames)
    if (n.t == t) return n.safetensors;
  return "?";
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64; }

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

std::uint16_t f32_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {
    // Subnormal in f16 (or zero): value = mant * 2^-24, rounded to nearest even.
    float a;
    std::memcpy(&a, &absx, 4);
    const float scaled = a * 16777216.0f;  // exact: multiply by 2^24
    const auto m = static_cast<std::uint32_t>(std::nearbyint(scaled));  // default mode: ties to even
    return static_cast<std::uint16_t>(sign | m);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  std::uint32_t r = absx - 0x38000000u;  // exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

double load_as_double(const void* data, DType t, std::size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::f64: return static_cast<const double*>(data)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
    case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(data)[i]);
    case DType::i32: return static_cast<const std::int32_t*>(data)[i];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(data)[i]);
    case DType::u8: return static_cast<const std::uint8_t*>(data)[i];
  }
  return 0;
}

}  // namespace sonde
