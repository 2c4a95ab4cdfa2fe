// Safetensors header parsing and validation (the fuzz target's entry).
// Format: u64 little-endian header length N, N bytes of JSON header, then the data section.
#include <sonde/error.h>
#include <sonde/safetensors.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "safetensors_internal.h"

namespace sonde {

using nlohmann::json;
using safetensors_detail::shown;
using safetensors_detail::shown_json;

namespace {

// The Rust safetensors crate caps the header at 100 MB; a larger value is a corrupt file, and
// checking it first keeps us from even looking at such a range.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests three levels deep (root, entry, shape); a generous cap keeps hostile
// input from driving the JSON library (and our error-message dumps) into deep recursion.
constexpr int kMaxJsonDepth = 16;

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

// Rejects nesting deeper than kMaxJsonDepth before the JSON library sees the text.
void check_json_depth(std::string_view text, const std::string& label) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) bad_input("{}: header JSON nests deeper than {} levels", label, kMaxJsonDepth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

json parse_header_json(std::string_view text, const std::string& label) {
  check_json_depth(text, label);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    bad_input("{}: header is not valid JSON: {}", label, e.what());
  }
}

// An exact non-negative integer; JSON floats (1.0) and negatives are rejected.
std::optional<std::uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

struct EntryContext {
  const std::string& label;
  const std::string& name;
  std::uint64_t data_size;
};

DType parse_entry_dtype(const json& e, const EntryContext& c) {
  auto it = e.find("dtype");
  if (it == e.end()) bad_input("{}: tensor '{}': field 'dtype' is missing", c.label, shown(c.name));
  if (!it->is_string())
    bad_input("{}: tensor '{}': field 'dtype' is {}, expected a string", c.label, shown(c.name), shown_json(*it));
  const auto& s = it->get_ref<const std::string&>();
  auto t = dtype_from_safetensors(s);
  if (!t)
    bad_input("{}: tensor '{}': unsupported dtype \"{}\" (supported: F32, F16, BF16, F64, I32, I64, U8)",
              c.label, shown(c.name), shown(s));
  return *t;
}

Shape parse_entry_shape(const json& e, const EntryContext& c) {
  auto it = e.find("shape");
  if (it == e.end()) bad_input("{}: tensor '{}': field 'shape' is missing", c.label, shown(c.name));
  if (!it->is_array())
    bad_input("{}: tensor '{}': field 'shape' is {}, expected an array of integers", c.label, shown(c.name), shown_json(*it));
  if (it->size() > static_cast<std::size_t>(kMaxRank))
    bad_input("{}: tensor '{}': shape {} has rank {}, more than the supported {}", c.label, shown(c.name),
              shown_json(*it), it->size(), kMaxRank);
  Shape s;
  s.rank = static_cast<int>(it->size());
  for (int i = 0; i < s.rank; ++i) {
    auto d = as_u64((*it)[static_cast<std::size_t>(i)]);
    if (!d || *d > static_cast<std::uint64_t>(INT64_MAX))
      bad_input("{}: tensor '{}': shape {} has a dimension that is not a non-negative integer", c.label,
                shown(c.name), shown_json(*it));
    s[i] = static_cast<std::int64_t>(*d);
  }
  return s;
}

// numel * element size, or nullopt when it overflows 64 bits.
std::optional<std::uint64_t> byte_count(const Shape& s, DType t) {
  std::uint64_t n = dtype_size(t);
  for (int i = 0; i < s.rank; ++i)
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(s[i]), &n)) return std::nullopt;
  return n;
}

