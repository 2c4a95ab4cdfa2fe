#pragma once
// The oracle backend: plain loops with double accumulation. Tests compare every other backend
// against it, and the executor sends it the ops another backend declines.
#include <sonde/backend.h>
#include <sonde/compute.h>

#include <map>
#include <string>

namespace sonde::reference {

class ReferenceBackend final : public Backend {
 public:
  void init(const BackendOptions& options) override;
  BackendInfo info() const override;
  bool supports(const Node& node, std::span<const DType> input_dtypes) const override;
  TensorView upload(const std::string& name, const TensorView& src, Split split) override;
  TensorView weight(const std::string& name) const override;
  void run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) override;

 private:
  // Views into the weight source, which outlives the backend: no copies.
  std::map<std::string, TensorView> weights_;
  Compute compute_ = Compute::f32;
};

}  // namespace sonde::reference
