// Safetensors reading (validated header, mmap'ed data) and writing.
// Format: u64 little-endian header length N, N bytes of JSON header, then the data section.
#include <sonde/error.h>
#include <sonde/safetensors.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace sonde {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The Rust safetensors crate caps the header at 100 MB; a larger value is a corrupt file, and
// checking it first keeps us from even looking at such a range.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests three levels deep (root, entry, shape); a generous cap keeps hostile
// input from driving the JSON library (and our error-message dumps) into deep recursion.
constexpr int kMaxJsonDepth = 16;
constexpr std::size_t kMaxShown = 80;  // longest value quoted in an error message

// Quotes a user-supplied string for a one-line message: control bytes escaped, long values cut.
std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, kMaxShown)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  if (s.size() > kMaxShown) out += "...";
  return out;
}

std::string shown_json(const json& v) {
  return shown(v.dump(-1, ' ', false, json::error_handler_t::replace));
}

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

// ---------------------------------------------------------------------------------------------
// WeightSource

namespace {

// One read-only file mapping, unmapped on destruction.
class Mapping {
 public:
  explicit Mapping(const fs::path& file) : path_(file) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) bad_input("{}: cannot open: {}", file.string(), std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      runtime_error("{}: cannot stat: {}", file.string(), std::strerror(err));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {  // mmap of length 0 fails; an empty file is reported by the header parser
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);
      if (p == MAP_FAILED) runtime_error("{}: cannot map {} bytes: {}", file.string(), size_, std::strerror(err));
      data_ = static_cast<const std::byte*>(p);
    } else {
      ::close(fd);
    }
  }
  ~Mapping() {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::byte* data() const { return data_; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

struct Entry {
  WeightInfo info;
  const std::byte* base = nullptr;  // start of the mapped file holding the tensor
};

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) bad_input("{}: cannot open: {}", file.string(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The index's weight_map: tensor name -> shard file name (relative to the directory).
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  const std::string label = index.string();
  json root;
  try {
    root = json::parse(read_text(index));
  } catch (const json::exception& e) {
    bad_input("{}: not valid JSON: {}", label, e.what());
  }
  if (!root.is_object()) bad_input("{}: expected a JSON object, got {}", label, shown_json(root));
  auto wm = root.find("weight_map");
  if (wm == root.end()) bad_input("{}: field 'weight_map' is missing", label);
  if (!wm->is_object()) bad_input("{}: field 'weight_map' is {}, expected an object", label, shown_json(*wm));
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string())
      bad_input("{}: weight_map entry '{}' is {}, expected a file name", label, shown(name), shown_json(file));
    const fs::path rel = file.get<std::string>();
    // Shards live beside the index; anything else would read outside the model directory.
    if (rel.empty() || rel.is_absolute() || std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }))
      bad_input("{}: weight_map entry '{}' names file '{}', expected a file name inside the directory", label,
                shown(name), shown(rel.string()));
    out[name] = rel.string();
  }
  if (out.empty()) bad_input("{}: weight_map is empty", label);
  return out;
}

std::string describe_dir_contents(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  if (names.empty()) return "the directory is empty";
  std::sort(names.begin(), names.end());
  std::string s = "it holds ";
  for (std::size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + shown(names[i]);
  if (names.size() > 8) s += fmt::format(" and {} more", names.size() - 8);
  return s;
}

}  // namespace

struct WeightSource::Impl {
  fs::path root;
  std::vector<std::unique_ptr<Mapping>> maps;
  std::map<std::string, Entry, std::less<>> entries;

  const Mapping& map_file(const fs::path& file) {
    maps.push_back(std::make_unique<Mapping>(file));
    return *maps.back();
  }

  void add_single(const fs::path& file) {
    const Mapping& m = map_file(file);
    auto h = parse_safetensors_header(m.bytes(), file.string());
    for (auto& w : h.tensors) {
      w.file = file;
      const std::string name = w.name;
      entries[name] = Entry{std::move(w), m.data()};
    }
  }

