#pragma once
// cpu-blas kernels: f32 in, f32 out. Inputs are dense and their dtypes already checked by the
// backend (supports()); shapes are validated here through op_checks.h.
#include <sonde/op_checks.h>

#include <limits>

namespace sonde::cpu_blas {

void embedding(const Node& n, ops::Inputs in, const TensorView& out);
void rms_norm(const Node& n, ops::Inputs in, const TensorView& out);
void linear(const Node& n, ops::Inputs in, const TensorView& out);
void reshape(const Node& n, ops::Inputs in, const TensorView& out);
void rope(const Node& n, ops::Inputs in, const TensorView& out);
void attention(const Node& n, ops::Inputs in, const TensorView& out);
void add(const Node& n, ops::Inputs in, const TensorView& out);
void silu_mul(const Node& n, ops::Inputs in, const TensorView& out);
void concat(const Node& n, ops::Inputs in, const TensorView& out);
void slice_rows(const Node& n, ops::Inputs in, const TensorView& out);

// BLAS takes int dimensions (LP64 OpenBLAS).
inline int blas_int(const Node& n, std::int64_t v) {
  if (v < 0 || v > std::numeric_limits<int>::max()) ops::fail(n, "dimension {} exceeds the BLAS int range", v);
  return static_cast<int>(v);
}

}  // namespace sonde::cpu_blas
