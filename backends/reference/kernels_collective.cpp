// The collectives on a group of one process (graph.h): the sum over one rank is the value, and
// the gather is this rank's kept part. The sharded backend runs them over its ranks.
#include "kernels.h"

#include <cstring>

namespace sonde::reference {

void all_reduce_sum(const Node& n, ops::Inputs in, const TensorView& out) {
  ops::check_all_reduce(n, in, out);
  std::memcpy(out.data, in[0].data, static_cast<std::size_t>(out.nbytes()));
}

void all_gather(const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_all_gather(n, in, out);
  const std::int64_t kept = d.keep_end - d.keep_begin;
  if (out.shape[n.params.axis] != kept)
    ops::fail(n, "one rank keeps {} of axis {} but the gathered shape is {}", kept, n.params.axis, out.shape.str());
  const auto* x = in[0].as<const float>();
  float* y = out.as<float>();
  for (std::int64_t o = 0; o < d.outer; ++o)
    std::memcpy(y + o * kept * d.inner, x + (o * d.axis_len + d.keep_begin) * d.inner,
                static_cast<std::size_t>(kept * d.inner) * sizeof(float));
}

}  // namespace sonde::reference