  void add_sharded(const fs::path& dir) {
    const fs::path index = dir / kIndexName;
    const auto weight_map = read_weight_map(index);
    std::map<std::string, std::vector<std::string>> wanted;  // shard -> names the index puts there
    for (const auto& [name, file] : weight_map) wanted[file].push_back(name);
    for (const auto& [file, names] : wanted) {
      const fs::path path = dir / file;
      if (!fs::is_regular_file(path))
        bad_input("{}: weight_map names file '{}' (for tensor '{}'), but {} does not exist", index.string(), shown(file),
                  shown(names.front()), path.string());
      add_shard(path, file, names, weight_map, index);
    }
  }

  void add_shard(const fs::path& path, const std::string& file, const std::vector<std::string>& names,
                 const std::map<std::string, std::string>& weight_map, const fs::path& index) {
    const Mapping& m = map_file(path);
    const auto h = parse_safetensors_header(m.bytes(), path.string());
    std::set<std::string> present;
    for (const auto& w : h.tensors) {
      present.insert(w.name);
      auto it = weight_map.find(w.name);
      // Tensors the index does not mention are not part of the model (HF loads only the map).
      if (it == weight_map.end()) continue;
      if (it->second != file)
        bad_input("{}: tensor '{}' is in {}, but {} maps it to '{}'", path.string(), shown(w.name), path.string(),
                  index.string(), shown(it->second));
      WeightInfo info = w;
      info.file = path;
      entries[w.name] = Entry{std::move(info), m.data()};
    }
    for (const auto& n : names)
      if (!present.count(n))
        bad_input("missing tensor '{}' in {} (the index {} maps it there)", shown(n), path.string(), index.string());
  }
};

WeightSource::WeightSource() : impl_(std::make_unique<Impl>()) {}
WeightSource::WeightSource(WeightSource&&) noexcept = default;
WeightSource& WeightSource::operator=(WeightSource&&) noexcept = default;
WeightSource::~WeightSource() = default;

WeightSource WeightSource::open(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st))
    bad_input("{}: no such file or directory (expected a model directory with {} or {}, or a .safetensors file)",
              path.string(), kSingleName, kIndexName);
  WeightSource ws;
  ws.impl_->root = fs::absolute(path);
  if (fs::is_directory(st)) {
    if (fs::is_regular_file(path / kIndexName)) ws.impl_->add_sharded(path);
    else if (fs::is_regular_file(path / kSingleName)) ws.impl_->add_single(path / kSingleName);
    else
      bad_input("{}: no safetensors weights: looked for {} and {}; {}", path.string(), (path / kIndexName).string(),
                (path / kSingleName).string(), describe_dir_contents(path));
  } else {
    ws.impl_->add_single(path);
  }
  return ws;
}

bool WeightSource::has(std::string_view name) const { return impl_->entries.find(name) != impl_->entries.end(); }

const WeightInfo& WeightSource::info(std::string_view name) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end()) bad_input("missing tensor '{}' in {}", shown(name), impl_->root.string());
  return it->second.info;
}

TensorView WeightSource::view(std::string_view name) const {
  const WeightInfo& w = info(name);
  const Entry& e = impl_->entries.find(name)->second;
  // The mapping is read-only (writing through the view faults). Safetensors data starts at
  // 8 + header length and tensors are packed back to back, so the pointer is only guaranteed
  // 1-byte aligned: safe for memcpy-style access; kernels needing alignment must copy first.
  return TensorView(const_cast<std::byte*>(e.base + w.offset), w.dtype, w.shape);
}

void WeightSource::visit(const std::function<void(const WeightInfo&)>& fn) const {
  for (const auto& [name, e] : impl_->entries) fn(e.info);
}

std::size_t WeightSource::size() const { return impl_->entries.size(); }

std::uint64_t WeightSource::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [name, e] : impl_->entries) n += e.info.nbytes;
  return n;
}

const fs::path& WeightSource::root() const { return impl_->root; }

// ---------------------------------------------------------------------------------------------
// Writing

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
