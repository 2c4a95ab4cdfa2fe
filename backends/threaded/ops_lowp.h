#pragma once
// Linear in the --compute bf16 and int8 modes on the threaded backend (ops_lowp.cpp).
#include "ops.h"

namespace sonde::threaded {

// The weight as the mode reads it: bf16 rows of K (the view in place, or the backend's rounded
// copy of f32/f16 weights), or the q8 copy (int8).
struct LowpWeight {
  const std::uint16_t* bf16 = nullptr;
  const Q8Weight* q8 = nullptr;
  // A weight the backend holds no copy of (not uploaded: rounded or quantised for this call),
  // used when the pointer above is null.
  std::vector<std::uint16_t> own_bf16;
  Q8Weight own_q8;
};

// c.lowp must be set (the mode's kernels).
void linear_lowp(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out, const LowpWeight& w);

}  // namespace sonde::threaded
