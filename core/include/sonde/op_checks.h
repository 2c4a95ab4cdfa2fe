#pragma once
// The op contract: shape and dtype checks every backend runs before its kernel (header-only, beside
// the op list in graph.h, so no backend includes another's sources).
// Each check_* validates a node's inputs and output buffer against the op's contract in graph.h
// and returns the dimensions the kernel needs. Every failure is a sonde::Error naming the node.
#include <sonde/error.h>
#include <sonde/graph.h>
#include <sonde/tensor.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sonde::ops {

using Inputs = std::span<const TensorView>;

template <typename... Args>
[[noreturn]] void fail(const Node& n, fmt::format_string<Args...> f, Args&&... args) {
  runtime_error("node '{}' ({}): {}", n.name(), op_name(n.op), fmt::format(f, std::forward<Args>(args)...));
}

inline bool is_float16_32(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

inline void expect_arity(const Node& n, Inputs in, std::size_t lo, std::size_t hi) {
  if (in.size() < lo || in.size() > hi) fail(n, "got {} inputs, expected {} to {}", in.size(), lo, hi);
}

inline void expect_rank(const Node& n, const TensorView& v, const char* what, int rank) {
  if (v.shape.rank != rank) fail(n, "{} has shape {}, expected rank {}", what, v.shape.str(), rank);
}

inline void expect_dtype(const Node& n, const TensorView& v, const char* what, DType t) {
  if (v.dtype != t) fail(n, "{} has dtype {}, expected {}", what, dtype_name(v.dtype), dtype_name(t));
}

inline void expect_float(const Node& n, const TensorView& v, const char* what) {
  if (!is_float16_32(v.dtype)) fail(n, "{} has dtype {}, expected f32, f16 or bf16", what, dtype_name(v.dtype));
}

inline void expect_dim(const Node& n, const char* what, std::int64_t got, std::int64_t want) {
  if (got != want) fail(n, "{} is {}, expected {}", what, got, want);
}

inline void expect_out(const Node& n, const TensorView& out, const Shape& s, DType t) {
  if (out.shape != s || out.dtype != t)
    fail(n, "output buffer is {} {}, expected {} {}", dtype_name(out.dtype), out.shape.str(), dtype_name(t), s.str());
  if (!out.contiguous()) fail(n, "output buffer {} is not contiguous", out.shape.str());
}

// Embedding: table[V,H] float, ids[B,T] i32 -> out[B,T,H] f32. Ids are range-checked by the kernel.
struct EmbeddingDims { std::int64_t V, H, rows; };
inline EmbeddingDims check_embedding(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 2, 2);
  expect_rank(n, in[0], "table", 2);
  expect_float(n, in[0], "table");
  expect_dtype(n, in[1], "ids", DType::i32);
  expect_rank(n, in[1], "ids", 2);
  const std::int64_t V = in[0].shape[0], H = in[0].shape[1];
  expect_out(n, out, Shape{in[1].shape[0], in[1].shape[1], H}, DType::f32);
  return {V, H, in[1].numel()};
}

// RmsNorm: x[...,H], w[H] -> [...,H].
struct RowDims { std::int64_t rows, H; };
inline RowDims check_rms_norm(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 2, 2);
  expect_float(n, in[0], "x");
  expect_float(n, in[1], "w");
  expect_rank(n, in[1], "w", 1);
  if (in[0].shape.rank < 1) fail(n, "x is a scalar");
  expect_dim(n, "w length", in[1].shape[0], in[0].shape.last());
  expect_out(n, out, in[0].shape, DType::f32);
  return {in[0].shape.rows(), in[0].shape.last()};
}

