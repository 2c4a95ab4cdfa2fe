// SAE kernels (graph.h SaeActivation / NormRescale / Sub), in double: the oracle for the f32
// kernels the other CPU backends share (<sonde/sae_f32.h>). TopK ranks by the double values and
// breaks ties by the lower index.
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace sonde::reference {

void sae_activation(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_sae_activation(n, in, out);
  float* y = out.as<float>();
  std::vector<double> row(static_cast<std::size_t>(d.N));
  std::vector<std::int64_t> order(static_cast<std::size_t>(d.N));
  for (std::int64_t r = 0; r < d.rows; ++r) {
    for (std::int64_t j = 0; j < d.N; ++j) row[static_cast<std::size_t>(j)] = at(in[0], r * d.N + j);
    const auto relu = [&](std::int64_t j) { return std::max(row[static_cast<std::size_t>(j)], 0.0); };
    std::vector<bool> keep(static_cast<std::size_t>(d.N), true);
    switch (n.params.sae_act) {
      case SaeAct::Relu: break;
      case SaeAct::JumpRelu:
        for (std::int64_t j = 0; j < d.N; ++j) keep[static_cast<std::size_t>(j)] = row[static_cast<std::size_t>(j)] > at(in[1], j);
        break;
      case SaeAct::Gated:
        for (std::int64_t j = 0; j < d.N; ++j) keep[static_cast<std::size_t>(j)] = at(in[1], r * d.N + j) > 0.0;
        break;
      case SaeAct::TopK: {
        std::iota(order.begin(), order.end(), std::int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
          return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)];
        });
        std::fill(keep.begin(), keep.end(), false);
        for (std::int64_t i = 0; i < d.k; ++i) keep[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = true;
        break;
      }
    }
    for (std::int64_t j = 0; j < d.N; ++j) y[r * d.N + j] = keep[static_cast<std::size_t>(j)] ? static_cast<float>(relu(j)) : 0.0f;
  }
}

// x * (|ref| / sqrt(F))^power: SAELens's constant_norm_rescale coefficient sqrt(F) / |ref| is
// power -1 (into the SAE's scale) and its inverse +1 (back out).
void norm_rescale(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_norm_rescale(n, in, out);
  float* y = out.as<float>();
  for (std::int64_t r = 0; r < d.rows; ++r) {
    double ss = 0;
    for (std::int64_t j = 0; j < d.F; ++j) ss += at(in[1], r * d.F + j) * at(in[1], r * d.F + j);
    const double c = std::sqrt(ss) / std::sqrt(static_cast<double>(d.F));
    const double m = n.params.norm_power > 0 ? c : 1.0 / c;
    for (std::int64_t j = 0; j < d.E; ++j) y[r * d.E + j] = static_cast<float>(at(in[0], r * d.E + j) * m);
  }
}

void sub(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto count = ops::check_binary(n, in, out);
  float* y = out.as<float>();
  for (std::int64_t i = 0; i < count; ++i) y[i] = static_cast<float>(at(in[0], i) - at(in[1], i));
}

}  // namespace sonde::reference
