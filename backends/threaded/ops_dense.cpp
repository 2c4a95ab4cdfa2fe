// Row-wise and elementwise ops, parallel over rows or element chunks.
#include "ops.h"

#include <cmath>
#include <cstring>

namespace sonde::threaded {

namespace {
constexpr std::int64_t kElemChunk = 16384;  // elements per task: large enough to amortise a task
}  // namespace

// Rows of the table (f32, f16 or bf16, possibly unaligned) widened to f32 on the fly.
void embedding(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_embedding(n, in, out);
  const auto* ids = in[1].as<const std::int32_t>();
  for (std::int64_t r = 0; r < d.rows; ++r)
    if (ids[r] < 0 || ids[r] >= d.V) ops::fail(n, "token id {} at index {} is outside the table of {} rows", ids[r], r, d.V);
  const auto* table = static_cast<const unsigned char*>(in[0].data);
  const std::size_t es = dtype_size(in[0].dtype);
  for_chunks(c.pool, d.rows, 8, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const unsigned char* src = table + static_cast<std::size_t>(ids[r] * d.H) * es;
      float* y = out.as<float>() + r * d.H;
      if (in[0].dtype == DType::f32) {
        std::memcpy(y, src, static_cast<std::size_t>(d.H) * 4);
        continue;
      }
      for (std::int64_t j = 0; j < d.H; ++j) {
        std::uint16_t h;
        std::memcpy(&h, src + j * 2, 2);
        y[j] = in[0].dtype == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
    }
  });
}

// y = w * f32(x / sqrt(mean(x^2) + eps)) (HF casts the normalised row before the weight); the
// sum of squares is a sequential double sum, as in the reference.
void rms_norm(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_rms_norm(n, in, out);
  const float* w = in[1].as<const float>();
  for_chunks(c.pool, d.rows, 4, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const float* x = in[0].as<const float>() + r * d.H;
      float* y = out.as<float>() + r * d.H;
      double ss = 0;
      for (std::int64_t j = 0; j < d.H; ++j) ss += static_cast<double>(x[j]) * x[j];
      const double denom = std::sqrt(ss / static_cast<double>(d.H) + static_cast<double>(n.params.eps));
      for (std::int64_t j = 0; j < d.H; ++j) y[j] = w[j] * static_cast<float>(x[j] / denom);
    }
  });
}

void add(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto count = ops::check_binary(n, in, out);
  for_chunks(c.pool, count, kElemChunk, [&](std::int64_t lo, std::int64_t hi) {
    c.k.add(in[0].as<const float>() + lo, in[1].as<const float>() + lo, out.as<float>() + lo, hi - lo);
  });
}

// silu(g) * u = g / (1 + e^-g) * u.
void silu_mul(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto count = ops::check_binary(n, in, out);
  for_chunks(c.pool, count, kElemChunk, [&](std::int64_t lo, std::int64_t hi) {
    c.k.silu_mul(in[0].as<const float>() + lo, in[1].as<const float>() + lo, out.as<float>() + lo, hi - lo);
  });
}

// Reshape copies the bytes; Concat along dim 1 copies a's then b's block per outer index, except
// a block already in place (the KV cache's past keys when the output is placed in the cache).
// Concat's inputs and output need only be dense within an outer index: a batch's past keys are a
// view of the cache whose rows are `capacity` slots apart, and its output is placed over that
// view, so only each row's new slots are written.
void copy_op(const Node& n, ops::Inputs in, const TensorView& out) {
  if (n.op == OpKind::Reshape) {
    ops::check_reshape(n, in, out);
    std::memcpy(out.data, in[0].data, in[0].nbytes());
    return;
  }
  if (n.op == OpKind::SliceRows) {  // the kept rows of each outer index, one memcpy each (inputs are dense)
    const auto blk = ops::check_slice_rows(n, in, out);
    const std::size_t es = dtype_size(out.dtype), count = static_cast<std::size_t>(blk.count) * es;
    for (std::int64_t o = 0; o < blk.outer && count; ++o)
      std::memcpy(static_cast<std::byte*>(out.data) + static_cast<std::size_t>(o) * count,
                  static_cast<const std::byte*>(in[0].data) + static_cast<std::size_t>(o * blk.in_block + blk.first) * es, count);
    return;
  }
  const auto blk = ops::check_concat(n, in, out);
  const std::size_t es = dtype_size(out.dtype);
  const auto na = static_cast<std::size_t>(blk.a_block) * es, nb = static_cast<std::size_t>(blk.b_block) * es;
  for (std::int64_t o = 0; o < blk.outer; ++o) {
    auto* y = static_cast<std::byte*>(out.data) + static_cast<std::size_t>(o * out.strides[0]) * es;
    const auto* a = static_cast<const std::byte*>(in[0].data) + static_cast<std::size_t>(o * in[0].strides[0]) * es;
    const auto* b = static_cast<const std::byte*>(in[1].data) + static_cast<std::size_t>(o * in[1].strides[0]) * es;
    if (na && a != y) std::memcpy(y, a, na);
    if (nb) std::memcpy(y + na, b, nb);
  }
}

// rotate_half RoPE (model-spec §1.3): inv_freq[i] = f32(1 / theta^(2i/d)), angle = f32(pos) *
// inv_freq in f32, c/s = f32(cos/sin(angle)); x'_i = x_i c - x_{i+d/2} s, x'_{i+d/2} = x_{i+d/2} c + x_i s.
void rope(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_rope(n, in, out);
  const std::int64_t half = d.d / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<std::size_t>(i)] =
        static_cast<float>(1.0 / std::pow(n.params.theta, static_cast<double>(2 * i) / static_cast<double>(d.d)));
  const auto* pos = in[1].as<const std::int32_t>();
  for_chunks(c.pool, d.B * d.T, 4, [&](std::int64_t lo, std::int64_t hi) {
    std::vector<float> cs(static_cast<std::size_t>(half)), sn(cs.size());
    for (std::int64_t bt = lo; bt < hi; ++bt) {
      const float p = static_cast<float>(pos[bt]);
      for (std::size_t i = 0; i < cs.size(); ++i) {
        const float angle = p * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sn[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
      for (std::int64_t h = 0; h < d.h; ++h) {
        const float* x = in[0].as<const float>() + (bt * d.h + h) * d.d;
        float* y = out.as<float>() + (bt * d.h + h) * d.d;
        for (std::int64_t i = 0; i < half; ++i) {
          const auto k = static_cast<std::size_t>(i);
          y[i] = x[i] * cs[k] - x[i + half] * sn[k];
          y[i + half] = x[i + half] * cs[k] + x[i] * sn[k];
        }
      }
    }
  });
}

}  // namespace sonde::threaded