// Linear: x[...,K], W[N,K] [, b[N]] -> [...,N].
struct LinearDims { std::int64_t M, K, N; bool bias; };
inline LinearDims check_linear(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 2, 3);
  expect_float(n, in[0], "x");
  expect_float(n, in[1], "W");
  expect_rank(n, in[1], "W", 2);
  if (in[0].shape.rank < 1) fail(n, "x is a scalar");
  const std::int64_t N = in[1].shape[0], K = in[1].shape[1];
  if (in[0].shape.last() != K) fail(n, "x {} does not match W {} (last dim must be {})", in[0].shape.str(), in[1].shape.str(), K);
  if (in.size() == 3) {
    expect_float(n, in[2], "bias");
    if (in[2].shape != Shape{N}) fail(n, "bias has shape {}, expected [{}]", in[2].shape.str(), N);
  }
  Shape s = in[0].shape;
  s[s.rank - 1] = N;
  expect_out(n, out, s, DType::f32);
  return {in[0].shape.rows(), K, N, in.size() == 3};
}

// Reshape: same elements and dtype, new shape.
inline void check_reshape(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 1, 1);
  if (out.numel() != in[0].numel() || out.dtype != in[0].dtype)
    fail(n, "output {} {} does not hold input {} {}", dtype_name(out.dtype), out.shape.str(), dtype_name(in[0].dtype),
         in[0].shape.str());
  if (!out.contiguous()) fail(n, "output buffer {} is not contiguous", out.shape.str());
}

// Rope: x[B,T,h,d] (d even), pos[B,T] i32 -> [B,T,h,d].
struct RopeDims { std::int64_t B, T, h, d; };
inline RopeDims check_rope(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 2, 2);
  expect_float(n, in[0], "x");
  expect_rank(n, in[0], "x", 4);
  expect_dtype(n, in[1], "positions", DType::i32);
  const Shape& x = in[0].shape;
  if (in[1].shape != Shape{x[0], x[1]}) fail(n, "positions {} do not match x {}", in[1].shape.str(), x.str());
  if (x[3] % 2 != 0) fail(n, "head dim {} is odd", x[3]);
  if (!(n.params.theta > 0)) fail(n, "theta is {}", n.params.theta);
  expect_out(n, out, x, DType::f32);
  return {x[0], x[1], x[2], x[3]};
}

// Attention: q[B,T,nh,d], k/v[B,S,nkv,d], mask[B,S] u8 -> [B,T,nh,d]; T <= S, nkv divides nh.
struct AttnDims { std::int64_t B, T, S, nh, nkv, d; bool mask; };
inline AttnDims check_attention(const Node& n, Inputs in, const TensorView& out, bool pattern = false) {
  expect_arity(n, in, 3, 4);
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    expect_float(n, in[i], names[i]);
    expect_rank(n, in[i], names[i], 4);
  }
  const Shape &q = in[0].shape, &k = in[1].shape;
  if (in[2].shape != k) fail(n, "v {} does not match k {}", in[2].shape.str(), k.str());
  if (k[0] != q[0] || k[3] != q[3]) fail(n, "k {} does not match q {} (batch, head dim)", k.str(), q.str());
  if (n.params.kv_group > 0) {
    const auto& p = n.params;
    const std::int64_t first = p.q_head0 / p.kv_group - p.kv_head0, last = (p.q_head0 + q[2] - 1) / p.kv_group - p.kv_head0;
    if (q[2] < 1 || first < 0 || last >= k[2])
      fail(n, "query heads {}..{} in groups of {} need kv heads {}..{}, but {} from kv head {} are given", p.q_head0,
           p.q_head0 + q[2] - 1, p.kv_group, first + p.kv_head0, last + p.kv_head0, k[2], p.kv_head0);
  } else if (k[2] < 1 || q[2] % k[2] != 0) {
    fail(n, "{} query heads are not a multiple of {} kv heads", q[2], k[2]);
  }
  if (q[1] > k[1]) fail(n, "{} queries exceed {} keys", q[1], k[1]);
  if (in.size() == 4) {
    expect_dtype(n, in[3], "mask", DType::u8);
    if (in[3].shape != Shape{q[0], k[1]}) fail(n, "mask {} does not match [{}, {}]", in[3].shape.str(), q[0], k[1]);
  }
  // AttentionPattern (same inputs) writes the probabilities instead: [B,T,nh,S].
  expect_out(n, out, pattern ? Shape{q[0], q[1], q[2], k[1]} : q, DType::f32);
  return {q[0], q[1], k[1], q[2], k[2], q[3], in.size() == 4};
}

