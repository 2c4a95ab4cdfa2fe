// add_only_backend.cpp: runs Add on f32, declines everything else (docs/writing-a-plugin.md).
#include <sonde/backend.h>
#include <sonde/error.h>
#include <sonde/plugin.h>

#include <map>
#include <string>

namespace my {

class AddOnlyBackend final : public sonde::Backend {
 public:
  void init(const sonde::BackendOptions&) override {}
  sonde::BackendInfo info() const override { return {"add-only", "f32 Add; everything else falls back", 1}; }

  bool supports(const sonde::Node& node, std::span<const sonde::DType> in) const override {
    return node.op == sonde::OpKind::Add && in.size() == 2 && in[0] == sonde::DType::f32 &&
           in[1] == sonde::DType::f32 && node.dtype == sonde::DType::f32;
  }

  // Keep a view: the weight source (mmap) outlives the backend.
  sonde::TensorView upload(const std::string& name, const sonde::TensorView& src, sonde::Split) override {
    return weights_[name] = src;
  }
  sonde::TensorView weight(const std::string& name) const override {
    auto it = weights_.find(name);
    if (it == weights_.end()) sonde::runtime_error("backend add-only: no weight named '{}'", name);
    return it->second;
  }

  void run(const sonde::Node& node, std::span<const sonde::TensorView> in, const sonde::TensorView& out) override {
    if (node.op != sonde::OpKind::Add || !in[0].contiguous() || !in[1].contiguous())
      sonde::runtime_error("backend add-only: cannot run node '{}'", node.name());
    const float* a = in[0].as<const float>();
    const float* b = in[1].as<const float>();
    float* y = out.as<float>();
    for (std::int64_t i = 0; i < out.numel(); ++i) y[i] = a[i] + b[i];
  }

 private:
  std::map<std::string, sonde::TensorView> weights_;
};

}  // namespace my

// Class, kind, name, version, matches (model plugins only), priority (backends: the default is
// the highest).
SONDE_PLUGIN(my::AddOnlyBackend, "backend", "add-only", "0.1.0", "", 0)
