// Writing safetensors files: names sorted, header padded to 8 bytes, tensors streamed one at a
// time, written to FILE.tmp and renamed so a partial file never looks complete.
#include <sonde/error.h>
#include <sonde/safetensors.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sonde {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using NamedViews = std::vector<std::pair<std::string, TensorView>>;

std::vector<TensorSpec> sorted_specs(std::vector<TensorSpec> specs) {
  std::sort(specs.begin(), specs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (std::size_t i = 1; i < specs.size(); ++i)
    if (specs[i].name == specs[i - 1].name) runtime_error("write_safetensors: tensor '{}' given twice", specs[i].name);
  return specs;
}

std::uint64_t spec_bytes(const TensorSpec& t) { return static_cast<std::uint64_t>(t.shape.numel()) * dtype_size(t.dtype); }

// The header, padded with spaces so the data section starts 8-byte aligned in the file.
std::string make_header(const std::vector<TensorSpec>& sorted, const std::map<std::string, std::string>& metadata) {
  json root = json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : sorted) {
    std::vector<std::int64_t> shape(t.shape.dims.begin(), t.shape.dims.begin() + t.shape.rank);
    root[t.name] = {{"dtype", std::string(dtype_to_safetensors(t.dtype))}, {"shape", shape}, {"data_offsets", {offset, offset + spec_bytes(t)}}};
    offset += spec_bytes(t);
  }
  std::string text = root.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_to(std::ostream& out, const std::vector<TensorSpec>& specs, const std::map<std::string, std::string>& metadata,
              const TensorFiller& fill) {
  const auto sorted = sorted_specs(specs);
  const std::string header = make_header(sorted, metadata);
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((static_cast<std::uint64_t>(header.size()) >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& t : sorted) {
    const auto before = out.tellp();
    fill(t, out);
    if (out && before >= 0 && static_cast<std::uint64_t>(out.tellp() - before) != spec_bytes(t))
      runtime_error("write_safetensors: tensor '{}' wrote {} bytes, expected {}", t.name,
                    static_cast<std::int64_t>(out.tellp() - before), spec_bytes(t));
  }
}

// Specs plus a filler that copies each view's bytes (contiguously).
std::pair<std::vector<TensorSpec>, TensorFiller> from_views(const NamedViews& tensors) {
  std::vector<TensorSpec> specs;
  std::map<std::string, TensorView> by_name;
  for (const auto& [name, v] : tensors) {
    specs.push_back({name, v.dtype, v.shape});
    by_name[name] = v;
  }
  TensorFiller fill = [by_name](const TensorSpec& t, std::ostream& out) {
    const TensorView& v = by_name.at(t.name);
    const Tensor copy = v.contiguous() ? Tensor() : Tensor::copy_of(v);
    const void* data = copy.empty() ? v.data : copy.view().data;
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(v.nbytes()));
  };
  return {specs, fill};
}

}  // namespace

std::string safetensors_bytes(const NamedViews& tensors, const std::map<std::string, std::string>& metadata) {
  std::ostringstream out(std::ios::binary);
  const auto [specs, fill] = from_views(tensors);
  write_to(out, specs, metadata, fill);
  return out.str();
}

void write_safetensors_streamed(const fs::path& file, const std::vector<TensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata, const TensorFiller& fill) {
  // Written beside the target and renamed, so an interrupted write never leaves a file that looks complete.
  fs::path tmp = file;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) runtime_error("{}: cannot create: {}", tmp.string(), std::strerror(errno));
    write_to(out, specs, metadata, fill);
    out.flush();
    if (!out) runtime_error("{}: write failed: {}", tmp.string(), std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) runtime_error("{}: cannot rename to {}: {}", tmp.string(), file.string(), ec.message());
}

void write_safetensors(const fs::path& file, const NamedViews& tensors, const std::map<std::string, std::string>& metadata) {
  const auto [specs, fill] = from_views(tensors);
  write_safetensors_streamed(file, specs, metadata, fill);
}


}  // namespace sonde
