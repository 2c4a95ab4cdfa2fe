// Row-wise and elementwise f32 kernels, and Linear through OpenBLAS.
#include "kernels.h"

#include <Eigen/Core>
#include <cblas.h>

#include <cmath>
#include <cstring>

namespace sonde::cpu_blas {

namespace {
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;
using RowMajorMap = Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
}  // namespace

void embedding(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_embedding(n, in, out);
  const auto* table = in[0].as<const float>();
  const auto* ids = in[1].as<const std::int32_t>();
  float* y = out.as<float>();
  for (std::int64_t r = 0; r < d.rows; ++r) {
    const std::int64_t id = ids[r];
    if (id < 0 || id >= d.V) ops::fail(n, "token id {} at index {} is outside the table of {} rows", id, r, d.V);
    std::memcpy(y + r * d.H, table + id * d.H, static_cast<std::size_t>(d.H) * sizeof(float));
  }
}

// y = w * f32(x / sqrt(mean(x^2) + eps)); the mean is a sequential double sum, so the result does
// not depend on the buffer's alignment.
void rms_norm(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_rms_norm(n, in, out);
  const float* w = in[1].as<const float>();
  for (std::int64_t r = 0; r < d.rows; ++r) {
    const float* x = in[0].as<const float>() + r * d.H;
    float* y = out.as<float>() + r * d.H;
    double ss = 0;
    for (std::int64_t j = 0; j < d.H; ++j) ss += static_cast<double>(x[j]) * x[j];
    const double denom = std::sqrt(ss / static_cast<double>(d.H) + static_cast<double>(n.params.eps));
    for (std::int64_t j = 0; j < d.H; ++j) y[j] = w[j] * static_cast<float>(x[j] / denom);
  }
}

// y[M,N] = x[M,K] W[N,K]^T + b. M == 1 goes to GEMV: OpenBLAS 0.3.21 does not forward an M=1
// GEMM to GEMV and runs it ~3x slower (toolchain §5).
void linear(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_linear(n, in, out);
  const int M = blas_int(n, d.M), K = blas_int(n, d.K), N = blas_int(n, d.N);
  const float* x = in[0].as<const float>();
  const float* W = in[1].as<const float>();
  float* y = out.as<float>();
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::memset(y, 0, static_cast<std::size_t>(d.M * d.N) * sizeof(float));
  } else if (M == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W, K, x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, W, K, 0.0f, y, N);
  }
  if (d.bias) {
    const Eigen::Map<const Eigen::RowVectorXf> b(in[2].as<const float>(), N);
    RowMajorMap(y, M, N).rowwise() += b;
  }
}

void reshape(const Node& n, ops::Inputs in, const TensorView& out) {
  ops::check_reshape(n, in, out);
  std::memcpy(out.data, in[0].data, in[0].nbytes());
}

void add(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto count = ops::check_binary(n, in, out);
  ArrayMap(out.as<float>(), count) = ConstArrayMap(in[0].as<const float>(), count) + ConstArrayMap(in[1].as<const float>(), count);
}

// silu(g) * u = g / (1 + exp(-g)) * u, vectorised by Eigen.
void silu_mul(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto count = ops::check_binary(n, in, out);
  const ConstArrayMap g(in[0].as<const float>(), count), u(in[1].as<const float>(), count);
  ArrayMap(out.as<float>(), count) = g / (1.0f + (-g).exp()) * u;
}

}  // namespace sonde::cpu_blas

namespace sonde::cpu_blas {

// out[b] = a[b] followed by b[b], one memcpy per block. A block already in place (the KV cache's
// past keys when the output is placed in the cache) is not copied onto itself. The output's rows
// may lie apart (op_checks.h: dense within each outer index).
void concat(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto blk = ops::check_concat(n, in, out);
  const std::size_t es = dtype_size(out.dtype);
  for (std::int64_t o = 0; o < blk.outer; ++o) {
    auto* y = static_cast<std::byte*>(out.data) + static_cast<std::size_t>(o * out.strides[0]) * es;
    const auto na = static_cast<std::size_t>(blk.a_block) * es, nb = static_cast<std::size_t>(blk.b_block) * es;
    const auto* a = static_cast<const std::byte*>(in[0].data) + static_cast<std::size_t>(o) * na;
    if (na && a != y) std::memcpy(y, a, na);
    if (nb) std::memcpy(y + na, static_cast<const std::byte*>(in[1].data) + static_cast<std::size_t>(o) * nb, nb);
  }
}

// One memcpy of the kept rows per outer index.
void slice_rows(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto blk = ops::check_slice_rows(n, in, out);
  const std::size_t es = dtype_size(out.dtype), count = static_cast<std::size_t>(blk.count) * es;
  for (std::int64_t o = 0; o < blk.outer; ++o)
    if (count)
      std::memcpy(static_cast<std::byte*>(out.data) + static_cast<std::size_t>(o) * count,
                  static_cast<const std::byte*>(in[0].data) + static_cast<std::size_t>(o * blk.in_block + blk.first) * es, count);
}

}  // namespace sonde::cpu_blas
