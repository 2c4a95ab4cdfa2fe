// .npy reading, and the route to a plugin's reader by the file it reads (array_reader.h).
#include <sonde/array_reader.h>
#include <sonde/error.h>
#include <sonde/registry.h>
#include <sonde/sink.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

namespace sonde {

ArrayReader::~ArrayReader() = default;  // the vtable and type_info live in core (one copy)

std::shared_ptr<const ArrayReader> array_reader_for(const std::string& file) {
  auto& registry = PluginRegistry::instance();
  std::string sinks;
  for (const auto& e : registry.plugins()) {
    if (e.kind != "sink") continue;
    sinks += (sinks.empty() ? "" : ", ") + e.name;
    std::shared_ptr<Sink> sink = registry.sink(e.name);
    const auto* reader = dynamic_cast<const ArrayReader*>(sink.get());
    if (reader && reader->reads(file)) return std::shared_ptr<const ArrayReader>(sink, reader);  // keeps the plugin alive
  }
  bad_input("{}: no plugin reads this file (sink plugins found: {})", file, sinks.empty() ? "none" : sinks);
}

namespace {

std::string header_field(const std::string& header, const std::string& key, const std::string& path) {
  const std::regex re("'" + key + "'\\s*:\\s*('[^']*'|True|False|\\([^)]*\\))");
  std::smatch m;
  if (!std::regex_search(header, m, re)) bad_input("{}: the .npy header has no '{}'", path, key);
  return m[1].str();
}

}  // namespace

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) bad_input("{}: cannot open the .npy file", path);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad_input("{}: not a .npy file", path);
  std::uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    hlen = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  }
  std::string header(hlen, '\0');
  if (!f.read(header.data(), hlen)) bad_input("{}: truncated .npy header", path);
  const std::string descr = header_field(header, "descr", path);
  if (header_field(header, "fortran_order", path) != "False") bad_input("{}: Fortran-order arrays are not read", path);
  const std::string shape_text = header_field(header, "shape", path);
  Shape shape;
  shape.rank = 0;
  const std::regex num("\\d+");
  for (auto it = std::sregex_iterator(shape_text.begin(), shape_text.end(), num); it != std::sregex_iterator(); ++it) {
    if (shape.rank == 4) bad_input("{}: arrays of rank above 4 are not read", path);
    shape[shape.rank++] = std::stoll(it->str());
  }
  const std::string d = descr.substr(1, descr.size() - 2);  // '<f4' -> <f4
  if (d.size() < 3 || (d[0] != '<' && d[0] != '|')) bad_input("{}: dtype {} is not little-endian", path, descr);
  const char kind = d[1];
  const int width = std::stoi(d.substr(2));
  const std::int64_t n = shape.numel();
  std::vector<char> raw(static_cast<std::size_t>(n * width));
  if (!f.read(raw.data(), static_cast<std::streamsize>(raw.size()))) bad_input("{}: truncated .npy data", path);
  if (kind == 'f' && (width == 2 || width == 4 || width == 8)) {
    Tensor t(DType::f32, shape);
    const DType src = width == 2 ? DType::f16 : width == 4 ? DType::f32 : DType::f64;
    for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(load_as_double(raw.data(), src, static_cast<std::size_t>(i)));
    return t;
  }
  if ((kind == 'i' || kind == 'u') && (width == 1 || width == 2 || width == 4 || width == 8)) {
    Tensor t(DType::i64, shape);
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t v = 0;
      std::memcpy(&v, raw.data() + i * width, static_cast<std::size_t>(width));
      if (kind == 'i' && width < 8 && (v >> (8 * width - 1)) & 1) v |= ~((std::int64_t{1} << (8 * width)) - 1);
      t.data<std::int64_t>()[i] = v;
    }
    return t;
  }
  bad_input("{}: dtype {} is neither a float nor an integer type", path, descr);
}

Tensor read_array_source(const std::string& source) {
  const auto colon = source.find(":/");
  if (colon != std::string::npos) {
    const std::string file = source.substr(0, colon), dataset = source.substr(colon + 1);
    if (!std::filesystem::exists(file)) bad_input("{}: no such file", file);
    return array_reader_for(file)->read(file, dataset);
  }
  if (source.size() > 4 && source.substr(source.size() - 4) == ".npy") return read_npy(source);
  bad_input("'{}' is neither FILE.npy nor FILE.h5:/dataset", source);
}

}  // namespace sonde
