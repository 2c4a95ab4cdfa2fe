// Linear y[M,N] = x[M,K] W[N,K]^T + b with W used in place (f32/f16/bf16) or as q8 blocks.
// Work is split over column blocks of N (and row chunks of M when there are few column blocks);
// K is never split, and its summation order is fixed by the kernels and kKc alone, so the result
// is bit-identical for any thread count and schedule.
#include "ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace sonde::threaded {

namespace {

constexpr std::int64_t kGemvRows = 32;    // W rows per q8 task with several x rows (one x row: as the GEMV)
constexpr std::int64_t kGemvMinRows = 16;        // GEMV rows per task: at least this, a multiple of 8
constexpr std::int64_t kNc = 64;          // GEMM columns per task at most (a power-of-2 multiple of every nr)
constexpr std::int64_t kKc = 256;         // GEMM K block: an nr x kKc f32 panel stays in L1/L2
constexpr std::int64_t kQ8Rows = 16;      // x rows per q8 pass over a task's W rows (they stay in L2)

WType wtype(DType t) { return t == DType::f32 ? WType::f32 : t == DType::f16 ? WType::f16 : WType::bf16; }

struct Job {
  const float* x;
  const void* W;
  WType wt;
  const float* bias;  // or null
  float* y;
  std::int64_t M, K, N;
};

void add_bias(const Job& j, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  if (!j.bias) return;
  for (std::int64_t m = m0; m < m1; ++m)
    for (std::int64_t n = n0; n < n1; ++n) j.y[m * j.N + n] += j.bias[n];
}

// One GEMM task: columns [n0, n1), rows [m0, m1). Per K block, the task's W columns are widened
// into nr-wide f32 panels once and reused by every mr-row tile of x.
void gemm_task(const Kernels& k, const Job& j, std::int64_t n0, std::int64_t n1, std::int64_t m0, std::int64_t m1,
               std::vector<float>& panel) {
  const std::int64_t panels = (n1 - n0 + k.nr - 1) / k.nr;
  panel.resize(static_cast<std::size_t>(panels * k.nr * kKc));
  for (std::int64_t k0 = 0; k0 < j.K; k0 += kKc) {
    const std::int64_t kc = std::min(kKc, j.K - k0);
    for (std::int64_t p = 0; p < panels; ++p) {
      const std::int64_t c0 = n0 + p * k.nr;
      k.pack(j.W, j.wt, j.K, c0, std::min<std::int64_t>(k.nr, n1 - c0), k0, kc, panel.data() + p * k.nr * kKc);
    }
    for (std::int64_t m = m0; m < m1; m += k.mr) {
      const int mr = static_cast<int>(std::min<std::int64_t>(k.mr, m1 - m));
      for (std::int64_t p = 0; p < panels; ++p) {
        const std::int64_t c0 = n0 + p * k.nr;
        k.micro(j.x + m * j.K + k0, j.K, mr, panel.data() + p * k.nr * kKc, kc, j.y + m * j.N + c0, j.N,
                std::min<std::int64_t>(k.nr, n1 - c0), k0 > 0);
      }
    }
  }
  add_bias(j, m0, m1, n0, n1);
}

// Tasks are column blocks of nc columns; each packs its W columns once and reuses them for all M
// rows. nc shrinks from kNc (halving, down to nr) until there are about 4 tasks per thread; M is
// split only when even that leaves a thread without a task (each row chunk re-packs its columns).
void gemm(const Ctx& c, const Job& j) {
  const std::int64_t threads = c.pool.size(), want = 4 * threads;
  std::int64_t nc = kNc;
  while (nc > c.k.nr && (j.N + nc - 1) / nc < want) nc /= 2;
  const std::int64_t nblocks = (j.N + nc - 1) / nc;
  std::int64_t mchunks = std::clamp<std::int64_t>((threads + nblocks - 1) / nblocks, 1, (j.M + c.k.mr - 1) / c.k.mr);
  const std::int64_t mrows = ((j.M + mchunks - 1) / mchunks + c.k.mr - 1) / c.k.mr * c.k.mr;
  mchunks = (j.M + mrows - 1) / mrows;
  std::vector<std::vector<float>> panels(static_cast<std::size_t>(c.pool.size()));
  c.pool.run(nblocks * mchunks, [&](std::int64_t t, int worker) {
    const std::int64_t nb = t / mchunks, mc = t % mchunks;
    gemm_task(c.k, j, nb * nc, std::min(j.N, (nb + 1) * nc), mc * mrows, std::min(j.M, (mc + 1) * mrows),
              panels[static_cast<std::size_t>(worker)]);
  });
}

// W streams from memory once. Tasks are contiguous row blocks that shrink as the rows run out
// (guided: each is about remaining / (2 * threads) rows, at least kGemvMinRows): the early blocks
// are long streams the hardware prefetcher follows, and the last ones are short, so the thread
// that finishes first waits for at most a few rows instead of a quarter share.
std::vector<std::int64_t> guided_starts(std::int64_t N, int threads) {
  std::vector<std::int64_t> start{0};
  for (std::int64_t left = N; left > 0;) {
    const std::int64_t rows = std::min(left, std::max(kGemvMinRows, (left / (2 * threads) + 7) / 8 * 8));
    start.push_back(start.back() + rows);
    left -= rows;
  }
  return start;
}

void gemv_rows(const Ctx& c, const Job& j, std::int64_t n0, std::int64_t n1) {
  c.k.gemv(j.x, j.M, j.K, j.W, j.wt, j.K, n0, n1, j.y, j.N);
  add_bias(j, 0, j.M, n0, n1);
}

void gemv(const Ctx& c, const Job& j) {
  const std::vector<std::int64_t> start = guided_starts(j.N, c.pool.size());
  c.pool.run(static_cast<std::int64_t>(start.size()) - 1, [&](std::int64_t t, int) {
    gemv_rows(c, j, start[static_cast<std::size_t>(t)], start[static_cast<std::size_t>(t) + 1]);
  });
}

struct Piece {
  std::size_t job;
  std::int64_t n0, n1;
};

// The guided split over the rows of several weights end to end; a task that crosses from one
// weight into the next is cut in two there.
std::vector<Piece> sibling_pieces(const std::vector<Job>& jobs, int threads) {
  std::int64_t rows = 0;
  for (const Job& j : jobs) rows += j.N;
  const std::vector<std::int64_t> start = guided_starts(rows, threads);
  std::vector<Piece> pieces;
  std::size_t job = 0;
  std::int64_t first_row = 0;  // of jobs[job] in the rows end to end
  for (std::size_t t = 0; t + 1 < start.size(); ++t)
    for (std::int64_t r = start[t]; r < start[t + 1];) {
      while (r >= first_row + jobs[job].N) first_row += jobs[job++].N;
      const std::int64_t end = std::min(start[t + 1], first_row + jobs[job].N);
      pieces.push_back({job, r - first_row, end - first_row});
      r = end;
    }
  return pieces;
}

// Several GEMVs as one parallel region.
void gemvs(const Ctx& c, const std::vector<Job>& jobs) {
  const std::vector<Piece> pieces = sibling_pieces(jobs, c.pool.size());
  c.pool.run(static_cast<std::int64_t>(pieces.size()), [&](std::int64_t t, int) {
    const Piece& p = pieces[static_cast<std::size_t>(t)];
    gemv_rows(c, jobs[p.job], p.n0, p.n1);
  });
}

// x is quantised per row and block (scale = max|x_b| / 127), then int8 dot products per block.
void q8_linear(const Ctx& c, const Job& j, const Q8Weight& w) {
  const std::int64_t nb = w.kp / kQ8Block;
  std::vector<std::int8_t> xq(static_cast<std::size_t>(j.M * w.kp));
  std::vector<float> xs(static_cast<std::size_t>(j.M * nb));
  for_chunks(c.pool, j.M, 16, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t m = lo; m < hi; ++m) c.k.q8_quantize(j.x + m * j.K, j.K, w.kp, xq.data() + m * w.kp, xs.data() + m * nb);
  });
  const Q8Rows rows = w.rows();
  const auto rows_task = [&](std::int64_t n0, std::int64_t n1) {
    for (std::int64_t m = 0; m < j.M; m += kQ8Rows) {
      const Q8Act act{xq.data() + m * w.kp, xs.data() + m * nb, w.kp};
      c.k.q8_gemv(act, std::min(kQ8Rows, j.M - m), rows, n0, n1, j.y + m * j.N, j.N);
    }
    add_bias(j, 0, j.M, n0, n1);
  };
  if (j.M == 1) {  // decode: W streams from memory once, in long row runs as the GEMV's
    const std::vector<std::int64_t> start = guided_starts(j.N, c.pool.size());
    c.pool.run(static_cast<std::int64_t>(start.size()) - 1, [&](std::int64_t t, int) {
      rows_task(start[static_cast<std::size_t>(t)], start[static_cast<std::size_t>(t) + 1]);
    });
  } else {  // a task's 32 rows of W stay in L1 for every group of x rows
    for_chunks(c.pool, j.N, kGemvRows, rows_task);
  }
}

