// Fuzz target: parse_safetensors_header on arbitrary bytes. A sonde::Error is the expected
// answer to bad input; any other exception, a crash, a sanitizer report or a broken invariant
// of an accepted header is a bug.
#include <sonde/error.h>
#include <sonde/safetensors.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "fuzz_hooks.h"

namespace {

[[noreturn]] void invariant_broken(const char* what, const std::string& name) {
  std::fprintf(stderr, "accepted header breaks an invariant: %s (tensor '%s')\n", what, name.c_str());
  std::abort();
}

// What the validator promises to callers: every tensor lies inside the file, its size matches
// its shape, and no two tensors share bytes.
void check_accepted(const sonde::SafetensorsHeader& h, std::span<const std::byte> bytes) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& t : h.tensors) {
    if (t.offset < h.data_start || t.offset + t.nbytes > bytes.size()) invariant_broken("outside the file", t.name);
    if (t.shape.rank > sonde::kMaxRank) invariant_broken("rank", t.name);
    if (static_cast<std::uint64_t>(t.shape.numel()) * sonde::dtype_size(t.dtype) != t.nbytes)
      invariant_broken("size does not match the shape", t.name);
    if (t.nbytes) ranges.emplace_back(t.offset, t.offset + t.nbytes);
    // Touch the first and last byte so the sanitizers see any read past the buffer.
    if (t.nbytes) {
      [[maybe_unused]] volatile std::byte first = bytes[t.offset];
      [[maybe_unused]] volatile std::byte last = bytes[t.offset + t.nbytes - 1];
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) invariant_broken("overlap", "");
}

std::uint64_t read_u64(const std::string& s) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[static_cast<std::size_t>(i)]);
  return v;
}

std::string u64_bytes(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    check_accepted(sonde::parse_safetensors_header(bytes, "fuzz.safetensors"), bytes);
  } catch (const sonde::Error&) {
  }
  return 0;
}

// Seeds: small valid files from our own writer, covering every dtype, rank 0..4, empty tensors
// and metadata.
std::vector<std::string> sonde_fuzz_seeds() {
  using sonde::DType;
  using sonde::TensorView;
  static std::vector<unsigned char> buf(256, 0x3c);
  void* p = buf.data();
  return {
      sonde::safetensors_bytes({{"model.norm.weight", TensorView(p, DType::f32, {4})}}, {{"format", "pt"}}),
      sonde::safetensors_bytes({{"a", TensorView(p, DType::bf16, {2, 3})},
                                {"b", TensorView(p, DType::f16, {3})},
                                {"c", TensorView(p, DType::i32, {1, 1, 2})},
                                {"d", TensorView(p, DType::i64, {2})},
                                {"e", TensorView(p, DType::u8, {1, 2, 1, 3})},
                                {"f", TensorView(p, DType::f64, {1})}}),
      sonde::safetensors_bytes({{"scalar", TensorView(p, DType::f32, sonde::Shape{})},
                                {"empty", TensorView(p, DType::f32, {0, 4})}}),
      sonde::safetensors_bytes({}),
  };
}

// Edits inside the JSON header and then fixes the length prefix, so mutants get past the length
// check and exercise the field validation; generic byte mutations rarely manage both.
void sonde_fuzz_mutate(std::string& s, std::uint64_t r) {
  if (s.size() < 8) return;
  const std::uint64_t len = read_u64(s);
  if (len > s.size() - 8) return;
  std::string header = s.substr(8, len), data = s.substr(8 + len);
  static const char* kValues[] = {"-1", "0", "1", "4", "8", "[0,4]", "[4,0]", "[0,18446744073709551615]",
                                  "[4294967296,4294967296]", "\"F32\"", "\"U8\"", "\"Q4\"", "null", "[]", "{}",
                                  "[1,1,1,1,1]", "1.0", "\"x\"", "9223372036854775808"};
  const std::size_t at = header.empty() ? 0 : (r >> 8) % header.size();
  switch (r % 4) {
    case 0: {  // replace the JSON value after some ':' or ',' with a boundary value
      const std::size_t sep = header.find_first_of(":,", at);
      if (sep == std::string::npos) break;
      const std::size_t end = header.find_first_of(",}]", sep + 1);
      header.replace(sep + 1, (end == std::string::npos ? header.size() : end) - sep - 1,
                     kValues[(r >> 40) % std::size(kValues)]);
      break;
    }
    case 1:  // grow or shrink the data section
      data.resize((r >> 40) % 64);
      break;
    case 2:  // rename a key to a duplicate-looking one
      if (const std::size_t q = header.find('"', at); q != std::string::npos) header.insert(q + 1, "a");
      break;
    default:  // insert a whole extra entry
      if (const std::size_t b = header.find('{'); b != std::string::npos)
        header.insert(b + 1, "\"z\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string((r >> 16) % 9) +
                                 "],\"data_offsets\":[" + std::to_string((r >> 24) % 9) + "," +
                                 std::to_string((r >> 32) % 17) + "]},");
  }
  s = u64_bytes(header.size()) + header + data;
}
