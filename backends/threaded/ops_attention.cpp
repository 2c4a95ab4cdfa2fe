// Flash-style attention (model-spec §1.3): for a block of query rows of the query heads that
// share one kv head, keys are visited in blocks with an online softmax, so no [T, S] score matrix is ever stored:
//   m' = max(m, max_u s_u), l' = l e^(m - m') + sum_u e^(s_u - m'), acc' = acc e^(m - m') + sum_u e^(s_u - m') v_u
// and the row's output is acc / l (0 when no key is allowed). s_u = (q . k_u) d^-0.5 for keys
// allowed by ops::allowed (query t sits at key slot t + S - T). GQA: head h reads kv head h / (nh / nkv).
// Keys go in runs of kKeysPerTask from the batch row's first allowed key, each with its own
// softmax state, merged afterwards in key order, for every T: a row's arithmetic is the same
// alone, left-padded in a batch, in a prefill or in a one-query step (batch invariance).
#include "ops.h"

#include <algorithm>
#include <cmath>
#include <immintrin.h>
#include <limits>
#include <vector>

namespace sonde::threaded {

namespace {

constexpr std::int64_t kQb = 16;  // query rows per task (of each of its heads)
constexpr std::int64_t kKb = 64;  // keys per block: a K and a V block of 64 x d stay in L1/L2
// Keys per task when every query row fits one task (decode): the keys are split instead, so each
// K and V byte is read by one thread, and the partial softmax states are merged afterwards. A
// fixed length (not one derived from the thread count) keeps the result the same on any pool.
constexpr std::int64_t kKeysPerTask = 256;
static_assert(kKb <= kKeysT, "a key block must fit keys_t's layout");
// Query rows (of all heads in a visit) from which a key block is transposed once for dots_t
// rather than folded key by key in dots: the transposition costs about what 8-12 rows' folds
// do. Decode (a kv head's few query rows) stays on dots; the bits are the same either way.
constexpr std::size_t kTransposeFromRows = 16;
// A task's scratch beside its accumulators: four rows' kKb scores, then a transposed key block.
std::size_t scratch_floats(std::int64_t d) { return static_cast<std::size_t>(4 * kKb + d * kKeysT); }

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

// One row's online-softmax update from its scores s[0, n) over keys [u0, u0 + n) (dots' output,
// `top` their maximum): forbidden keys get p = 0 (which leaves acc and l as they were), acc and l
// are rescaled to the new maximum and s becomes the weights e^(s - m). False when the block allows
// no key: then nothing changed and the block's values must not be added.
bool weigh_block(const Kernels& kn, const Head& h, std::int64_t qs, std::int64_t u0, std::int64_t n, bool causal,
                 std::int64_t d, float scale, float top, float* s, RowState& st, float* acc) {
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  float mx = kNone;
  if (!h.mask && (!causal || u0 + n - 1 <= qs)) {  // every key allowed (decode): no per-key test
    kn.scale(scale, s, n);
    mx = top * scale;  // scale > 0, so this is the largest s[i] * scale, rounding included
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      s[i] = ops::allowed(causal, h.mask, qs, u0 + i) ? s[i] * scale : kNone;
      mx = std::max(mx, s[i]);
    }
  }
  if (mx == kNone) return false;
  const float mnew = std::max(st.m, mx);
  const float corr = std::exp(st.m - mnew);  // 0 on the first allowed block (m = -inf)
  if (corr != 1.0f) {
    kn.scale(corr, acc, d);
    st.l *= corr;
  }
  st.l += kn.exp_block(s, n, mnew);
  st.m = mnew;
  return true;
}

// One query row against keys [u0, u1): the dot products (from the transposed block kt when
// given), the update, then the weighted sum of V, one kernel call each for the block.
void attend_block(const Kernels& kn, const Head& h, const float* q, std::int64_t qs, std::int64_t u0, std::int64_t u1,
                  bool causal, std::int64_t d, float scale, const float* kt, float* s, RowState& st, float* acc) {
  const std::int64_t n = u1 - u0;
  const float top = kt ? kn.dots_t(q, kt, n, d, s) : kn.dots(q, h.k + u0 * h.kvstride, h.kvstride, n, d, s);
  if (weigh_block(kn, h, qs, u0, n, causal, d, scale, top, s, st, acc))
    kn.axpys(s, h.v + u0 * h.kvstride, h.kvstride, n, d, acc);
}

// attend_block for four rows (of heads that share one kv head) over a transposed block: the four
// rows' dot products and weighted sums are one kernel call each; the same bits as four calls.
struct RowRef {
  const Head* h;
  const float* q;
  std::int64_t qs;  // the row's key slot
  RowState* st;
  float* acc;
};
void attend_block4(const Kernels& kn, const RowRef (&rows)[4], std::int64_t u0, std::int64_t u1, bool causal,
                   std::int64_t d, float scale, const float* kt, float* s4) {
  const std::int64_t n = u1 - u0;
  const float* q[4];
  float* s[4];
  float* acc[4];
  for (int r = 0; r < 4; ++r) q[r] = rows[r].q, s[r] = s4 + r * kKb, acc[r] = rows[r].acc;
  float top[4];
  kn.dots_t4(q, kt, n, d, s, top);
  bool all = true, used[4];
  for (int r = 0; r < 4; ++r) {
    used[r] = weigh_block(kn, *rows[r].h, rows[r].qs, u0, n, causal, d, scale, top[r], s[r], *rows[r].st, acc[r]);
    all = all && used[r];
  }
  const Head& h = *rows[0].h;
  if (all) return kn.axpys4(s, h.v + u0 * h.kvstride, h.kvstride, n, d, acc);
  for (int r = 0; r < 4; ++r)
    if (used[r]) kn.axpys(s[r], h.v + u0 * h.kvstride, h.kvstride, n, d, acc[r]);
}

// Rows [t0, t1) of the heads in `hs`, which all read the same kv head, against keys [k0, k1):
// every key block is visited by each of those heads and rows in turn while it is in L1, so GQA's
// nh / nkv query heads share one read of K and V (at 2k keys, per-head visits re-read 1 MB per
// head from L3). The next block's K and V lines are prefetched first: the cache is cold here,
// a gigabyte of weights having streamed through since this layer last read it. acc holds
// hs.size() * rows * d accumulators and st their states, row-major by (head, row). scratch holds
// scratch_floats(d) floats: four rows' scores, then the transposed block (when enough rows share it).
void visit_keys(const Kernels& kn, const std::vector<Head>& hs, const ops::AttnDims& d, bool causal, std::int64_t t0,
                std::int64_t t1, std::int64_t k0, std::int64_t k1, float* acc, RowState* st, float* scratch) {
  float* const s = scratch;
  float* const kt = scratch + 4 * kKb;
  const auto D = static_cast<std::size_t>(d.d), rows = static_cast<std::size_t>(t1 - t0), nh = hs.size();
  const bool transpose = kn.keys_t && nh * rows >= kTransposeFromRows;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.d)));
  const std::int64_t line_floats = 16, lines = (d.d + line_floats - 1) / line_floats;
  for (std::int64_t u0 = k0; u0 < k1; u0 += kKb) {
    for (std::int64_t u = u0 + kKb; u < std::min(k1, u0 + 2 * kKb); ++u)
      for (std::int64_t l = 0; l < lines; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(hs[0].k + u * hs[0].kvstride + l * line_floats), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(hs[0].v + u * hs[0].kvstride + l * line_floats), _MM_HINT_T0);
      }
    const std::int64_t u1 = std::min(k1, u0 + kKb);
    if (transpose) kn.keys_t(hs[0].k + u0 * hs[0].kvstride, hs[0].kvstride, u1 - u0, d.d, kt);
    // Rows by (head, row) in turn; with a transposed block, four at a time while four are left.
    const auto row = [&](std::size_t r) {
      const std::size_t i = r / rows;
      const std::int64_t t = t0 + static_cast<std::int64_t>(r % rows);
      return RowRef{&hs[i], hs[i].q + t * hs[i].qstride, t + (d.S - d.T), &st[r], acc + r * D};
    };
    std::size_t r = 0;
    if (transpose && kn.dots_t4)
      for (; r + 4 <= nh * rows; r += 4) {
        const RowRef four[4] = {row(r), row(r + 1), row(r + 2), row(r + 3)};
        attend_block4(kn, four, u0, u1, causal, d.d, scale, kt, s);
      }
    for (; r < nh * rows; ++r) {
      const RowRef one = row(r);
      attend_block(kn, *one.h, one.q, one.qs, u0, u1, causal, d.d, scale, transpose ? kt : nullptr, s, *one.st, one.acc);
    }
  }
}