// q8 Linears of one x row that all read the same x with the same block layout: x is quantised
// once, and their rows run as one parallel region, each row as q8_linear runs it.
void q8_gemvs(const Ctx& c, const std::vector<Job>& jobs, const std::vector<const Q8Weight*>& w) {
  const std::int64_t kp = w.front()->kp;
  std::vector<std::int8_t> xq(static_cast<std::size_t>(kp));
  std::vector<float> xs(static_cast<std::size_t>(kp / kQ8Block));
  c.k.q8_quantize(jobs.front().x, jobs.front().K, kp, xq.data(), xs.data());
  const Q8Act act{xq.data(), xs.data(), kp};
  std::vector<Q8Rows> rows;
  for (const Q8Weight* q : w) rows.push_back(q->rows());
  const std::vector<Piece> pieces = sibling_pieces(jobs, c.pool.size());
  c.pool.run(static_cast<std::int64_t>(pieces.size()), [&](std::int64_t t, int) {
    const Piece& p = pieces[static_cast<std::size_t>(t)];
    c.k.q8_gemv(act, 1, rows[p.job], p.n0, p.n1, jobs[p.job].y, jobs[p.job].N);
    add_bias(jobs[p.job], 0, 1, p.n0, p.n1);
  });
}

}  // namespace