// The local kv head query head h reads (OpParams::kv_group; else HF's repeat_kv groups).
inline std::int64_t kv_head_of(const Node& n, const AttnDims& d, std::int64_t h) {
  const auto& p = n.params;
  return p.kv_group > 0 ? (p.q_head0 + h) / p.kv_group - p.kv_head0 : h / (d.nh / d.nkv);
}

// Whether an Attention node's head mapping is the usual contiguous groups (what the optimised
// kernels compute), given its shapes' head counts.
inline bool usual_kv_groups(const OpParams& p, std::int64_t nh, std::int64_t nkv) {
  if (p.kv_group <= 0) return true;
  if (nkv < 1 || nh % nkv != 0) return false;
  for (std::int64_t h = 0; h < nh; ++h)
    if ((p.q_head0 + h) / p.kv_group - p.kv_head0 != h / (nh / nkv)) return false;
  return true;
}

// AllReduceSum: x f32 -> the same shape. AllGather: x f32 -> x's shape with params.gathered
// along params.axis (graph.h).
inline void check_all_reduce(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 1, 1);
  expect_dtype(n, in[0], "x", DType::f32);
  expect_out(n, out, in[0].shape, DType::f32);
}
struct GatherDims { std::int64_t outer, inner, axis_len, keep_begin, keep_end; };
inline GatherDims check_all_gather(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 1, 1);
  expect_dtype(n, in[0], "x", DType::f32);
  const Shape& x = in[0].shape;
  const int a = n.params.axis;
  if (a < 0 || a >= x.rank) fail(n, "axis {} of x {}", a, x.str());
  const std::int64_t end = n.params.keep_end < 0 ? x[a] : n.params.keep_end;
  if (n.params.keep_begin < 0 || n.params.keep_begin > end || end > x[a])
    fail(n, "kept range {}..{} of axis {} of x {}", n.params.keep_begin, end, a, x.str());
  Shape gathered = x;
  gathered[a] = n.params.gathered;
  expect_out(n, out, gathered, DType::f32);
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < a; ++i) outer *= x[i];
  for (int i = a + 1; i < x.rank; ++i) inner *= x[i];
  return {outer, inner, x[a], n.params.keep_begin, end};
}

// Add, SiluMul: two equal shapes -> the same shape.
inline std::int64_t check_binary(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 2, 2);
  expect_float(n, in[0], "a");
  expect_float(n, in[1], "b");
  if (in[0].shape != in[1].shape) fail(n, "operand shapes differ: {} vs {}", in[0].shape.str(), in[1].shape.str());
  expect_out(n, out, in[0].shape, DType::f32);
  return in[0].numel();
}

// Dense once the outer index is fixed: the rows of a batch may lie apart (a KV cache's rows are
// `capacity` slots apart), each row itself dense.
inline bool rows_dense(const TensorView& v) {
  TensorView row = v;
  if (row.shape.rank > 0) row.shape[0] = 1;
  return row.contiguous();
}

// Concat along dim 1: returns {outer = B, a_block = P*inner, b_block = T*inner} in elements. Its
// output, like its inputs, need only be dense within each outer index: a batch's keys are written
// into the KV cache in place (Executor::run's placed outputs), row o at out.strides[0] * o.
struct ConcatBlocks {
  std::int64_t outer, a_block, b_block;
};
inline ConcatBlocks check_concat(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 2, 2);
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  bool ok = a.rank == b.rank && a.rank >= 2 && in[0].dtype == in[1].dtype && out.dtype == in[0].dtype;
  for (int i = 0; ok && i < a.rank; ++i) ok = i == 1 || a[i] == b[i];
  if (!ok) fail(n, "concat needs equal dtypes and shapes except dim 1: {} and {}", a.str(), b.str());
  Shape o = a;
  o[1] = a[1] + b[1];
  if (out.shape != o || out.dtype != in[0].dtype)
    fail(n, "output buffer is {} {}, expected {} {}", dtype_name(out.dtype), out.shape.str(), dtype_name(in[0].dtype), o.str());
  if (!rows_dense(out)) fail(n, "output buffer {} is not dense within each row", out.shape.str());
  std::int64_t inner = 1;
  for (int i = 2; i < a.rank; ++i) inner *= a[i];
  return {a[0], a[1] * inner, b[1] * inner};
}

