// Row-wise and elementwise reference kernels.
#include "kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace sonde::reference {

void embedding(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_embedding(n, in, out);
  const auto* ids = in[1].as<const std::int32_t>();
  float* y = out.as<float>();
  for (std::int64_t r = 0; r < d.rows; ++r) {
    const std::int64_t id = ids[r];
    if (id < 0 || id >= d.V) ops::fail(n, "token id {} at index {} is outside the table of {} rows", id, r, d.V);
    for (std::int64_t j = 0; j < d.H; ++j) y[r * d.H + j] = static_cast<float>(at(in[0], id * d.H + j));
  }
}

// y = w * f32(x / sqrt(mean(x^2) + eps)): HF normalises, casts to the input dtype (f32), then
// multiplies by the weight.
void rms_norm(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_rms_norm(n, in, out);
  float* y = out.as<float>();
  for (std::int64_t r = 0; r < d.rows; ++r) {
    double ss = 0;
    for (std::int64_t j = 0; j < d.H; ++j) ss += at(in[0], r * d.H + j) * at(in[0], r * d.H + j);
    const double denom = std::sqrt(ss / static_cast<double>(d.H) + static_cast<double>(n.params.eps));
    for (std::int64_t j = 0; j < d.H; ++j) {
      const float xn = static_cast<float>(at(in[0], r * d.H + j) / denom);
      y[r * d.H + j] = static_cast<float>(at(in[1], j) * static_cast<double>(xn));
    }
  }
}

// y[m,n] = sum_k x[m,k] W[n,k] + b[n], accumulated in double, k in order. x and each row of W are
// widened to double once (not per product): the same sums, several times faster, which the
// suite's many reference runs (and their sanitizer builds) feel.
void linear(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_linear(n, in, out);
  float* y = out.as<float>();
  std::vector<double> x(static_cast<std::size_t>(d.M * d.K)), w(static_cast<std::size_t>(d.K));
  for (std::int64_t i = 0; i < d.M * d.K; ++i) x[static_cast<std::size_t>(i)] = at(in[0], i);
  for (std::int64_t o = 0; o < d.N; ++o) {
    for (std::int64_t k = 0; k < d.K; ++k) w[static_cast<std::size_t>(k)] = at(in[1], o * d.K + k);
    const double b = d.bias ? at(in[2], o) : 0.0;
    for (std::int64_t m = 0; m < d.M; ++m) {
      const double* xm = x.data() + m * d.K;
      double acc = b;
      for (std::int64_t k = 0; k < d.K; ++k) acc += xm[k] * w[static_cast<std::size_t>(k)];
      y[m * d.N + o] = static_cast<float>(acc);
    }
  }
}

void reshape(const Node& n, ops::Inputs in, const TensorView& out) {
  ops::check_reshape(n, in, out);
  std::memcpy(out.data, in[0].data, in[0].nbytes());
}

void add(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto count = ops::check_binary(n, in, out);
  float* y = out.as<float>();
  for (std::int64_t i = 0; i < count; ++i) y[i] = static_cast<float>(at(in[0], i) + at(in[1], i));
}

// silu(g) * u with silu(z) = z / (1 + exp(-z)).
void silu_mul(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto count = ops::check_binary(n, in, out);
  float* y = out.as<float>();
  for (std::int64_t i = 0; i < count; ++i) {
    const double g = at(in[0], i);
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * at(in[1], i));
  }
}

}  // namespace sonde::reference

namespace sonde::reference {

// out[b] = a[b] followed by b[b]: row blocks copied as bytes (any dtype, no rounding). When the
// output is placed over a (the KV cache), a's block copies onto itself, byte by byte: harmless.
void concat(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto blk = ops::check_concat(n, in, out);
  const std::size_t es = dtype_size(out.dtype);
  auto* y = static_cast<std::byte*>(out.data);
  const auto* a = static_cast<const std::byte*>(in[0].data);
  const auto* b = static_cast<const std::byte*>(in[1].data);
  for (std::int64_t o = 0; o < blk.outer; ++o) {
    for (std::int64_t i = 0; i < blk.a_block * static_cast<std::int64_t>(es); ++i) *y++ = a[o * blk.a_block * static_cast<std::int64_t>(es) + i];
    for (std::int64_t i = 0; i < blk.b_block * static_cast<std::int64_t>(es); ++i) *y++ = b[o * blk.b_block * static_cast<std::int64_t>(es) + i];
  }
}

// Element by element, as the formula reads: y[b, t] = x[b, row_begin + t].
void slice_rows(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto blk = ops::check_slice_rows(n, in, out);
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(out.dtype));
  auto* y = static_cast<std::byte*>(out.data);
  const auto* x = static_cast<const std::byte*>(in[0].data);
  for (std::int64_t o = 0; o < blk.outer; ++o)
    for (std::int64_t i = 0; i < blk.count * es; ++i) *y++ = x[(o * blk.in_block + blk.first) * es + i];
}

}  // namespace sonde::reference
