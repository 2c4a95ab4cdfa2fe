#pragma once
// The edit ops (graph.h EditAffine / EditReplace / EditProject) on f32 inputs, for the fast CPU
// backends (header-only, like op_checks.h). Edits touch one [B,T,*row] tensor once, so a plain
// loop is enough; the dot product of EditProject is accumulated in double, as the reference does.
#include <sonde/op_checks.h>

#include <cstring>

namespace sonde::ops {

inline void run_edit_f32(const Node& n, Inputs in, const TensorView& out) {
  const auto d = check_edit(n, in, out);
  const float* x = in[0].as<const float>();
  const auto* sel = in[1].as<const std::uint8_t>();
  const float* v = d.operand ? in[2].as<const float>() : nullptr;
  float* y = out.as<float>();
  if (y != x) std::memcpy(y, x, static_cast<std::size_t>(d.rows * d.G * d.E) * sizeof(float));
  const float a = n.params.edit_a, b = n.params.edit_b;
  for (std::int64_t r = 0; r < d.rows; ++r)
    for (std::int64_t g = 0; g < d.G; ++g) {
      if (!sel[r * d.G + g]) continue;
      const std::int64_t base = (r * d.G + g) * d.E;
      float* yg = y + base;
      const float* vg = v ? v + (d.per_row ? base : g * d.E) : nullptr;
      switch (n.op) {
        case OpKind::EditAffine:
          for (std::int64_t j = 0; j < d.E; ++j) {
            const float xa = a == 0.0f ? 0.0f : a * yg[j];
            yg[j] = vg ? xa + b * vg[j] : xa;
          }
          break;
        case OpKind::EditReplace: std::memcpy(yg, vg, static_cast<std::size_t>(d.E) * sizeof(float)); break;
        case OpKind::EditProject: {
          double dot = 0;
          for (std::int64_t j = 0; j < d.E; ++j) dot += static_cast<double>(yg[j]) * vg[j];
          const double k = dot - static_cast<double>(b);
          for (std::int64_t j = 0; j < d.E; ++j) yg[j] = static_cast<float>(yg[j] - k * vg[j]);
          break;
        }
        default: fail(n, "not an edit op");
      }
    }
}

}  // namespace sonde::ops
