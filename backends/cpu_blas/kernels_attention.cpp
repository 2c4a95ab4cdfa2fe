// RoPE and attention in f32 (model-spec §1.3); scores and the weighted sum of V through OpenBLAS.
#include "kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace sonde::cpu_blas {

// rotate_half RoPE: i pairs with i + d/2. inv_freq[i] = f32(1 / theta^(2i/d)), angle = f32(pos) *
// inv_freq in float32 (as HF), c/s = f32(cos/sin(angle)); x'_i = x_i c - x_{i+d/2} s,
// x'_{i+d/2} = x_{i+d/2} c + x_i s.
void rope(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_rope(n, in, out);
  const std::int64_t half = d.d / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half)), c(inv_freq.size()), s(inv_freq.size());
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<std::size_t>(i)] =
        static_cast<float>(1.0 / std::pow(n.params.theta, static_cast<double>(2 * i) / static_cast<double>(d.d)));
  const auto* pos = in[1].as<const std::int32_t>();
  for (std::int64_t bt = 0; bt < d.B * d.T; ++bt) {
    const float p = static_cast<float>(pos[bt]);
    for (std::size_t i = 0; i < c.size(); ++i) {
      const double angle = p * inv_freq[i];
      c[i] = static_cast<float>(std::cos(angle));
      s[i] = static_cast<float>(std::sin(angle));
    }
    for (std::int64_t h = 0; h < d.h; ++h) {
      const float* x = in[0].as<const float>() + (bt * d.h + h) * d.d;
      float* y = out.as<float>() + (bt * d.h + h) * d.d;
      for (std::int64_t i = 0; i < half; ++i) {
        const auto k = static_cast<std::size_t>(i);
        y[i] = x[i] * c[k] - x[i + half] * s[k];
        y[i + half] = x[i + half] * c[k] + x[i] * s[k];
      }
    }
  }
}

namespace {

// Turns one row of scaled scores into probabilities over the allowed keys: p_u = exp(s_u - max) /
// sum, p_u = 0 where not allowed; a row with no allowed key becomes all zeros (its output is 0).
void masked_softmax(float* row, std::int64_t S, std::int64_t qs, bool causal, const std::uint8_t* mask) {
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t u = 0; u < S; ++u)
    if (ops::allowed(causal, mask, qs, u)) mx = std::max(mx, row[u]);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(row, row + S, 0.0f);
    return;
  }
  float sum = 0;
  for (std::int64_t u = 0; u < S; ++u) {
    row[u] = ops::allowed(causal, mask, qs, u) ? std::exp(row[u] - mx) : 0.0f;
    sum += row[u];
  }
  const float inv = 1.0f / sum;
  for (std::int64_t u = 0; u < S; ++u) row[u] *= inv;
}

// One (batch, query head): P = softmax(Q K^T d^-0.5) [T,S], Z = P V [T,d]. Q, K, V and Z are
// strided views into the [B,*,heads,d] tensors (leading dimension heads*d).
void attend_head(const Node& n, const ops::AttnDims& d, const float* q, const float* k, const float* v, float* z,
                 const std::uint8_t* mask, std::vector<float>& p) {
  const int T = blas_int(n, d.T), S = blas_int(n, d.S), D = blas_int(n, d.d);
  const int ldq = blas_int(n, d.nh * d.d), ldk = blas_int(n, d.nkv * d.d);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.d)));
  if (T == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, S, D, scale, k, ldk, q, 1, 0.0f, p.data(), 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, S, D, scale, q, ldq, k, ldk, 0.0f, p.data(), S);
  for (int t = 0; t < T; ++t) masked_softmax(p.data() + static_cast<std::size_t>(t) * S, S, t + (S - T), n.params.causal, mask);
  if (T == 1)
    cblas_sgemv(CblasRowMajor, CblasTrans, S, D, 1.0f, v, ldk, p.data(), 1, 0.0f, z, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, S, 1.0f, p.data(), S, v, ldk, 0.0f, z, ldq);
}

}  // namespace

// Query head h reads kv head h / (nh / nkv) (contiguous groups, as HF's repeat_kv).
void attention(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_attention(n, in, out);
  if (d.T == 0 || d.d == 0) return;
  std::vector<float> p(static_cast<std::size_t>(d.T * d.S));
  const std::int64_t group = d.nh / d.nkv;
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::uint8_t* mask = d.mask ? in[3].as<const std::uint8_t>() + b * d.S : nullptr;
    for (std::int64_t h = 0; h < d.nh; ++h) {
      const std::int64_t g = h / group;
      const float* q = in[0].as<const float>() + (b * d.T * d.nh + h) * d.d;
      const float* k = in[1].as<const float>() + (b * d.S * d.nkv + g) * d.d;
      const float* v = in[2].as<const float>() + (b * d.S * d.nkv + g) * d.d;
      float* z = out.as<float>() + (b * d.T * d.nh + h) * d.d;
      attend_head(n, d, q, k, v, z, mask, p);
    }
  }
}

}  // namespace sonde::cpu_blas
