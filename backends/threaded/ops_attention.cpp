// Flash-style attention (model-spec §1.3): for a block of query rows of the query heads that
// share one kv head, keys are visited in blocks with an online softmax, so no [T, S] score matrix is ever stored:
//   m' = max(m, max_u s_u), l' = l e^(m - m') + sum_u e^(s_u - m'), acc' = acc e^(m - m') + sum_u e^(s_u - m') v_u
// and the row's output is acc / l (0 when no key is allowed). s_u = (q . k_u) d^-0.5 for keys
// allowed by ops::allowed (query t sits at key slot t + S - T). GQA: head h reads kv head h / (nh / nkv).
#include "ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace sonde::threaded {

namespace {

constexpr std::int64_t kQb = 16;  // query rows per task (of each of its heads)
constexpr std::int64_t kKb = 64;  // keys per block: a K and a V block of 64 x d stay in L1/L2

struct Head {
  const float *q, *k, *v;
  const std::uint8_t* mask;  // this batch row's [S] mask, or null
  float* y;
  std::int64_t qstride, kvstride;  // elements between consecutive slots of q/y and of k/v
};

struct RowState {
  float m = -std::numeric_limits<float>::infinity();
  float l = 0;
};

// One query row against keys [u0, u1): scores into s, then the online-softmax update of acc. The
// dot products, the exponentials and the weighted sum of V are one kernel call each for the
// block; a key the mask forbids gets p = 0, which leaves acc and l as they were.
void attend_block(const Kernels& kn, const Head& h, const float* q, std::int64_t qs, std::int64_t u0, std::int64_t u1,
                  bool causal, std::int64_t d, float scale, float* s, RowState& st, float* acc) {
  const std::int64_t n = u1 - u0;
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  kn.dots(q, h.k + u0 * h.kvstride, h.kvstride, n, d, s);
  float mx = kNone;
  for (std::int64_t i = 0; i < n; ++i) {
    s[i] = ops::allowed(causal, h.mask, qs, u0 + i) ? s[i] * scale : kNone;
    mx = std::max(mx, s[i]);
  }
  if (mx == kNone) return;
  const float mnew = std::max(st.m, mx);
  const float corr = std::exp(st.m - mnew);  // 0 on the first allowed block (m = -inf)
  if (corr != 1.0f) {
    kn.scale(corr, acc, d);
    st.l *= corr;
  }
  st.l += kn.exp_block(s, n, mnew);
  kn.axpys(s, h.v + u0 * h.kvstride, h.kvstride, n, d, acc);
  st.m = mnew;
}

// Rows [t0, t1) of the heads in `hs`, which all read the same kv head: every key block is visited
// by each of those heads and rows in turn while it is in L1, so GQA's nh / nkv query heads share
// one read of K and V (at 2k keys, per-head visits re-read 1 MB per head from L3).
void attend_rows(const Kernels& kn, const std::vector<Head>& hs, const ops::AttnDims& d, bool causal, std::int64_t t0,
                 std::int64_t t1, std::vector<float>& buf, std::vector<RowState>& st) {
  const auto D = static_cast<std::size_t>(d.d), rows = static_cast<std::size_t>(t1 - t0), nh = hs.size();
  buf.assign(nh * rows * D + kKb, 0.0f);
  st.assign(nh * rows, RowState{});
  float* s = buf.data() + nh * rows * D;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.d)));
  // Keys past the last row's slot are never allowed under the causal rule.
  const std::int64_t kend = causal ? std::min(d.S, t1 - 1 + (d.S - d.T) + 1) : d.S;
  for (std::int64_t u0 = 0; u0 < kend; u0 += kKb)
    for (std::size_t i = 0; i < nh; ++i)
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::size_t r = i * rows + static_cast<std::size_t>(t - t0);
        attend_block(kn, hs[i], hs[i].q + t * hs[i].qstride, t + (d.S - d.T), u0, std::min(kend, u0 + kKb), causal,
                     d.d, scale, s, st[r], buf.data() + r * D);
      }
  for (std::size_t i = 0; i < nh; ++i)
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::size_t r = i * rows + static_cast<std::size_t>(t - t0);
      const float* acc = buf.data() + r * D;
      float* y = hs[i].y + t * hs[i].qstride;
      for (std::int64_t j = 0; j < d.d; ++j) y[j] = st[r].l > 0 ? acc[j] / st[r].l : 0.0f;
    }
}

}  // namespace

// Tasks: (batch, kv head, chunk of its query heads, block of kQb query rows). A kv head's query
// heads are split into chunks only when there would otherwise be fewer than two tasks per
// thread (decode: one query row).
void attention(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_attention(n, in, out);
  const std::int64_t group = d.nh / d.nkv, qblocks = (d.T + kQb - 1) / kQb;
  const std::int64_t base = d.B * d.nkv * qblocks;
  const std::int64_t chunks = std::clamp<std::int64_t>((2 * c.pool.size() + base - 1) / base, 1, group);
  const std::int64_t per_chunk = (group + chunks - 1) / chunks;
  const auto threads = static_cast<std::size_t>(c.pool.size());
  std::vector<std::vector<float>> bufs(threads);
  std::vector<std::vector<RowState>> states(threads);
  std::vector<std::vector<Head>> heads(threads);
  c.pool.run(base * chunks, [&](std::int64_t task, int worker) {
    const std::int64_t qb = task % qblocks, ch = task / qblocks % chunks, g = task / qblocks / chunks % d.nkv,
                       b = task / qblocks / chunks / d.nkv;
    auto& hs = heads[static_cast<std::size_t>(worker)];
    hs.clear();
    for (std::int64_t h = g * group + ch * per_chunk; h < std::min((g + 1) * group, g * group + (ch + 1) * per_chunk); ++h)
      hs.push_back(Head{in[0].as<const float>() + (b * d.T * d.nh + h) * d.d,
                        in[1].as<const float>() + (b * d.S * d.nkv + g) * d.d,
                        in[2].as<const float>() + (b * d.S * d.nkv + g) * d.d,
                        d.mask ? in[3].as<const std::uint8_t>() + b * d.S : nullptr,
                        out.as<float>() + (b * d.T * d.nh + h) * d.d,
                        d.nh * d.d,
                        d.nkv * d.d});
    if (hs.empty()) return;
    attend_rows(c.k, hs, d, n.params.causal, qb * kQb, std::min(d.T, (qb + 1) * kQb),
                bufs[static_cast<std::size_t>(worker)], states[static_cast<std::size_t>(worker)]);
  });
}

}  // namespace sonde::threaded
