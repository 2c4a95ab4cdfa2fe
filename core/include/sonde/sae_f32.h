#pragma once
// The SAE ops (graph.h SaeActivation / NormRescale / Sub) on f32 inputs, for the fast CPU backends
// (header-only, like edit_f32.h). The encoder and decoder are Linear nodes; these ops touch each
// [rows, N] tensor once, so plain loops are enough. Norms are accumulated in double, as the
// reference does.
#include <sonde/op_checks.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace sonde::ops {

// The k largest of row[0..N) (ties: the lower index), as indices in `idx` [0..k).
inline void top_k_indices(const float* row, std::int64_t N, std::int64_t k, std::vector<std::int64_t>& idx) {
  idx.resize(static_cast<std::size_t>(N));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), [&](std::int64_t a, std::int64_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  idx.resize(static_cast<std::size_t>(k));
}

inline void run_sae_activation_f32(const Node& n, Inputs in, const TensorView& out) {
  const auto d = check_sae_activation(n, in, out);
  const float* p = in[0].as<const float>();
  const float* t = in.size() > 1 ? in[1].as<const float>() : nullptr;
  float* y = out.as<float>();
  std::vector<std::int64_t> idx;
  for (std::int64_t r = 0; r < d.rows; ++r) {
    const float* pr = p + r * d.N;
    float* yr = y + r * d.N;
    switch (n.params.sae_act) {
      case SaeAct::Relu:
        for (std::int64_t j = 0; j < d.N; ++j) yr[j] = pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
      case SaeAct::JumpRelu:
        for (std::int64_t j = 0; j < d.N; ++j) yr[j] = pr[j] > t[j] && pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
      case SaeAct::Gated:
        for (std::int64_t j = 0; j < d.N; ++j) yr[j] = t[r * d.N + j] > 0.0f && pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
      case SaeAct::TopK:
        std::fill(yr, yr + d.N, 0.0f);
        top_k_indices(pr, d.N, d.k, idx);
        for (const auto j : idx) yr[j] = pr[j] > 0.0f ? pr[j] : 0.0f;
        break;
    }
  }
}

inline void run_norm_rescale_f32(const Node& n, Inputs in, const TensorView& out) {
  const auto d = check_norm_rescale(n, in, out);
  const float* x = in[0].as<const float>();
  const float* ref = in[1].as<const float>();
  float* y = out.as<float>();
  for (std::int64_t r = 0; r < d.rows; ++r) {
    double ss = 0;
    for (std::int64_t j = 0; j < d.F; ++j) ss += static_cast<double>(ref[r * d.F + j]) * ref[r * d.F + j];
    const double c = std::sqrt(ss) / std::sqrt(static_cast<double>(d.F));
    const double m = n.params.norm_power > 0 ? c : 1.0 / c;
    for (std::int64_t j = 0; j < d.E; ++j) y[r * d.E + j] = static_cast<float>(x[r * d.E + j] * m);
  }
}

inline void run_sub_f32(const Node& n, Inputs in, const TensorView& out) {
  const auto count = check_binary(n, in, out);
  const float* a = in[0].as<const float>();
  const float* b = in[1].as<const float>();
  float* y = out.as<float>();
  for (std::int64_t i = 0; i < count; ++i) y[i] = a[i] - b[i];
}

}  // namespace sonde::ops