// y = acc / l for rows [t0, t1) of the heads in `hs` (0 for a row no key was allowed to).
void write_rows(const std::vector<Head>& hs, std::int64_t d, std::int64_t t0, std::int64_t t1, const float* acc,
                const RowState* st) {
  const auto rows = static_cast<std::size_t>(t1 - t0);
  for (std::size_t i = 0; i < hs.size(); ++i)
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::size_t r = i * rows + static_cast<std::size_t>(t - t0);
      const float* a = acc + r * static_cast<std::size_t>(d);
      float* y = hs[i].y + t * hs[i].qstride;
      for (std::int64_t j = 0; j < d; ++j) y[j] = st[r].l > 0 ? a[j] / st[r].l : 0.0f;
    }
}

// The heads of kv head g (query heads [h0, h1)) of batch row b. K and V need only be dense within
// a batch row: a batch's keys are read where the KV cache holds them, rows strides[0] apart.
void heads_of(const ops::AttnDims& d, ops::Inputs in, const TensorView& out, std::int64_t b, std::int64_t g,
              std::int64_t h0, std::int64_t h1, std::vector<Head>& hs) {
  hs.clear();
  for (std::int64_t h = h0; h < h1; ++h)
    hs.push_back(Head{in[0].as<const float>() + (b * d.T * d.nh + h) * d.d,
                      in[1].as<const float>() + b * in[1].strides[0] + g * d.d,
                      in[2].as<const float>() + b * in[2].strides[0] + g * d.d,
                      d.mask ? in[3].as<const std::uint8_t>() + b * d.S : nullptr,
                      out.as<float>() + (b * d.T * d.nh + h) * d.d,
                      d.nh * d.d,
                      d.nkv * d.d});
}

