#pragma once
// The threaded backend's op drivers: shape checks from op_checks.h, the work split into tasks
// on the pool, the arithmetic in the selected ISA's kernels. Inputs are dense; activations are
// f32 (the backend widens others first); Linear weights and the embedding table may be
// f32/f16/bf16 views used in place.
#include "kernels.h"
#include <sonde/op_checks.h>
#include "q8.h"
#include "thread_pool.h"

namespace sonde::threaded {

struct Ctx {
  ThreadPool& pool;
  const Kernels& k;
};

// Runs fn(lo, hi) over [0, n) in chunks of `chunk` on the pool.
template <typename Fn> void for_chunks(ThreadPool& pool, std::int64_t n, std::int64_t chunk, const Fn& fn) {
  const std::int64_t tasks = (n + chunk - 1) / chunk;
  pool.run(tasks, [&](std::int64_t t, int) { fn(t * chunk, std::min(n, (t + 1) * chunk)); });
}

void embedding(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void rms_norm(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
// Below this many x rows a Linear streams W from memory once (GEMV, x rows in groups of 3 against
// 256 KB chunks of W); from it on, GEMM. Measured on qwen2.5-0.5b bf16 prefill, 2 threads, the
// two paths alternating: GEMV ahead by 15-25% at 192-384 tokens, 4% at 512, GEMM 4% ahead at
// 1024, even at 2048.
constexpr std::int64_t kGemmMinRows = 512;
void linear(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out, const Q8Weight* q8);
// Linears that read one x: those with weights read natively and fewer than kGemmMinRows x rows
// split the rows of all their weights into one set of tasks (one parallel region), and so do
// those with q8 weights (q8[i], else null) and one x row, which also quantise x once. The
// results are those of linear() on each; the rest run one by one.
void linear_siblings(const Ctx& c, std::span<const Node* const> nodes, std::span<const ops::Inputs> in,
                     std::span<const TensorView> outs, std::span<const Q8Weight* const> q8);
void rope(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void attention(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void add(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void silu_mul(const Ctx& c, const Node& n, ops::Inputs in, const TensorView& out);
void copy_op(const Node& n, ops::Inputs in, const TensorView& out);  // Reshape and Concat (bytes)

}  // namespace sonde::threaded