void linear(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out, const Q8Weight* q8) {
  const auto d = ops::check_linear(n, in, out);
  const Job j{in[0].as<const float>(), in[1].data, wtype(in[1].dtype), d.bias ? in[2].as<const float>() : nullptr,
              out.as<float>(), d.M, d.K, d.N};
  if (d.M == 0 || d.N == 0) return;
  if (d.K == 0) {
    std::memset(j.y, 0, static_cast<std::size_t>(d.M * d.N) * sizeof(float));
    add_bias(j, 0, d.M, 0, d.N);
  } else if (q8) {
    if (q8->N != d.N || q8->K != d.K) ops::fail(n, "q8 weight is [{}, {}], expected [{}, {}]", q8->N, q8->K, d.N, d.K);
    q8_linear(c, j, *q8);
  } else if (d.M < kGemmMinRows) {
    gemv(c, j);
  } else {
    gemm(c, j);
  }
}

void linear_siblings(const Ctx& c, std::span<const Node* const> nodes, std::span<const ops::Inputs> in,
                     std::span<const TensorView> outs, std::span<const Q8Weight* const> q8) {
  std::vector<Job> jobs, q8_jobs;
  std::vector<const Q8Weight*> q8_weights;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto d = ops::check_linear(*nodes[i], in[i], outs[i]);
    const Job j{in[i][0].as<const float>(), in[i][1].data, wtype(in[i][1].dtype),
                d.bias ? in[i][2].as<const float>() : nullptr, outs[i].as<float>(), d.M, d.K, d.N};
    const Q8Weight* w = q8[i];
    const bool q8_row = w && d.M == 1 && d.N > 0 && d.K > 0 && w->N == d.N && w->K == d.K &&
                        (q8_jobs.empty() || (j.x == q8_jobs.front().x && w->kp == q8_weights.front()->kp));
    if (q8_row) {
      q8_jobs.push_back(j);
      q8_weights.push_back(w);
    } else if (w || d.M >= kGemmMinRows || d.K == 0 || d.M == 0 || d.N == 0) {
      linear(c, *nodes[i], in[i], outs[i], w);
    } else {
      jobs.push_back(j);
    }
  }
  if (!jobs.empty()) gemvs(c, jobs);
  if (!q8_jobs.empty()) q8_gemvs(c, q8_jobs, q8_weights);
}

}  // namespace sonde::threaded