// The batch row's first allowed key (its left padding ends there; 0 without a mask, S if none).
// Key runs and blocks start from it, so a prompt's keys fall into the same blocks alone and
// left-padded in a batch: its numbers do not depend on its micro-batch.
std::int64_t first_key(const ops::AttnDims& d, ops::Inputs in, std::int64_t b) {
  if (!d.mask) return 0;
  const std::uint8_t* m = in[3].as<const std::uint8_t>() + b * d.S;
  std::int64_t u = 0;
  while (u < d.S && !m[u]) ++u;
  return u;
}

// Merges the softmax states of `runs` runs of keys, laid out run-major (`per` rows each, acc
// with d floats per row), into the first run's slots, in key order: m = max m_i,
// l = sum l_i e^(m_i - m), acc = sum acc_i e^(m_i - m) (a run with no allowed key has l = 0 and
// adds nothing). With one run this changes no bit (e^0 = 1).
void merge_runs(const Kernels& kn, std::int64_t runs, std::size_t per, std::int64_t d, float* acc, RowState* st) {
  const auto D = static_cast<std::size_t>(d);
  for (std::size_t r = 0; r < per; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < runs; ++i) m = std::max(m, st[static_cast<std::size_t>(i) * per + r].m);
    // Into the first run's slot: it is scaled first, then the others are added to it.
    float* a = acc + r * D;
    float l = 0;
    for (std::int64_t i = 0; i < runs; ++i) {
      const std::size_t from = static_cast<std::size_t>(i) * per + r;
      if (st[from].l == 0) continue;
      const float w = std::exp(st[from].m - m);
      l += st[from].l * w;
      if (i == 0) kn.scale(w, a, d);
      else kn.axpy(w, acc + from * D, a, d);
    }
    st[r].l = l;
  }
}

