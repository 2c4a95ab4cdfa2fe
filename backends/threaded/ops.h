#pragma once
// The threaded backend's op drivers: shape checks from op_checks.h, the work split into tasks
// on the pool, the arithmetic in the selected ISA's kernels. Inputs are dense; activations are
// f32 (the backend widens others first); Linear weights and the embedding table may be
// f32/f16/bf16 views used in place.
#include "aligned_floats.h"
#include "kernels.h"
#include "lowp.h"
#include "linear_dispatch.h"
#include "linear_tuner.h"
#include <sonde/op_checks.h>
#include "q8.h"
#include "thread_pool.h"

namespace sonde::threaded {

struct Ctx {
  ThreadPool& pool;
  const Kernels& k;
  LinearMode linear_mode = LinearMode::automatic;
  HostRates rates{};  // unknown (zero): every native Linear takes the GEMV path
  const LowpKernels* lowp = nullptr;  // --compute bf16/int8: the mode's kernels (ops_lowp.h); f32: null
  LinearTuner* tuner = nullptr;       // the automatic dispatch's timings (linear_tuner.h); null: the model alone
};

// Runs fn(lo, hi) over [0, n) in chunks of `chunk` on the pool.
template <typename Fn> void for_chunks(ThreadPool& pool, std::int64_t n, std::int64_t chunk, const Fn& fn) {
  const std::int64_t tasks = (n + chunk - 1) / chunk;
  pool.run(tasks, [&](std::int64_t t, int) { fn(t * chunk, std::min(n, (t + 1) * chunk)); });
}

void embedding(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void rms_norm(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
// The path (linear_dispatch.h, linear_tuner.h) the next Linear of this shape takes, M x K x N, W of
// dtype wt or its q8 copy.
LinearPath linear_path(const Ctx& c, std::int64_t M, std::int64_t K, std::int64_t N, DType wt, bool q8);
// Times the GEMM path on a synthetic in-cache problem with this pool at two row counts: sets
// HostRates' gemm_flops_per_s and gemm_fixed_s_per_weight.
void measure_gemm(const Ctx& c, HostRates& r);
// Times the GEMV kernel on L2-resident bf16 (or q8) W chunks (groups of 3 x rows) with this pool (for HostRates).
double measure_gemv_flops(const Ctx& c, bool q8);
// A Linear weight's rows packed once for the packed GEMM (kernels.h gemm_pack_w's layout, whole
// 48-row blocks end to end), kept for a weight hinted WeightHint::KeepPacked: the GEMM path then
// reads these panels instead of packing its rows in every call. k: the kernels that made it (only
// theirs read this layout).
struct PackedW {
  AlignedFloats panels;
  std::int64_t N = 0, K = 0;
  const Kernels* k = nullptr;
};
// Empty (panels.data() null) when c's kernels have no packed GEMM or w is not a dense 2-D f32/bf16 matrix.
PackedW pack_linear_weight(const Ctx& c, const TensorView& w);
// packed: w's panels (pack_linear_weight with c's kernels) or null: the GEMM path packs per call.
// Same bits either way.
void linear(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out, const Q8Weight* q8,
            const PackedW* packed = nullptr);
// Linears that read one x: those that take the GEMV path, native or q8 (q8[i], else null), split
// the rows of all their weights into one set of tasks (one parallel region). The results are
// those of linear() on each; the rest run one by one.
void linear_siblings(const Ctx& c, std::span<const Node* const> nodes, std::span<const ops::Inputs> in,
                     std::span<const TensorView> outs, std::span<const Q8Weight* const> q8);
void rope(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void attention(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void add(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void silu_mul(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void sae_activation(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);  // SaeActivation, rows split
void copy_op(const Node& n, ops::Inputs in, const TensorView& out);  // Reshape, Concat, SliceRows (bytes)

}  // namespace sonde::threaded
