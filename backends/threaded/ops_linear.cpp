// Linear y[M,N] = x[M,K] W[N,K]^T + b with W used in place (f32/f16/bf16) or as q8 blocks
// (kernels.h: w = float(q) * s, x stays f32), all through the same kernels.
// Work is split over blocks of W rows (and x row chunks when there are few blocks); K is never
// split, and every output is summed in the GEMV kernel's order, which depends on K alone (the
// packed GEMM of gemm_avx512.cpp sums in the same tree), so the result is bit-identical for any
// thread count, schedule, path and number of x rows.
#include "ops.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <sonde/dtype.h>
#include <spdlog/spdlog.h>
#include <vector>

namespace sonde::threaded {

namespace {

constexpr std::int64_t kGemvMinRows = 16;        // GEMV rows per task: at least this, a multiple of 8
constexpr std::int64_t kPanelBytes = 256 << 10;  // f32 W rows per GEMM task: they stay in L2

WType wtype(DType t) { return t == DType::f32 ? WType::f32 : t == DType::f16 ? WType::f16 : WType::bf16; }

struct Job {
  const float* x;
  const void* W;
  WType wt;
  const float* bias;  // or null
  float* y;
  std::int64_t M, K, N;
  const float* wp = nullptr;  // W's rows packed once (PackedW), or null: packed per task
};

void add_bias(const Job& j, std::int64_t m0, std::int64_t m1, std::int64_t n0, std::int64_t n1) {
  if (!j.bias) return;
  for (std::int64_t m = m0; m < m1; ++m)
    for (std::int64_t n = n0; n < n1; ++n) j.y[m * j.N + n] += j.bias[n];
}

// q8 rows [n0, n1) dequantised to f32 as the GEMV kernels do it: w = float(q) * s, so both paths
// sum the same f32 weights.
void widen_q8_rows(const Job& j, std::int64_t n0, std::int64_t n1, float* out) {
  const std::int64_t rb = q8_row_bytes(j.K);
  for (std::int64_t n = n0; n < n1; ++n, out += j.K) {
    const auto* row = static_cast<const unsigned char*>(j.W) + n * rb;
    for (std::int64_t lo = 0; lo < j.K; lo += kQ8Block) {
      const unsigned char* blk = row + lo / kQ8Block * kQ8BlockBytes;
      float s;
      std::memcpy(&s, blk, 4);
      const auto* q = reinterpret_cast<const std::int8_t*>(blk + 4);
      const std::int64_t count = std::min(kQ8Block, j.K - lo);
      for (std::int64_t i = 0; i < count; ++i) out[lo + i] = static_cast<float>(q[i]) * s;
    }
  }
}

// The W rows of a GEMM task as f32 in a panel of their own (bf16 is the top half of an f32:
// exact). f32 rows are copied too: the kernel reads W with non-temporal prefetches, which do not
// keep the rows in L2 for the next group of x rows; the panel is already there.
void widen_rows(const Job& j, std::int64_t n0, std::int64_t n1, float* out) {
  if (j.wt == WType::q8) return widen_q8_rows(j, n0, n1, out);
  const std::int64_t count = (n1 - n0) * j.K;
  if (j.wt == WType::f32) {
    std::memcpy(out, static_cast<const float*>(j.W) + n0 * j.K, static_cast<std::size_t>(count) * sizeof(float));
    return;
  }
  const auto* h = static_cast<const std::uint16_t*>(j.W) + n0 * j.K;
  if (j.wt == WType::bf16) {
    for (std::int64_t i = 0; i < count; ++i) {
      const std::uint32_t bits = static_cast<std::uint32_t>(h[i]) << 16;
      std::memcpy(out + i, &bits, 4);
    }
  } else {
    for (std::int64_t i = 0; i < count; ++i) out[i] = f16_to_f32(h[i]);
  }
}

// A buffer per thread that grows and is kept (a worker's panels are the same size call after
// call).
thread_local AlignedFloats t_wide, t_packed, t_xpack;

std::int64_t gemm_steps(std::int64_t K) { return (K + 31) / 32; }
std::int64_t x_pack_floats(std::int64_t M, std::int64_t K) {
  return (M + kGemmXRows - 1) / kGemmXRows * kGemmXRows * gemm_steps(K) * 32;
}
std::int64_t w_pack_floats(std::int64_t N, std::int64_t K) {
  return (N + kGemmWRows - 1) / kGemmWRows * kGemmWRows * gemm_steps(K) * 32;
}

// One GEMM task without a packed kernel: W rows [n0, n1) widened to an f32 panel that stays in L2
// while the GEMV kernel passes every group of x rows [m0, m1) over it.
void gemm_task_gemv(const Kernels& k, const Job& j, std::int64_t n0, std::int64_t n1, std::int64_t m0, std::int64_t m1) {
  float* p = t_wide.get((n1 - n0) * j.K);
  widen_rows(j, n0, n1, p);
  k.gemv(j.x + m0 * j.K, m1 - m0, j.K, p, WType::f32, j.K, 0, n1 - n0, j.y + m0 * j.N + n0, j.N);
  add_bias(j, m0, m1, n0, n1);
}

// One GEMM task on the packed kernel: W rows [n0, n1) packed, against x rows [m0, m1) of the call's x pack (m0 a multiple of kGemmXRows). The kernel
// adds the bias as it stores each sum: a pass of its own afterwards re-read the task's outputs,
// whose rows (j.N floats apart, 64 KB for an SAE's 16,384 features) share cache sets, from L3.
void gemm_task_packed(const Kernels& k, const Job& j, const float* xp, std::int64_t n0, std::int64_t n1,
                      std::int64_t m0, std::int64_t m1) {
  const float* xrows = xp + m0 / kGemmXRows * kGemmXRows * gemm_steps(j.K) * 32;
  const float* bias = j.bias ? j.bias + n0 : nullptr;
  if (j.wp) {  // n0 is a multiple of kGemmWRows: its block starts n0 32 S floats into the panels
    k.gemm_packed(xrows, m1 - m0, j.wp + n0 * gemm_steps(j.K) * 32, n1 - n0, j.K, bias, j.y + m0 * j.N + n0, j.N,
                  t_packed.get(kGemmScratchFloats));
    return;
  }
  // f32 and bf16 rows are packed straight from W; f16 and q8 are widened to f32 first.
  const bool direct = j.wt == WType::f32 || j.wt == WType::bf16;
  const void* rows = static_cast<const char*>(j.W) + n0 * j.K * (j.wt == WType::f32 ? 4 : 2);
  if (!direct) {
    float* wide = t_wide.get((n1 - n0) * j.K);
    widen_rows(j, n0, n1, wide);
    rows = wide;
  }
  const std::int64_t packed = w_pack_floats(n1 - n0, j.K);
  float* wp = t_packed.get(packed + kGemmScratchFloats);
  k.gemm_pack_w(rows, direct && j.wt == WType::bf16, n1 - n0, j.K, wp);
  k.gemm_packed(xrows, m1 - m0, wp, n1 - n0, j.K, bias, j.y + m0 * j.N + n0, j.N, wp + packed);
}

// Tasks are blocks of W rows, about kPanelBytes of f32 each (a multiple of the packed kernel's
// kGemmWRows, or of the GEMV's 4 row streams), shrunk (halving) until there are about 4 tasks per
// thread; x rows are split only when even that leaves a thread without a task (each row chunk
// re-packs its W rows). With the packed kernel, x is packed once per call, in parallel.
void gemm(const Ctx& c, const Job& j) {
  const bool packed = c.k.gemm_packed != nullptr;
  const std::int64_t unit = packed ? kGemmWRows : 4, xunit = packed ? kGemmXRows : 1;
  const std::int64_t threads = c.pool.size(), want = 4 * threads;
  std::int64_t nc = std::max<std::int64_t>(unit, kPanelBytes / (4 * j.K) / unit * unit);
  while (nc > unit && (j.N + nc - 1) / nc < want) nc = std::max<std::int64_t>(unit, nc / 2 / unit * unit);
  const std::int64_t nblocks = (j.N + nc - 1) / nc;
  std::int64_t mchunks = std::clamp<std::int64_t>((threads + nblocks - 1) / nblocks, 1, j.M);
  const std::int64_t mrows = ((j.M + mchunks - 1) / mchunks + xunit - 1) / xunit * xunit;
  mchunks = (j.M + mrows - 1) / mrows;
  if (!packed) {
    c.pool.run(nblocks * mchunks, [&](std::int64_t t, int) {
      const std::int64_t nb = t / mchunks, mc = t % mchunks;
      gemm_task_gemv(c.k, j, nb * nc, std::min(j.N, (nb + 1) * nc), mc * mrows, std::min(j.M, (mc + 1) * mrows));
    });
    return;
  }
  float* xp = t_xpack.get(x_pack_floats(j.M, j.K));
  const std::int64_t xblocks = (j.M + kGemmXRows - 1) / kGemmXRows, per = (xblocks + want - 1) / want;
  for_chunks(c.pool, xblocks, per, [&](std::int64_t b0, std::int64_t b1) {
    const std::int64_t m0 = b0 * kGemmXRows, m1 = std::min(j.M, b1 * kGemmXRows);
    c.k.gemm_pack_x(j.x + m0 * j.K, m1 - m0, j.K, j.K, xp + m0 * gemm_steps(j.K) * 32);
  });
  c.pool.run(nblocks * mchunks, [&](std::int64_t t, int) {
    const std::int64_t nb = t / mchunks, mc = t % mchunks;
    gemm_task_packed(c.k, j, xp, nb * nc, std::min(j.N, (nb + 1) * nc), mc * mrows, std::min(j.M, (mc + 1) * mrows));
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

}  // namespace

namespace {
double weight_bytes(DType wt, bool q8) { return q8 ? kQ8BytesPerWeight : wt == DType::f32 ? 4.0 : 2.0; }

// The cost model's path, then the tuner's (when the dispatch is automatic). A q8 Linear reads
// 1.125 bytes per weight and runs the GEMV at the q8 rate.
LinearTuner::Pick linear_pick(const Ctx& c, std::int64_t M, std::int64_t K, std::int64_t N, DType wt, bool q8) {
  HostRates r = c.rates;
  if (q8) r.gemv_flops_per_s = r.gemv_q8_flops_per_s;
  const double wb = weight_bytes(wt, q8);
  const LinearPath predicted = choose_linear(M, K, N, wb, r, c.linear_mode);
  if (!c.tuner || c.linear_mode != LinearMode::automatic) return {predicted, false};
  return c.tuner->pick(M, K, N, wb, predicted);
}
}  // namespace

LinearPath linear_path(const Ctx& c, std::int64_t M, std::int64_t K, std::int64_t N, DType wt, bool q8) {
  return linear_pick(c, M, K, N, wt, q8).path;
}

namespace {
// The Linear's job; W is the q8 copy when there is one (its shape checked against the node's).
Job linear_job(const Node& n, ops::Inputs in, const TensorView& out, const Q8Weight* q8, ops::LinearDims& d) {
  d = ops::check_linear(n, in, out);
  Job j{in[0].as<const float>(), in[1].data, wtype(in[1].dtype), d.bias ? in[2].as<const float>() : nullptr,
        out.as<float>(), d.M, d.K, d.N};
  if (q8) {
    if (q8->N != d.N || q8->K != d.K) ops::fail(n, "q8 weight is [{}, {}], expected [{}, {}]", q8->N, q8->K, d.N, d.K);
    j.W = q8->data.data();
    j.wt = WType::q8;
  }
  return j;
}
}  // namespace

// The best of 3 timed runs of `run` after an untimed warm-up, in seconds.
template <typename F>
double best_seconds(F run) {
  double best = 1e30;
  for (int r = 0; r < 4; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return best;
}

// The GEMM path on one bf16 W of 1024 x 512 (1 MB: from L2/L3 after the warm-up, as a
// prefill's W panels after their first read) with 4 and with 96 x rows, the best of 3 each: the
// extra 92 rows' time gives the flop rate, and what is left of the 4-row time its cost per
// weight whatever the rows (widening W into f32 panels, the tasks).
void measure_gemm(const Ctx& c, HostRates& r) {
  constexpr std::int64_t M1 = 4, M2 = 96, K = 1024, N = 512;
  std::vector<float> x(static_cast<std::size_t>(M2 * K)), y(static_cast<std::size_t>(M2 * N));
  std::vector<std::uint16_t> w(static_cast<std::size_t>(N * K));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::uint16_t>(0x3e00 + i % 5 * 0x40);  // 0.125 .. 0.5
  const auto seconds = [&](std::int64_t M) {
    const Job j{x.data(), w.data(), WType::bf16, nullptr, y.data(), M, K, N};
    return best_seconds([&] { gemm(c, j); });
  };
  const double t1 = seconds(M1), t2 = seconds(M2), kn = static_cast<double>(K * N);
  const double per_row = t2 > t1 ? (t2 - t1) / (M2 - M1) : t2 / M2;  // noise can invert a near tie
  r.gemm_flops_per_s = 2.0 * kn / per_row;
  r.gemm_fixed_s_per_weight = std::max(0.0, t1 - M1 * per_row) / kn;
}

// 48 x 1024 x (128 per thread) with bf16 W: 256 KB of W per thread, in L2 after the warm-up, as
// each chunk of a prefill's W is for every group of 3 x rows after its first pass; best of 3.
// q8: the same shape with q8 W (144 KB per thread).
double measure_gemv_flops(const Ctx& c, bool q8) {
  const std::int64_t M = 48, K = 1024, N = 128 * c.pool.size();
  std::vector<float> x(static_cast<std::size_t>(M * K)), y(static_cast<std::size_t>(M * N));
  std::vector<std::uint16_t> w(static_cast<std::size_t>(N * K));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::uint16_t>(0x3e00 + i % 5 * 0x40);  // 0.125 .. 0.5
  std::vector<unsigned char> wq(static_cast<std::size_t>(N * q8_row_bytes(K)));
  for (std::size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<unsigned char>(i % 64);  // scales tiny, finite
  const Job j{x.data(), q8 ? static_cast<const void*>(wq.data()) : w.data(), q8 ? WType::q8 : WType::bf16, nullptr,
              y.data(), M, K, N};
  return 2.0 * static_cast<double>(M * K * N) / best_seconds([&] { gemv(c, j); });
}

PackedW pack_linear_weight(const Ctx& c, const TensorView& w) {
  PackedW p;
  if (!c.k.gemm_packed || w.shape.rank != 2 || (w.dtype != DType::f32 && w.dtype != DType::bf16) || !w.contiguous() ||
      w.shape[0] == 0 || w.shape[1] == 0)
    return p;
  p.N = w.shape[0];
  p.K = w.shape[1];
  p.k = &c.k;
  float* const panels = p.panels.get(w_pack_floats(p.N, p.K));
  // Blocks of kGemmWRows rows pack independently: a run of them from block b0 is the whole
  // pack's slice from b0 kGemmWRows 32 S floats.
  const std::int64_t blocks = (p.N + kGemmWRows - 1) / kGemmWRows, block_floats = kGemmWRows * gemm_steps(p.K) * 32;
  const std::size_t row_bytes = static_cast<std::size_t>(p.K) * (w.dtype == DType::f32 ? 4 : 2);
  for_chunks(c.pool, blocks, 8, [&](std::int64_t b0, std::int64_t b1) {
    const std::int64_t r0 = b0 * kGemmWRows, r1 = std::min(p.N, b1 * kGemmWRows);
    c.k.gemm_pack_w(static_cast<const char*>(w.data) + static_cast<std::size_t>(r0) * row_bytes, w.dtype == DType::bf16,
                    r1 - r0, p.K, panels + b0 * block_floats);
  });
  return p;
}

void linear(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out, const Q8Weight* q8, const PackedW* packed) {
  ops::LinearDims d;
  Job j = linear_job(n, in, out, q8, d);
  if (packed && !q8 && packed->panels.data() && packed->k == &c.k && packed->N == d.N && packed->K == d.K)
    j.wp = packed->panels.data();
  if (d.M == 0 || d.N == 0) return;
  if (d.K == 0) {
    std::memset(j.y, 0, static_cast<std::size_t>(d.M * d.N) * sizeof(float));
    add_bias(j, 0, d.M, 0, d.N);
    return;
  }
  const LinearTuner::Pick p = linear_pick(c, d.M, d.K, d.N, in[1].dtype, q8 != nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  if (p.path == LinearPath::gemv) gemv(c, j);
  else gemm(c, j);
  if (!p.timed) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double wb = weight_bytes(in[1].dtype, q8 != nullptr);
  if (c.tuner->record(d.M, d.K, d.N, wb, p.path, s)) {
    const auto [gemv_s, gemm_s] = c.tuner->best(d.M, d.K, d.N, wb);
    spdlog::debug("backend threaded: Linear {} x {} x {} (rows class {}): gemv {:.3f} ms, gemm {:.3f} ms, best of up to {}: {}",
                  d.M, d.K, d.N, LinearTuner::row_class(d.M), gemv_s * 1e3, gemm_s * 1e3, LinearTuner::kTrials,
                  gemm_s < gemv_s ? "gemm" : "gemv");
  }
}

void linear_siblings(const Ctx& c, std::span<const Node* const> nodes, std::span<const ops::Inputs> in,
                     std::span<const TensorView> outs, std::span<const Q8Weight* const> q8) {
  std::vector<Job> jobs;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    ops::LinearDims d;
    const Job j = linear_job(*nodes[i], in[i], outs[i], q8[i], d);
    // A Linear whose time the tuner wants runs alone, timed.
    const LinearTuner::Pick p = linear_pick(c, d.M, d.K, d.N, in[i][1].dtype, q8[i] != nullptr);
    if (d.K == 0 || d.M == 0 || d.N == 0 || p.path == LinearPath::gemm || p.timed)
      linear(c, *nodes[i], in[i], outs[i], q8[i]);
    else
      jobs.push_back(j);
  }
  if (!jobs.empty()) gemvs(c, jobs);
}

}  // namespace sonde::threaded
