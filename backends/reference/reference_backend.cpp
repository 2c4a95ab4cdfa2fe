#include "reference_backend.h"

#include "kernels.h"

namespace sonde::reference {

// --compute selects the Linear's arithmetic (<sonde/compute.h>); --weights does not matter here:
// the int8 mode quantises W as q8 does, the others read W as stored.
void ReferenceBackend::init(const BackendOptions& options) {
  const auto c = parse_compute(options.compute);
  if (!c) runtime_error("backend reference: compute '{}' is not one of f32, bf16, int8", options.compute);
  compute_ = *c;
}

BackendInfo ReferenceBackend::info() const {
  return {"reference",
          "naive loops with double accumulation (the test oracle), every --compute mode emulated; batch-invariant", 1};
}

bool ReferenceBackend::supports(const Node& node, std::span<const DType> input_dtypes) const {
  // Collectives: a backend without a process group is a group of one.
  if (node.op == OpKind::AllReduceSum || node.op == OpKind::AllGather)
    return input_dtypes.size() == 1 && input_dtypes[0] == DType::f32;
  if (node.op == OpKind::Attention || node.op == OpKind::AttentionPattern) {
    // AttentionPattern: the slow path only, no other backend runs it. Any head mapping
    // (kv_group) is computed here (ops::kv_head_of).
    Node as_attention = node;
    as_attention.op = OpKind::Attention;
    as_attention.params.kv_group = 0;
    return ops::supports_with(as_attention, input_dtypes, &ops::is_float16_32);
  }
  return ops::supports_with(node, input_dtypes, &ops::is_float16_32);
}

TensorView ReferenceBackend::upload(const std::string& name, const TensorView& src, Split) {
  weights_[name] = src;
  return src;
}

TensorView ReferenceBackend::weight(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) runtime_error("backend reference: no weight named '{}' was uploaded", name);
  return it->second;
}

void ReferenceBackend::run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) {
  const ops::DenseInputs dense(inputs);
  const ops::Inputs in = dense.views();
  switch (node.op) {
    case OpKind::Embedding: return embedding(node, in, out);
    case OpKind::RmsNorm: return rms_norm(node, in, out);
    case OpKind::Linear: return linear(node, in, out, compute_);
    case OpKind::Reshape: return reshape(node, in, out);
    case OpKind::Rope: return rope(node, in, out);
    case OpKind::Attention: return attention(node, in, out);
    case OpKind::AttentionPattern: return attention_pattern(node, in, out);
    case OpKind::Add: return add(node, in, out);
    case OpKind::SiluMul: return silu_mul(node, in, out);
    case OpKind::Concat: return concat(node, in, out);
    case OpKind::SliceRows: return slice_rows(node, in, out);
    case OpKind::EditAffine: return edit_affine(node, in, out);
    case OpKind::EditReplace: return edit_replace(node, in, out);
    case OpKind::EditProject: return edit_project(node, in, out);
    case OpKind::SaeActivation: return sae_activation(node, in, out);
    case OpKind::NormRescale: return norm_rescale(node, in, out);
    case OpKind::Sub: return sub(node, in, out);
    case OpKind::AllReduceSum: return all_reduce_sum(node, in, out);
    case OpKind::AllGather: return all_gather(node, in, out);
    default: ops::fail(node, "the reference backend does not run this op");
  }
}

}  // namespace sonde::reference

SONDE_PLUGIN(sonde::reference::ReferenceBackend, "backend", "reference", "0.1.0", "", 0)