// SliceRows: x[B,T,...] -> rows [row_begin, row_end) of dim 1. Returns {outer = B, in_block =
// T*inner, first = row_begin*inner, count = (row_end - row_begin)*inner} in elements.
struct SliceBlocks {
  std::int64_t outer, in_block, first, count;
};
inline SliceBlocks check_slice_rows(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 1, 1);
  const Shape& x = in[0].shape;
  const std::int64_t b = n.params.row_begin, e = n.params.row_end;
  if (x.rank < 2 || b < 0 || b > e || e > x[1]) fail(n, "rows {}..{} are not within dim 1 of {}", b, e, x.str());
  Shape o = x;
  o[1] = e - b;
  expect_out(n, out, o, in[0].dtype);
  std::int64_t inner = 1;
  for (int i = 2; i < x.rank; ++i) inner *= x[i];
  return {x[0], x[1] * inner, b * inner, (e - b) * inner};
}

// Edit*: x[B,T,*row] as [B,T,G,E], sel[B,T,G] u8, operand [G,E] (or [B,T,G,E] to replace).
struct EditDims { std::int64_t rows, G, E; bool operand, per_row; };
inline EditDims check_edit(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, n.op == OpKind::EditProject || n.op == OpKind::EditReplace ? 3 : 2, 3);
  expect_float(n, in[0], "x");
  expect_dtype(n, in[1], "selection", DType::u8);
  const Shape& x = in[0].shape;
  if (x.rank < 3) fail(n, "x {} is not [B,T,*row]", x.str());
  const std::int64_t rows = x[0] * x[1], G = n.params.edit_groups;
  const std::int64_t row = rows ? x.numel() / rows : 0;
  if (G < 1 || row % G != 0) fail(n, "a row of {} does not split into {} groups", row, G);
  if (in[1].shape != Shape{x[0], x[1], G}) fail(n, "selection {} is not [{}, {}, {}]", in[1].shape.str(), x[0], x[1], G);
  EditDims d{rows, G, row / G, in.size() == 3, false};
  if (d.operand) {
    expect_float(n, in[2], "operand");
    d.per_row = n.op == OpKind::EditReplace && in[2].shape.rank == 4;
    if (in[2].numel() != (d.per_row ? rows * row : row)) fail(n, "operand {} does not match x {}", in[2].shape.str(), x.str());
  }
  expect_out(n, out, x, DType::f32);
  return d;
}

// SaeActivation: pre[...,N] [, threshold[N] (jumprelu) | gate[...,N] (gated)] -> [...,N].
struct SaeActDims { std::int64_t rows, N, k; };
inline SaeActDims check_sae_activation(const Node& n, Inputs in, const TensorView& out) {
  const SaeAct a = n.params.sae_act;
  const bool two = a == SaeAct::JumpRelu || a == SaeAct::Gated;
  expect_arity(n, in, two ? 2 : 1, two ? 2 : 1);
  expect_float(n, in[0], "pre");
  const Shape& p = in[0].shape;
  if (p.rank < 1) fail(n, "pre is a scalar");
  if (a == SaeAct::JumpRelu && in[1].shape != Shape{p.last()})
    fail(n, "threshold {} is not [{}]", in[1].shape.str(), p.last());
  if (a == SaeAct::Gated && in[1].shape != p) fail(n, "gate {} is not pre's {}", in[1].shape.str(), p.str());
  if (two) expect_float(n, in[1], a == SaeAct::Gated ? "gate" : "threshold");
  if (a == SaeAct::TopK && (n.params.sae_k < 1 || n.params.sae_k > p.last()))
    fail(n, "k = {} is outside 1..{}", n.params.sae_k, p.last());
  expect_out(n, out, p, DType::f32);
  return {p.rows(), p.last(), n.params.sae_k};
}

