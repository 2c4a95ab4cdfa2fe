// WeightSource: safetensors checkpoints mapped read-only, single file or sharded through
// model.safetensors.index.json; every header validated before any tensor is used.
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

#include "safetensors_internal.h"

namespace sonde {

namespace fs = std::filesystem;
using nlohmann::json;
using safetensors_detail::shown;
using safetensors_detail::shown_json;

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

}  // namespace sonde