std::pair<std::uint64_t, std::uint64_t> parse_entry_offsets(const json& e, const EntryContext& c) {
  auto it = e.find("data_offsets");
  if (it == e.end()) bad_input("{}: tensor '{}': field 'data_offsets' is missing", c.label, shown(c.name));
  auto b = it->is_array() && it->size() == 2 ? as_u64((*it)[0]) : std::nullopt;
  auto en = it->is_array() && it->size() == 2 ? as_u64((*it)[1]) : std::nullopt;
  if (!b || !en)
    bad_input("{}: tensor '{}': field 'data_offsets' is {}, expected [begin, end] non-negative integers", c.label,
              shown(c.name), shown_json(*it));
  if (*b > *en) bad_input("{}: tensor '{}': data_offsets [{}, {}] begin after end", c.label, shown(c.name), *b, *en);
  if (*en > c.data_size)
    bad_input("{}: tensor '{}': data_offsets [{}, {}] end past the data section ({} bytes)", c.label, shown(c.name), *b,
              *en, c.data_size);
  return {*b, *en};
}

WeightInfo parse_entry(const std::string& name, const json& e, const EntryContext& c, std::uint64_t data_start) {
  if (!e.is_object()) bad_input("{}: tensor '{}': entry is {}, expected an object", c.label, shown(name), shown_json(e));
  WeightInfo w;
  w.name = name;
  w.dtype = parse_entry_dtype(e, c);
  w.shape = parse_entry_shape(e, c);
  const auto [begin, end] = parse_entry_offsets(e, c);
  const auto want = byte_count(w.shape, w.dtype);
  if (!want)
    bad_input("{}: tensor '{}': shape {} of {} overflows 64-bit byte counts", c.label, shown(name), w.shape.str(),
              dtype_to_safetensors(w.dtype));
  if (end - begin != *want)
    bad_input("{}: tensor '{}': data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", c.label, shown(name),
              begin, end, end - begin, w.shape.str(), dtype_to_safetensors(w.dtype), *want);
  w.offset = data_start + begin;
  w.nbytes = *want;
  return w;
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& label) {
  if (!m.is_object()) bad_input("{}: '__metadata__' is {}, expected an object of strings", label, shown_json(m));
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string())
      bad_input("{}: '__metadata__' entry '{}' is {}, expected a string", label, shown(k), shown_json(v));
    out[k] = v.get<std::string>();
  }
  return out;
}

// Zero-byte tensors occupy no bytes, so only non-empty ranges can collide.
void check_no_overlap(std::vector<WeightInfo>& ts, const std::string& label) {
  std::sort(ts.begin(), ts.end(), [](const WeightInfo& a, const WeightInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
  });
  const WeightInfo* prev = nullptr;
  for (const auto& t : ts) {
    if (t.nbytes == 0) continue;
    if (prev && t.offset < prev->offset + prev->nbytes)
      bad_input("{}: tensor '{}' (bytes {}..{}) overlaps tensor '{}' (bytes {}..{})", label, shown(t.name), t.offset,
                t.offset + t.nbytes, shown(prev->name), prev->offset, prev->offset + prev->nbytes);
    if (!prev || t.offset + t.nbytes > prev->offset + prev->nbytes) prev = &t;
  }
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> bytes, const std::string& label) {
  if (bytes.size() < 8)
    bad_input("{}: file is {} bytes, too short for the 8-byte header length of a safetensors file", label, bytes.size());
  const std::uint64_t header_len = read_u64_le(bytes.data());
  const std::uint64_t rest = bytes.size() - 8;
  if (header_len > kMaxHeaderBytes)
    bad_input("{}: header length {} is larger than the {} byte limit (not a safetensors file?)", label, header_len,
              kMaxHeaderBytes);
  if (header_len > rest)
    bad_input("{}: header length {} runs past the end of the file ({} bytes)", label, header_len, bytes.size());

  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  const json root = parse_header_json(text, label);
  if (!root.is_object()) bad_input("{}: header is {}, expected a JSON object", label, shown_json(root));

  SafetensorsHeader h;
  h.data_start = 8 + header_len;
  const std::uint64_t data_size = rest - header_len;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      h.metadata = parse_metadata(entry, label);
      continue;
    }
    const EntryContext c{label, name, data_size};
    h.tensors.push_back(parse_entry(name, entry, c, h.data_start));
  }
  check_no_overlap(h.tensors, label);
  return h;
}


}  // namespace sonde