// NormRescale: x[...,E], ref[...,F] (same rows) -> x * (|ref| / sqrt(F))^power.
struct NormRescaleDims { std::int64_t rows, E, F; };
inline NormRescaleDims check_norm_rescale(const Node& n, Inputs in, const TensorView& out) {
  expect_arity(n, in, 2, 2);
  expect_float(n, in[0], "x");
  expect_float(n, in[1], "ref");
  if (in[0].shape.rank < 1 || in[1].shape.rank < 1) fail(n, "x or ref is a scalar");
  if (in[0].shape.rows() != in[1].shape.rows()) fail(n, "x {} and ref {} differ in rows", in[0].shape.str(), in[1].shape.str());
  if (n.params.norm_power != 1 && n.params.norm_power != -1) fail(n, "power {} is not +1 or -1", n.params.norm_power);
  expect_out(n, out, in[0].shape, DType::f32);
  return {in[0].shape.rows(), in[0].shape.last(), in[1].shape.last()};
}

// Key slot u is visible to query t (at key slot qs = t + S - T) iff causal order allows it and
// both slots are real tokens: Dream's pairwise mask m[q] & m[k], Qwen2's key mask plus u <= qs.
inline bool allowed(bool causal, const std::uint8_t* mask, std::int64_t qs, std::int64_t u) {
  if (causal && u > qs) return false;
  return !mask || (mask[u] && mask[qs]);
}

// Whether a backend whose float inputs must satisfy `float_ok` runs this node. Outputs are f32,
// except Reshape, which keeps its input's dtype.
inline bool supports_with(const Node& n, std::span<const DType> t, bool (*float_ok)(DType)) {
  const auto fl = [&](std::size_t i) { return float_ok(t[i]); };
  const auto f32_out = n.dtype == DType::f32;
  switch (n.op) {
    case OpKind::Embedding: return t.size() == 2 && fl(0) && t[1] == DType::i32 && f32_out;
    case OpKind::RmsNorm: return t.size() == 2 && fl(0) && fl(1) && f32_out;
    case OpKind::Linear: return (t.size() == 2 || t.size() == 3) && fl(0) && fl(1) && (t.size() == 2 || fl(2)) && f32_out;
    case OpKind::Reshape: return t.size() == 1 && n.dtype == t[0];
    case OpKind::Rope: return t.size() == 2 && fl(0) && t[1] == DType::i32 && f32_out;
    case OpKind::Attention:
      // A sharded head mapping is computed by the reference kernel (and the sharded backend,
      // which splits it into usual groups); the optimised kernels assume contiguous groups.
      if (n.params.kv_group > 0) return false;
      return (t.size() == 3 || t.size() == 4) && fl(0) && fl(1) && fl(2) && (t.size() == 3 || t[3] == DType::u8) && f32_out;
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::NormRescale:
    case OpKind::SiluMul: return t.size() == 2 && fl(0) && fl(1) && f32_out;
    case OpKind::SaeActivation: return (t.size() == 1 || t.size() == 2) && fl(0) && (t.size() == 1 || fl(1)) && f32_out;
    case OpKind::Concat: return t.size() == 2 && t[0] == t[1] && n.dtype == t[0];
    case OpKind::SliceRows: return t.size() == 1 && n.dtype == t[0];
    case OpKind::EditAffine:
    case OpKind::EditReplace:
    case OpKind::EditProject:
      return (t.size() == 2 || t.size() == 3) && fl(0) && t[1] == DType::u8 && (t.size() == 2 || fl(2)) && f32_out;
    default: return false;
  }
}

// Kernels index inputs as dense row-major arrays; a strided view (rare) is copied first.
class DenseInputs {
 public:
  explicit DenseInputs(Inputs in) {
    copies_.reserve(in.size());
    for (const auto& v : in) {
      if (v.contiguous()) {
        views_.push_back(v);
      } else {
        copies_.push_back(Tensor::copy_of(v));
        views_.push_back(copies_.back().view());
      }
    }
  }
  Inputs views() const { return views_; }

 private:
  std::vector<Tensor> copies_;
  std::vector<TensorView> views_;
};

}  // namespace sonde::ops
