// Flash-style attention (model-spec §1.3): for a block of query rows of one (batch, head), keys
// are visited in blocks with an online softmax, so no [T, S] score matrix is ever stored:
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

constexpr std::int64_t kQb = 16;  // query rows per task
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

// One query row against keys [u0, u1): scores into s, then the online-softmax update of acc.
void attend_block(const Kernels& kn, const Head& h, const float* q, std::int64_t qs, std::int64_t u0, std::int64_t u1,
                  bool causal, std::int64_t d, float scale, float* s, RowState& st, float* acc) {
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t u = u0; u < u1; ++u) {
    const bool ok = ops::allowed(causal, h.mask, qs, u);
    s[u - u0] = ok ? kn.dot(q, h.k + u * h.kvstride, d) * scale : -std::numeric_limits<float>::infinity();
    mx = std::max(mx, s[u - u0]);
  }
  if (mx == -std::numeric_limits<float>::infinity()) return;
  const float mnew = std::max(st.m, mx);
  const float corr = std::exp(st.m - mnew);  // 0 on the first allowed block (m = -inf)
  if (corr != 1.0f) {
    kn.scale(corr, acc, d);
    st.l *= corr;
  }
  for (std::int64_t u = u0; u < u1; ++u) {
    if (s[u - u0] == -std::numeric_limits<float>::infinity()) continue;
    const float p = std::exp(s[u - u0] - mnew);
    st.l += p;
    kn.axpy(p, h.v + u * h.kvstride, acc, d);
  }
  st.m = mnew;
}

void attend_rows(const Kernels& kn, const Head& h, const ops::AttnDims& d, bool causal, std::int64_t t0,
                 std::int64_t t1, std::vector<float>& buf) {
  const auto D = static_cast<std::size_t>(d.d);
  buf.assign(static_cast<std::size_t>(kQb) * D + kKb, 0.0f);
  float* s = buf.data() + static_cast<std::size_t>(kQb) * D;
  RowState st[kQb];
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.d)));
  // Keys past the last row's slot are never allowed under the causal rule.
  const std::int64_t kend = causal ? std::min(d.S, t1 - 1 + (d.S - d.T) + 1) : d.S;
  for (std::int64_t u0 = 0; u0 < kend; u0 += kKb)
    for (std::int64_t t = t0; t < t1; ++t)
      attend_block(kn, h, h.q + t * h.qstride, t + (d.S - d.T), u0, std::min(kend, u0 + kKb), causal, d.d, scale, s,
                   st[t - t0], buf.data() + static_cast<std::size_t>(t - t0) * D);
  for (std::int64_t t = t0; t < t1; ++t) {
    const float* acc = buf.data() + static_cast<std::size_t>(t - t0) * D;
    float* y = h.y + t * h.qstride;
    const RowState& r = st[t - t0];
    for (std::int64_t j = 0; j < d.d; ++j) y[j] = r.l > 0 ? acc[j] / r.l : 0.0f;
  }
}

}  // namespace

void attention(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_attention(n, in, out);
  const std::int64_t group = d.nh / d.nkv, qblocks = (d.T + kQb - 1) / kQb;
  std::vector<std::vector<float>> bufs(static_cast<std::size_t>(c.pool.size()));
  c.pool.run(d.B * d.nh * qblocks, [&](std::int64_t task, int worker) {
    const std::int64_t qb = task % qblocks, h = task / qblocks % d.nh, b = task / qblocks / d.nh;
    const std::int64_t g = h / group;
    const Head head{in[0].as<const float>() + (b * d.T * d.nh + h) * d.d,
                    in[1].as<const float>() + (b * d.S * d.nkv + g) * d.d,
                    in[2].as<const float>() + (b * d.S * d.nkv + g) * d.d,
                    d.mask ? in[3].as<const std::uint8_t>() + b * d.S : nullptr,
                    out.as<float>() + (b * d.T * d.nh + h) * d.d,
                    d.nh * d.d,
                    d.nkv * d.d};
    attend_rows(c.k, head, d, n.params.causal, qb * kQb, std::min(d.T, (qb + 1) * kQb),
                bufs[static_cast<std::size_t>(worker)]);
  });
}

}  // namespace sonde::threaded
