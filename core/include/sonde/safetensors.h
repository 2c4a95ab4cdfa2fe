#pragma once
// Safetensors checkpoints, single file or sharded through model.safetensors.index.json.
// Files are mapped read-only; every header field is validated before any tensor is touched:
// header length, JSON, dtype, shape, offsets inside the data section, no overlaps.
#include <sonde/tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sonde {

struct WeightInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::filesystem::path file;
  std::uint64_t offset = 0;  // from the start of the file
  std::uint64_t nbytes = 0;
};

// One parsed header. `label` names the file in error messages.
struct SafetensorsHeader {
  std::vector<WeightInfo> tensors;  // in file order of their offsets
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;     // 8 + header length
};

// Parses and validates the header of a safetensors file held in `bytes` (the whole file).
// Throws Error(BadInput) naming `label` and the problem. This is the fuzz target's entry.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> bytes, const std::string& label);

class WeightSource {
 public:
  // A model directory (model.safetensors or model.safetensors.index.json) or one .safetensors file.
  static WeightSource open(const std::filesystem::path& path);
  WeightSource(WeightSource&&) noexcept;
  WeightSource& operator=(WeightSource&&) noexcept;
  ~WeightSource();

  bool has(std::string_view name) const;
  const WeightInfo& info(std::string_view name) const;  // throws BadInput: missing tensor
  TensorView view(std::string_view name) const;         // points into the mapped file
  void visit(const std::function<void(const WeightInfo&)>& fn) const;  // sorted by name
  std::size_t size() const;
  std::uint64_t total_bytes() const;
  const std::filesystem::path& root() const;

 private:
  WeightSource();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A tensor to be written: name, dtype and shape; its bytes come from a filler.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};
// Writes exactly numel * dtype_size bytes of the tensor to the stream.
using TensorFiller = std::function<void(const TensorSpec&, std::ostream&)>;

// Streams a safetensors file (names sorted, 8-byte aligned data) one tensor at a time, for
// checkpoints larger than memory; written to FILE.tmp and renamed when complete.
void write_safetensors_streamed(const std::filesystem::path& file, const std::vector<TensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata, const TensorFiller& fill);

// Writes one safetensors file (names sorted, 8-byte aligned data). For make-model and tests.
void write_safetensors(const std::filesystem::path& file,
                       const std::vector<std::pair<std::string, TensorView>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The bytes write_safetensors would write, in memory. For small inputs: tests and fuzz seeds.
std::string safetensors_bytes(const std::vector<std::pair<std::string, TensorView>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace sonde
