// RoPE and attention reference kernels (model-spec §1.3).
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace sonde::reference {

// rotate_half RoPE: dimension i pairs with i + d/2. inv_freq[i] = f32(1 / theta^(2i/d)),
// angle = f32(pos) * inv_freq in float32 as HF does, c/s = f32(cos/sin(angle)).
// x'_i = x_i c - x_{i+d/2} s ; x'_{i+d/2} = x_{i+d/2} c + x_i s.
void rope(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_rope(n, in, out);
  const std::int64_t half = d.d / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<std::size_t>(i)] =
        static_cast<float>(1.0 / std::pow(n.params.theta, static_cast<double>(2 * i) / static_cast<double>(d.d)));
  const auto* pos = in[1].as<const std::int32_t>();
  float* y = out.as<float>();
  for (std::int64_t bt = 0; bt < d.B * d.T; ++bt) {
    const float p = static_cast<float>(pos[bt]);
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = p * inv_freq[static_cast<std::size_t>(i)];
      const double c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const double s = static_cast<float>(std::sin(static_cast<double>(angle)));
      for (std::int64_t h = 0; h < d.h; ++h) {
        const std::int64_t base = (bt * d.h + h) * d.d;
        const double x0 = at(in[0], base + i), x1 = at(in[0], base + i + half);
        y[base + i] = static_cast<float>(x0 * c - x1 * s);
        y[base + i + half] = static_cast<float>(x1 * c + x0 * s);
      }
    }
  }
}

namespace {

struct Head {
  const TensorView &q, &k, &v;
  const std::uint8_t* mask;  // this batch row's [S] mask, or null
  const ops::AttnDims& d;
  std::int64_t b, h, g;  // batch, query head, kv head
};

// One query row's probabilities p_u = softmax_u(q.k_u * d^-0.5) over the allowed keys, in
// double; disallowed keys get 0, and a row with no allowed key is all zeros.
void probabilities(const Head& a, std::int64_t t, bool causal, std::vector<double>& p) {
  const auto& d = a.d;
  const std::int64_t qs = t + (d.S - d.T);
  const std::int64_t qbase = ((a.b * d.T + t) * d.nh + a.h) * d.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.d));
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t u = 0; u < d.S; ++u) {
    auto& s = p[static_cast<std::size_t>(u)];
    s = -std::numeric_limits<double>::infinity();
    if (!ops::allowed(causal, a.mask, qs, u)) continue;
    const std::int64_t kbase = ((a.b * d.S + u) * d.nkv + a.g) * d.d;
    double dot = 0;
    for (std::int64_t j = 0; j < d.d; ++j) dot += at(a.q, qbase + j) * at(a.k, kbase + j);
    s = dot * scale;
    mx = std::max(mx, s);
  }
  if (mx == -std::numeric_limits<double>::infinity()) {
    std::fill(p.begin(), p.end(), 0.0);
    return;
  }
  double sum = 0;
  for (auto& s : p) {
    s = std::isinf(s) ? 0.0 : std::exp(s - mx);
    sum += s;
  }
  for (auto& s : p) s /= sum;
}

// One query row: out = sum_u p_u v_u.
void attend_row(const Head& a, std::int64_t t, bool causal, std::vector<double>& p, float* y) {
  const auto& d = a.d;
  probabilities(a, t, causal, p);
  std::vector<double> acc(static_cast<std::size_t>(d.d), 0.0);
  for (std::int64_t u = 0; u < d.S; ++u) {
    const double pu = p[static_cast<std::size_t>(u)];
    if (pu == 0) continue;
    const std::int64_t vbase = ((a.b * d.S + u) * d.nkv + a.g) * d.d;
    for (std::int64_t j = 0; j < d.d; ++j) acc[static_cast<std::size_t>(j)] += pu * at(a.v, vbase + j);
  }
  const std::int64_t ybase = ((a.b * d.T + t) * d.nh + a.h) * d.d;
  for (std::int64_t j = 0; j < d.d; ++j) y[ybase + j] = static_cast<float>(acc[static_cast<std::size_t>(j)]);
}

}  // namespace

// Query head h reads kv head h / (nh / nkv) (contiguous groups, as HF's repeat_kv), or the one
// a sharded node's mapping names (ops::kv_head_of).
void attention(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_attention(n, in, out);
  std::vector<double> score(static_cast<std::size_t>(d.S));
  float* y = out.as<float>();
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::uint8_t* mask = d.mask ? in[3].as<const std::uint8_t>() + b * d.S : nullptr;
    for (std::int64_t h = 0; h < d.nh; ++h) {
      const Head head{in[0], in[1], in[2], mask, d, b, h, ops::kv_head_of(n, d, h)};
      for (std::int64_t t = 0; t < d.T; ++t) attend_row(head, t, n.params.causal, score, y);
    }
  }
}

}  // namespace sonde::reference

namespace sonde::reference {

// The probabilities of attention(): out[b, t, h, u] = p_u for query t of head h.
void attention_pattern(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_attention(n, in, out, /*pattern=*/true);
  std::vector<double> p(static_cast<std::size_t>(d.S));
  float* y = out.as<float>();
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::uint8_t* mask = d.mask ? in[3].as<const std::uint8_t>() + b * d.S : nullptr;
    for (std::int64_t h = 0; h < d.nh; ++h) {
      const Head head{in[0], in[1], in[2], mask, d, b, h, ops::kv_head_of(n, d, h)};
      for (std::int64_t t = 0; t < d.T; ++t) {
        probabilities(head, t, n.params.causal, p);
        float* row = y + ((b * d.T + t) * d.nh + h) * d.S;
        for (std::int64_t u = 0; u < d.S; ++u) row[u] = static_cast<float>(p[static_cast<std::size_t>(u)]);
      }
    }
  }
}

}  // namespace sonde::reference
