#include "cpu_blas_backend.h"

#include "kernels.h"
#include <sonde/edit_f32.h>
#include <sonde/sae_f32.h>

#include <cblas.h>

#include <vector>

namespace sonde::cpu_blas {

namespace {
bool is_f32(DType t) { return t == DType::f32; }
}  // namespace

// One owner of threads (design §8.10): only OpenBLAS's pool runs in parallel here.
// --compute bf16/int8: this backend's Linear is f32 sgemm only, so it declines Linear nodes and the
// executor runs them on the reference backend in that mode (slowly, and says so).
void CpuBlasBackend::init(const BackendOptions& options) {
  if (options.threads > 0) openblas_set_num_threads(options.threads);
  exact_linear_ = options.compute == "f32";
}

BackendInfo CpuBlasBackend::info() const {
  return {"cpu-blas", "f32 on the CPU: OpenBLAS GEMM/GEMV, Eigen and plain loops; not batch-invariant (last bits vary with the micro-batch)", openblas_get_num_threads()};
}

bool CpuBlasBackend::supports(const Node& node, std::span<const DType> input_dtypes) const {
  if (node.op == OpKind::Linear && !exact_linear_) return false;
  return ops::supports_with(node, input_dtypes, &is_f32);
}

TensorView CpuBlasBackend::upload(const std::string& name, const TensorView& src, Split) {
  converted_.erase(name);
  if (is_float(src.dtype) && !(src.dtype == DType::f32 && src.contiguous())) {
    Tensor wide = to_f32(src);
    weights_[name] = wide.view();
    converted_[name] = std::move(wide);
  } else {
    weights_[name] = src;  // f32 (or non-float) views are kept without a copy
  }
  return weights_[name];
}

TensorView CpuBlasBackend::weight(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) runtime_error("backend cpu-blas: no weight named '{}' was uploaded", name);
  return it->second;
}

void CpuBlasBackend::run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) {
  std::vector<DType> dtypes;
  for (const auto& v : inputs) dtypes.push_back(v.dtype);
  if (!supports(node, dtypes)) ops::fail(node, "cpu-blas runs this op only on f32 inputs with an f32 output");
  const ops::DenseInputs dense(inputs);
  const ops::Inputs in = dense.views();
  switch (node.op) {
    case OpKind::Embedding: return embedding(node, in, out);
    case OpKind::RmsNorm: return rms_norm(node, in, out);
    case OpKind::Linear: return linear(node, in, out);
    case OpKind::Reshape: return reshape(node, in, out);
    case OpKind::Rope: return rope(node, in, out);
    case OpKind::Attention: return attention(node, in, out);
    case OpKind::Add: return add(node, in, out);
    case OpKind::SiluMul: return silu_mul(node, in, out);
    case OpKind::Concat: return concat(node, in, out);
    case OpKind::SliceRows: return slice_rows(node, in, out);
    case OpKind::EditAffine:
    case OpKind::EditReplace:
    case OpKind::EditProject: return ops::run_edit_f32(node, in, out);
    case OpKind::SaeActivation: return ops::run_sae_activation_f32(node, in, out);
    case OpKind::NormRescale: return ops::run_norm_rescale_f32(node, in, out);
    case OpKind::Sub: return ops::run_sub_f32(node, in, out);
    default: ops::fail(node, "cpu-blas does not run this op");
  }
}

}  // namespace sonde::cpu_blas

SONDE_PLUGIN(sonde::cpu_blas::CpuBlasBackend, "backend", "cpu-blas", "0.1.0", "", 10)