// Few query rows (decode): tasks are (batch row, kv head, run of kKeysPerTask keys), each over
// all of that kv head's query heads and rows, leaving its softmax state (m, l, acc) per row;
// then per row the runs merge in key order, m = max m_i, l = sum l_i e^(m_i - m),
// acc = sum acc_i e^(m_i - m) (a run with no allowed key has l = 0 and adds nothing).
void attention_split_keys(const Ctx& c, ops::Inputs in, const TensorView& out, const ops::AttnDims& d, bool causal) {
  const std::int64_t group = d.nh / d.nkv, runs = (d.S + kKeysPerTask - 1) / kKeysPerTask;
  const auto per_task = static_cast<std::size_t>(group * d.T);  // rows of one task, by (head, row)
  const auto D = static_cast<std::size_t>(d.d);
  const std::int64_t tasks = d.B * d.nkv * runs;
  std::vector<std::int64_t> first(static_cast<std::size_t>(d.B));
  for (std::int64_t b = 0; b < d.B; ++b) first[static_cast<std::size_t>(b)] = first_key(d, in, b);
  std::vector<float> acc(static_cast<std::size_t>(tasks) * per_task * D, 0.0f);
  std::vector<RowState> st(static_cast<std::size_t>(tasks) * per_task);
  const auto threads = static_cast<std::size_t>(c.pool.size());
  std::vector<std::vector<float>> scores(threads, std::vector<float>(scratch_floats(d.d)));
  std::vector<std::vector<Head>> heads(threads);
  c.pool.run(tasks, [&](std::int64_t task, int worker) {
    const std::int64_t run = task % runs, g = task / runs % d.nkv, b = task / runs / d.nkv;
    const std::int64_t k0 = first[static_cast<std::size_t>(b)] + run * kKeysPerTask;
    if (k0 >= d.S) return;  // past the keys (the runs start at the first allowed one)
    auto& hs = heads[static_cast<std::size_t>(worker)];
    heads_of(d, in, out, b, g, g * group, (g + 1) * group, hs);
    const auto at = static_cast<std::size_t>(task) * per_task;
    float* s = scores[static_cast<std::size_t>(worker)].data();
    visit_keys(c.k, hs, d, causal, 0, d.T, k0, std::min(d.S, k0 + kKeysPerTask), acc.data() + at * D, st.data() + at, s);
  });
  std::vector<Head> hs;
  for (std::int64_t bg = 0; bg < d.B * d.nkv; ++bg) {
    const auto first_run = static_cast<std::size_t>(bg * runs) * per_task;  // this (b, g)'s first run
    merge_runs(c.k, runs, per_task, d.d, acc.data() + first_run * D, st.data() + first_run);
    heads_of(d, in, out, bg / d.nkv, bg % d.nkv, bg % d.nkv * group, (bg % d.nkv + 1) * group, hs);
    write_rows(hs, d.d, 0, d.T, acc.data() + first_run * D, st.data() + first_run);
  }
}

}  // namespace

// Tasks: (batch, kv head, chunk of its query heads, block of kQb query rows). A kv head's query
// heads are split into chunks only when there would otherwise be fewer than two tasks per
// thread. When all query rows fit one block (decode), the keys are split instead.
void attention(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out) {
  const auto d = ops::check_attention(n, in, out);
  if (d.T <= kQb && d.S > 0) return attention_split_keys(c, in, out, d, n.params.causal);
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
    const std::int64_t t0 = qb * kQb, t1 = std::min(d.T, (qb + 1) * kQb);
    auto& hs = heads[static_cast<std::size_t>(worker)];
    heads_of(d, in, out, b, g, g * group + ch * per_chunk, std::min((g + 1) * group, g * group + (ch + 1) * per_chunk), hs);
    if (hs.empty()) return;
    const auto rows = static_cast<std::size_t>(t1 - t0), D = static_cast<std::size_t>(d.d);
    auto& buf = bufs[static_cast<std::size_t>(worker)];
    auto& st = states[static_cast<std::size_t>(worker)];
    // Keys in runs of kKeysPerTask from the first allowed one, each with its own softmax state,
    // merged as the decode path merges them: the same arithmetic for a row whatever T is.
    const std::int64_t f = first_key(d, in, b), runs = std::max<std::int64_t>(1, (d.S - f + kKeysPerTask - 1) / kKeysPerTask);
    const std::size_t per = hs.size() * rows;
    buf.assign(static_cast<std::size_t>(runs) * per * D + scratch_floats(d.d), 0.0f);
    st.assign(static_cast<std::size_t>(runs) * per, RowState{});
    // Keys past the last row's slot are never allowed under the causal rule.
    const std::int64_t kend = n.params.causal ? std::min(d.S, t1 - 1 + (d.S - d.T) + 1) : d.S;
    float* scores = buf.data() + static_cast<std::size_t>(runs) * per * D;
    for (std::int64_t i = 0; i < runs; ++i) {
      const std::int64_t k0 = f + i * kKeysPerTask, k1 = std::min(kend, k0 + kKeysPerTask);
      const std::size_t at = static_cast<std::size_t>(i) * per;
      if (k0 < k1)
        visit_keys(c.k, hs, d, n.params.causal, t0, t1, k0, k1, buf.data() + at * D, st.data() + at, scores);
    }
    merge_runs(c.k, runs, per, d.d, buf.data(), st.data());
    write_rows(hs, d.d, t0, t1, buf.data(), st.data());
  });
}

}  // namespace sonde::threaded
