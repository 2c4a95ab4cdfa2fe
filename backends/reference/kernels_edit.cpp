// Edit kernels (graph.h EditAffine / EditReplace / EditProject), in double: the oracle for the
// f32 kernel the other CPU backends share (edit_f32.h).
#include "kernels.h"

namespace sonde::reference {

namespace {

// y = x, then `change(row, group, y_group)` on each selected group.
template <typename F>
void per_selected_group(const ops::EditDims& d, ops::Inputs in, const TensorView& out, F change) {
  const auto* sel = in[1].as<const std::uint8_t>();
  float* y = out.as<float>();
  const std::int64_t n = d.rows * d.G * d.E;
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(at(in[0], i));
  for (std::int64_t r = 0; r < d.rows; ++r)
    for (std::int64_t g = 0; g < d.G; ++g)
      if (sel[r * d.G + g]) change(r, g, (r * d.G + g) * d.E);
}

}  // namespace

void edit_affine(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_edit(n, in, out);
  const double a = n.params.edit_a, b = n.params.edit_b;
  per_selected_group(d, in, out, [&](std::int64_t, std::int64_t g, std::int64_t base) {
    for (std::int64_t j = 0; j < d.E; ++j) {
      const double x = a == 0 ? 0.0 : a * at(in[0], base + j);
      out.as<float>()[base + j] = static_cast<float>(d.operand ? x + b * at(in[2], g * d.E + j) : x);
    }
  });
}

void edit_replace(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_edit(n, in, out);
  per_selected_group(d, in, out, [&](std::int64_t, std::int64_t g, std::int64_t base) {
    const std::int64_t from = d.per_row ? base : g * d.E;
    for (std::int64_t j = 0; j < d.E; ++j) out.as<float>()[base + j] = static_cast<float>(at(in[2], from + j));
  });
}

// y = x - ((x . u) - c) u: the component along the unit direction u set to c (0: removed).
void edit_project(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_edit(n, in, out);
  const double c = n.params.edit_b;
  per_selected_group(d, in, out, [&](std::int64_t, std::int64_t g, std::int64_t base) {
    double dot = 0;
    for (std::int64_t j = 0; j < d.E; ++j) dot += at(in[0], base + j) * at(in[2], g * d.E + j);
    for (std::int64_t j = 0; j < d.E; ++j)
      out.as<float>()[base + j] = static_cast<float>(at(in[0], base + j) - (dot - c) * at(in[2], g * d.E + j));
  });
}

}  // namespace sonde::reference
