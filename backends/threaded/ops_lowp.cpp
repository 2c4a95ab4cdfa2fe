// Linear in the --compute bf16 and int8 modes (<sonde/compute.h>): x rounded to bf16 or quantised
// to int8 blocks once per call (rows on the pool), then the mode's kernel (lowp.h) over blocks of
// W rows on the pool. Every output is one kernel call's and its sum depends on K alone, so a row's
// result does not depend on the other rows, the thread count or the split.
#include "ops_lowp.h"

#include <sonde/compute.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace sonde::threaded {

namespace {

constexpr std::int64_t kLowpMinRows = 32;  // W rows per task at least
constexpr std::int64_t kLowpPackedFromRows = 64;  // lowp_tiles.h's kLowpBatchRows: its chunked tiles beyond

// Tasks of W rows: about 4 per thread, at least kLowpMinRows rows, a multiple of 32 for AMX (its
// packed blocks) and of 16 otherwise: with 32, N = 896 (qwen2.5-0.5b's q and o) made 7 tasks
// of 128 rows, 4 on one thread of 2 and 3 on the other.
void for_w_rows(ThreadPool& pool, std::int64_t N, bool packed, const std::function<void(std::int64_t, std::int64_t)>& fn) {
  const std::int64_t want = 4 * static_cast<std::int64_t>(pool.size()), align = packed ? 32 : 16;
  const std::int64_t rows = std::max(kLowpMinRows, ((N + want - 1) / want + align - 1) / align * align);
  for_chunks(pool, N, rows, fn);
}

void add_bias_rows(const float* bias, float* y, std::int64_t M, std::int64_t N) {
  if (!bias) return;
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

// Scratch for the rounded or quantised x rows, kept per thread (run() calls come from one
// thread at a time per backend; the buffers only grow).
struct LowpScratch {
  std::vector<std::uint16_t> bf16;
  std::vector<std::uint32_t> xpack;  // the packed GEMM's x (only grows; every call writes what it reads)
  std::vector<std::int8_t> q;
  std::vector<float> s;
};
LowpScratch& scratch() {
  thread_local LowpScratch s;
  return s;
}

// The bf16 path of an M x K x N Linear on a table with the packed GEMM: "gemm" is that kernel,
// "gemv" the table's tiles (lowp_tiles.h). Both give the same bits, so the choice is one of time:
// SONDE_THREADED_LINEAR=gemv|gemm forces one; the cost model's HostRates describe the f32 kernels,
// so the prediction here is the tiles up to kLowpBatchRows' 64 rows (decode and batch steps,
// where W is streamed once and the tiles keep up with memory) and the packed GEMM beyond; in the
// automatic mode the tuner (linear_tuner.h) then times both on the first calls of each shape
// class and keeps the faster. Its keys cannot meet the f32 dispatch's: in a bf16-compute backend
// every Linear comes here.
LinearTuner::Pick lowp_pick(const Ctx& c, std::int64_t M, std::int64_t K, std::int64_t N) {
  if (c.linear_mode == LinearMode::gemv) return {LinearPath::gemv, false};
  if (c.linear_mode == LinearMode::gemm) return {LinearPath::gemm, false};
  const LinearPath predicted = M > kLowpPackedFromRows ? LinearPath::gemm : LinearPath::gemv;
  if (!c.tuner || c.linear_mode != LinearMode::automatic) return {predicted, false};
  return c.tuner->pick(M, K, N, 2.0, predicted);
}

// The packed GEMM: x (rounded rows, ldx apart) packed once, on the pool; then tasks of W rows, a
// multiple of the kernel's 48-row tile, about 4 per thread (each packs its own rows of W).
void gemm_bf16_packed(const Ctx& c, const std::uint16_t* xb, std::int64_t M, std::int64_t ldx, const std::uint16_t* wb,
                      std::int64_t K, std::int64_t N, float* y, LowpScratch& s) {
  const std::int64_t need = lowp_gemm_x_elems(M, K);
  if (static_cast<std::int64_t>(s.xpack.size()) < need) s.xpack.resize(static_cast<std::size_t>(need));
  std::uint32_t* xp = s.xpack.data();
  const std::int64_t per = 2 * kLowpGemmXRows, row_elems = ((K + 31) / 32) * 16;  // pairs of blocks
  for_chunks(c.pool, M, std::max(per, (M / (4 * c.pool.size()) + per - 1) / per * per), [&](std::int64_t m0, std::int64_t m1) {
    c.lowp->pack_x_bf16(xb + m0 * ldx, m1 - m0, ldx, K, xp + m0 * row_elems);
  });
  const std::int64_t want = 4 * static_cast<std::int64_t>(c.pool.size());
  const std::int64_t rows = std::max(kLowpGemmWRows, ((N + want - 1) / want + kLowpGemmWRows - 1) / kLowpGemmWRows * kLowpGemmWRows);
  for_chunks(c.pool, N, rows, [&](std::int64_t n0, std::int64_t n1) {
    c.lowp->gemm_bf16_packed(xp, M, wb, K, n0, n1, y, N);
  });
}

}  // namespace

void linear_lowp(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out, const LowpWeight& w) {
  const ops::LinearDims d = ops::check_linear(n, in, out);
  const float* x = in[0].as<const float>();
  const float* bias = d.bias ? in[2].as<const float>() : nullptr;
  float* y = out.as<float>();
  if (d.M == 0 || d.N == 0) return;
  if (d.K == 0) {
    std::memset(y, 0, static_cast<std::size_t>(d.M * d.N) * sizeof(float));
    return add_bias_rows(bias, y, d.M, d.N);
  }
  LowpScratch& s = scratch();
  const bool int8 = w.q8 || !w.own_q8.data.empty();
  if (!int8) {
    const std::uint16_t* wb = w.bf16 ? w.bf16 : w.own_bf16.data();
    // x rows as bf16 bits, zero from K to a multiple of 32 (the kernels load whole steps) and,
    // for AMX (packed W), from M to a multiple of 16 rows (it loads whole tiles; padding a decode
    // row to 16 for the others would zero 15 rows per call for nothing).
    const std::int64_t ldx = (d.K + 31) / 32 * 32, rows = c.lowp->pack_bf16 ? (d.M + 15) / 16 * 16 : d.M;
    s.bf16.assign(static_cast<std::size_t>(rows * ldx), 0);
    for_chunks(c.pool, d.M, 8, [&](std::int64_t m0, std::int64_t m1) {
      for (std::int64_t m = m0; m < m1; ++m) {
        std::uint16_t* row = s.bf16.data() + m * ldx;
        if (c.lowp->round_bf16) {
          c.lowp->round_bf16(x + m * d.K, d.K, row);
          continue;
        }
        for (std::int64_t k = 0; k < d.K; ++k) row[k] = compute_bf16_bits(x[m * d.K + k]);
      }
    });
    const LinearTuner::Pick p = c.lowp->gemm_bf16_packed ? lowp_pick(c, d.M, d.K, d.N) : LinearTuner::Pick{LinearPath::gemv, false};
    const auto t0 = std::chrono::steady_clock::now();
    if (p.path == LinearPath::gemm) {
      gemm_bf16_packed(c, s.bf16.data(), d.M, ldx, wb, d.K, d.N, y, s);
    } else {
      for_w_rows(c.pool, d.N, c.lowp->pack_bf16 != nullptr, [&](std::int64_t n0, std::int64_t n1) {
        c.lowp->gemm_bf16(s.bf16.data(), d.M, ldx, wb, d.K, n0, n1, y, d.N);
      });
    }
    if (p.timed) {
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (c.tuner->record(d.M, d.K, d.N, 2.0, p.path, sec)) {
        const auto [tiles_s, gemm_s] = c.tuner->best(d.M, d.K, d.N, 2.0);
        spdlog::debug("backend threaded: bf16 Linear {} x {} x {} (rows class {}): tiles {:.3f} ms, packed gemm {:.3f} ms: {}",
                      d.M, d.K, d.N, LinearTuner::row_class(d.M), tiles_s * 1e3, gemm_s * 1e3, gemm_s < tiles_s ? "gemm" : "tiles");
      }
    }
  } else {
    // x rows as int8 blocks and scales, zero up to an even number of blocks.
    const std::int64_t blocks = (d.K + kComputeBlock - 1) / kComputeBlock, lds = (blocks + 1) / 2 * 2;
    const std::int64_t ldq = lds * kComputeBlock;
    s.q.assign(static_cast<std::size_t>(d.M * ldq), 0);
    s.s.assign(static_cast<std::size_t>(d.M * lds), 0.0f);
    for_chunks(c.pool, d.M, 8, [&](std::int64_t m0, std::int64_t m1) {
      for (std::int64_t m = m0; m < m1; ++m)
        for (std::int64_t b = 0; b < blocks; ++b)
          s.s[static_cast<std::size_t>(m * lds + b)] =
              quantise_block(x + m * d.K + b * kComputeBlock, std::min(kComputeBlock, d.K - b * kComputeBlock),
                             s.q.data() + m * ldq + b * kComputeBlock);
    });
    const unsigned char* wq = (w.q8 ? w.q8 : &w.own_q8)->data.data();
    for_w_rows(c.pool, d.N, c.lowp->pack_bf16 != nullptr, [&](std::int64_t n0, std::int64_t n1) {
      c.lowp->gemm_i8(s.q.data(), s.s.data(), d.M, ldq, lds, wq, d.K, n0, n1, y, d.N);
    });
  }
  add_bias_rows(bias, y, d.M, d.N);
}

}  // namespace sonde::threaded
