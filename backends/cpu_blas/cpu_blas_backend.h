#pragma once
// f32 compute on the CPU: GEMMs and GEMVs through OpenBLAS, everything else in plain float loops
// or Eigen::Map. Weights in bf16/f16 are widened to f32 once, at upload.
#include <sonde/backend.h>

#include <map>
#include <string>

namespace sonde::cpu_blas {

class CpuBlasBackend final : public Backend {
 public:
  void init(const BackendOptions& options) override;
  BackendInfo info() const override;
  bool supports(const Node& node, std::span<const DType> input_dtypes) const override;
  TensorView upload(const std::string& name, const TensorView& src, Split split) override;
  TensorView weight(const std::string& name) const override;
  void run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) override;

 private:
  std::map<std::string, TensorView> weights_;  // what weight() returns
  std::map<std::string, Tensor> converted_;    // owners of the widened copies
  bool exact_linear_ = true;                   // --compute f32 (other modes: Linear on reference)
};

}  // namespace sonde::cpu_blas
