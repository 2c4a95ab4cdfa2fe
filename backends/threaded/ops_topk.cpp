// SaeActivation on the threaded backend, rows split over the pool. A TopK row on AVX-512 is two
// streaming passes and a selection among few candidates (topk.h):
//  1. the maxima of 256 strided groups, and from them a bar: k of the groups have a maximum at or
//     above the k-th largest maximum, so k values are at or above it, and no value of the row's k
//     largest is below it;
//  2. the row read again (from L2): each value at or above the bar is a candidate, its index
//     compress-stored and its relu written, every other output zero (~73 candidates of 16,384
//     Gaussian values for k = 64);
//  3. the k best candidates by (value order, lower index first), the others' outputs zeroed again:
//     the choice of ops::top_k_indices and of the reference (ties keep the lower index), so the
//     output is theirs bit for bit, whatever the other rows.
// Elsewhere (no AVX-512, 4k > 256 groups, rows shorter than 1,024) ops::top_k_indices.
#include "ops.h"
#include "topk.h"

#include <sonde/sae_f32.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

namespace sonde::threaded {

namespace {

struct TopKScratch {
  std::vector<std::int32_t> cand;
  std::vector<std::int64_t> keys;
};

bool topk_fast_fits(const Ctx& c, std::int64_t N, std::int64_t k) {
  return std::string_view(c.k.name) == "avx512" && 4 * k <= kTopKGroups && N >= 4 * kTopKGroups;
}

void topk_row_avx512(const float* row, std::int64_t N, std::int64_t k, float* out, TopKScratch& s) {
  // 32 halvings reach the k-th largest maximum itself: each is 16 vector compares.
  const std::int32_t bar = topk_bar_avx512(row, N, k, 32);
  s.cand.resize(static_cast<std::size_t>(N + 16));
  const std::int64_t n = topk_candidates_avx512(row, N, bar, out, s.cand.data());
  if (n == k) return;  // n >= k: k group maxima are candidates
  s.keys.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {  // value order, then the lower index: larger is better
    const std::int32_t j = s.cand[static_cast<std::size_t>(i)];
    s.keys[static_cast<std::size_t>(i)] =
        static_cast<std::int64_t>(static_cast<std::uint64_t>(static_cast<std::int64_t>(ops::float_order(row[j]))) << 32 |
                                  (0xFFFFFFFFu - static_cast<std::uint32_t>(j)));
  }
  std::nth_element(s.keys.begin(), s.keys.begin() + (k - 1), s.keys.end(), std::greater<>());
  for (std::size_t i = static_cast<std::size_t>(k); i < s.keys.size(); ++i)
    out[0xFFFFFFFFu - static_cast<std::uint32_t>(s.keys[i] & 0xFFFFFFFF)] = 0.0f;
}

}  // namespace

// Rows are independent (a TopK row's choice reads that row only), so the split does not change a value.
void sae_activation(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_sae_activation(n, in, out);
  if (n.params.sae_act == SaeAct::TopK && topk_fast_fits(c, d.N, d.k)) {
    for_chunks(c.pool, d.rows, 4, [&](std::int64_t lo, std::int64_t hi) {
      TopKScratch s;
      for (std::int64_t r = lo; r < hi; ++r) topk_row_avx512(in[0].as<const float>() + r * d.N, d.N, d.k, out.as<float>() + r * d.N, s);
    });
    return;
  }
  for_chunks(c.pool, d.rows, 4, [&](std::int64_t lo, std::int64_t hi) { ops::sae_activation_rows_f32(n, in, out, lo, hi); });
}

}  // namespace sonde::threaded
