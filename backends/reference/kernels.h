#pragma once
// Reference kernels: one function per op, inputs dense and already validated by <sonde/op_checks.h>.
// Float inputs of any width are read as double (load_as_double); results are rounded to f32.
#include <sonde/compute.h>
#include <sonde/op_checks.h>

namespace sonde::reference {

void embedding(const Node& n, ops::Inputs in, const TensorView& out);
void rms_norm(const Node& n, ops::Inputs in, const TensorView& out);
// In the compute mode c (<sonde/compute.h>): f32 exact; bf16 and int8 as that header defines
// them, each block's or product's value exact and the sum in double.
void linear(const Node& n, ops::Inputs in, const TensorView& out, Compute c = Compute::f32);
void reshape(const Node& n, ops::Inputs in, const TensorView& out);
void rope(const Node& n, ops::Inputs in, const TensorView& out);
void attention(const Node& n, ops::Inputs in, const TensorView& out);
void attention_pattern(const Node& n, ops::Inputs in, const TensorView& out);
void add(const Node& n, ops::Inputs in, const TensorView& out);
void silu_mul(const Node& n, ops::Inputs in, const TensorView& out);
void concat(const Node& n, ops::Inputs in, const TensorView& out);
void slice_rows(const Node& n, ops::Inputs in, const TensorView& out);
void edit_affine(const Node& n, ops::Inputs in, const TensorView& out);
void edit_replace(const Node& n, ops::Inputs in, const TensorView& out);
void edit_project(const Node& n, ops::Inputs in, const TensorView& out);
void sae_activation(const Node& n, ops::Inputs in, const TensorView& out);
void norm_rescale(const Node& n, ops::Inputs in, const TensorView& out);
void sub(const Node& n, ops::Inputs in, const TensorView& out);
void all_reduce_sum(const Node& n, ops::Inputs in, const TensorView& out);
void all_gather(const Node& n, ops::Inputs in, const TensorView& out);

// Element i of a dense float view as double.
inline double at(const TensorView& v, std::int64_t i) {
  return load_as_double(v.data, v.dtype, static_cast<std::size_t>(i));
}

}  // namespace sonde::reference
