#include <sonde/error.h>
#include <sonde/graph.h>

#include <algorithm>

namespace sonde {

std::string_view op_name(OpKind op) {
  switch (op) {
    case OpKind::Input: return "Input";
    case OpKind::Weight: return "Weight";
    case OpKind::Embedding: return "Embedding";
    case OpKind::RmsNorm: return "RmsNorm";
    case OpKind::Linear: return "Linear";
    case OpKind::Reshape: return "Reshape";
    case OpKind::Rope: return "Rope";
    case OpKind::Attention: return "Attention";
    case OpKind::Add: return "Add";
    case OpKind::SiluMul: return "SiluMul";
    case OpKind::AttentionPattern: return "AttentionPattern";
    case OpKind::Concat: return "Concat";
    case OpKind::EditAffine: return "EditAffine";
    case OpKind::EditReplace: return "EditReplace";
    case OpKind::EditProject: return "EditProject";
    case OpKind::EditHost: return "EditHost";
    case OpKind::AllReduceSum: return "AllReduceSum";
    case OpKind::AllGather: return "AllGather";
    case OpKind::SliceRows: return "SliceRows";
    case OpKind::SaeActivation: return "SaeActivation";
    case OpKind::NormRescale: return "NormRescale";
    case OpKind::Sub: return "Sub";
    case OpKind::Count: break;
  }
  return "?";
}

const std::string& Node::name() const {
  static const std::string unnamed = "(unnamed)";
  return names.empty() ? unnamed : names.front();
}

std::optional<int> Graph::find(std::string_view name) const {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (const auto& n : nodes[i].names)
      if (n == name) return static_cast<int>(i);
  return std::nullopt;
}

std::optional<int> Graph::output(std::string_view name) const {
  for (const auto& [n, id] : outputs)
    if (n == name) return id;
  return std::nullopt;
}

GraphBuilder::GraphBuilder(WeightLookup weights) : weights_(std::move(weights)) {}

const Node& GraphBuilder::node(Ref r) const {
  if (r.id < 0 || static_cast<std::size_t>(r.id) >= g_.nodes.size()) runtime_error("graph: invalid node reference {}", r.id);
  return g_.nodes[static_cast<std::size_t>(r.id)];
}

const Shape& GraphBuilder::shape(Ref r) const { return node(r).shape; }

namespace {

// Every local query head's kv head (q_head0 + h) / kv_group - kv_head0 is a local kv head.
bool ops_kv_heads_fit(const OpParams& p, std::int64_t nh, std::int64_t nkv) {
  if (nh < 1 || nkv < 1) return false;
  const std::int64_t first = p.q_head0 / p.kv_group - p.kv_head0, last = (p.q_head0 + nh - 1) / p.kv_group - p.kv_head0;
  return first >= 0 && last < nkv;
}

Node make(OpKind op, std::vector<int> inputs) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  return n;
}

[[noreturn]] void shape_error(OpKind op, const std::string& what, const Shape& a, const Shape& b) {
  runtime_error("graph: {}: {} ({} vs {})", op_name(op), what, a.str(), b.str());
}

// x [B,T,*row] as [B,T,G,E]: sel must be [B,T,G]; an operand [G,E] (or [B,T,G,E] for a
// replacement) holds G*E elements per row.
void check_edit(const Node& n, const Shape& x, const Shape& sel, const Shape* v) {
  const std::int64_t G = n.params.edit_groups;
  const std::int64_t row = x.rank >= 2 ? x.numel() / std::max<std::int64_t>(1, x[0] * x[1]) : 0;
  if (x.rank < 3 || G < 1 || row % G != 0) shape_error(n.op, "x must be [B,T,*row] with a row of G groups", x, Shape{G});
  if (sel != Shape{x[0], x[1], G}) shape_error(n.op, "selection must be [B,T,G]", x, sel);
  if (!v) return;
  const bool per_row = n.op == OpKind::EditReplace && v->rank == 4;
  const bool ok = n.op == OpKind::EditHost ? *v == Shape{x[0], x[1]}
                  : per_row ? *v == Shape{x[0], x[1], G, row / G}
                            : *v == Shape{G, row / G};
  if (!ok) shape_error(n.op, "operand must be [G,E] (or [B,T,G,E] to replace; positions [B,T] for a host edit)", x, *v);
}

// Sets n.shape and n.dtype from its inputs (earlier nodes) and params, or throws naming the op.
// Input and Weight nodes carry their own. Shared by the builder and Graph::reshape_inputs.
void infer(const std::vector<Node>& nodes, Node& n) {
  const auto in = [&](std::size_t i) -> const Node& { return nodes[static_cast<std::size_t>(n.inputs[i])]; };
  if (n.op == OpKind::Input || n.op == OpKind::Weight) return;
  n.dtype = DType::f32;
  switch (n.op) {
    case OpKind::Embedding: {
      const Shape &t = in(0).shape, &i = in(1).shape;
      if (t.rank != 2 || i.rank != 2) shape_error(n.op, "expects table [V,H] and ids [B,T]", t, i);
      n.shape = Shape{i[0], i[1], t[1]};
      return;
    }
    case OpKind::RmsNorm: {
      const Shape &xs = in(0).shape, &ws = in(1).shape;
      if (ws.rank != 1 || ws[0] != xs.last()) shape_error(n.op, "weight must be [H] of the last dim", xs, ws);
      n.shape = xs;
      return;
    }
    case OpKind::Linear: {
      const Shape &xs = in(0).shape, &ws = in(1).shape;
      if (ws.rank != 2 || ws[1] != xs.last()) shape_error(n.op, "weight must be [N, K] with K the input's last dim", xs, ws);
      if (n.inputs.size() > 2 && (in(2).shape.rank != 1 || in(2).shape[0] != ws[0]))
        shape_error(n.op, "bias must be [N]", ws, in(2).shape);
      n.shape = xs;
      n.shape[n.shape.rank - 1] = ws[0];
      return;
    }
    case OpKind::Reshape:
      if (n.params.shape.numel() != in(0).shape.numel()) shape_error(n.op, "element count differs", in(0).shape, n.params.shape);
      n.shape = n.params.shape;
      n.dtype = in(0).dtype;
      return;
    case OpKind::Rope: {
      const Shape &xs = in(0).shape, &ps = in(1).shape;
      if (xs.rank != 4 || ps.rank != 2 || xs[0] != ps[0] || xs[1] != ps[1] || xs[3] % 2)
        shape_error(n.op, "expects x [B,T,h,d] with even d and positions [B,T]", xs, ps);
      n.shape = xs;
      return;
    }
    case OpKind::Attention:
    case OpKind::AttentionPattern: {
      const Shape &qs = in(0).shape, &ks = in(1).shape;
      const bool heads_fit = n.params.kv_group > 0 ? ops_kv_heads_fit(n.params, qs[2], ks[2]) : ks[2] > 0 && qs[2] % ks[2] == 0;
      if (qs.rank != 4 || ks.rank != 4 || in(2).shape != ks || qs[0] != ks[0] || qs[3] != ks[3] || !heads_fit ||
          ks[1] < qs[1])
        shape_error(n.op, "expects q [B,T,nh,d], k and v [B,S,nkv,d] with nkv dividing nh and S >= T", qs, ks);
      if (n.inputs.size() > 3 && (in(3).shape.rank != 2 || in(3).shape[0] != ks[0] || in(3).shape[1] != ks[1]))
        shape_error(n.op, "mask must be [B,S]", ks, in(3).shape);
      n.shape = n.op == OpKind::Attention ? qs : Shape{qs[0], qs[1], qs[2], ks[1]};
      return;
    }
    case OpKind::SaeActivation: {
      const Shape& ps = in(0).shape;
      const bool two = n.params.sae_act == SaeAct::JumpRelu || n.params.sae_act == SaeAct::Gated;
      if (n.inputs.size() != (two ? 2u : 1u) || ps.rank < 1 ||
          (n.params.sae_act == SaeAct::JumpRelu && in(1).shape != Shape{ps.last()}) ||
          (n.params.sae_act == SaeAct::Gated && in(1).shape != ps) ||
          (n.params.sae_act == SaeAct::TopK && (n.params.sae_k < 1 || n.params.sae_k > ps.last())))
        shape_error(n.op, "expects pre [...,N] (jumprelu: threshold [N]; gated: gate [...,N]; topk: 1 <= k <= N)", ps,
                    two ? in(1).shape : ps);
      n.shape = ps;
      return;
    }
    case OpKind::NormRescale:
      if (in(0).shape.rank < 1 || in(0).shape.rows() != in(1).shape.rows() || (n.params.norm_power != 1 && n.params.norm_power != -1))
        shape_error(n.op, "expects x and ref with the same rows, power +-1", in(0).shape, in(1).shape);
      n.shape = in(0).shape;
      return;
    case OpKind::Sub:
    case OpKind::Add:
    case OpKind::SiluMul:
      if (in(0).shape != in(1).shape) shape_error(n.op, "shapes differ", in(0).shape, in(1).shape);
      n.shape = in(0).shape;
      return;
    case OpKind::Concat: {
      const Shape &as = in(0).shape, &bs = in(1).shape;
      bool same = as.rank == bs.rank && as.rank >= 2 && in(0).dtype == in(1).dtype;
      for (int i = 0; same && i < as.rank; ++i) same = i == 1 || as[i] == bs[i];
      if (!same) shape_error(n.op, "expects equal dtypes and shapes except dim 1", as, bs);
      n.shape = as;
      n.shape[1] = as[1] + bs[1];
      n.dtype = in(0).dtype;
      return;
    }
    case OpKind::EditAffine:
    case OpKind::EditReplace:
    case OpKind::EditProject:
    case OpKind::EditHost:
      check_edit(n, in(0).shape, in(1).shape, n.inputs.size() > 2 ? &in(2).shape : nullptr);
      n.shape = in(0).shape;
      return;
    case OpKind::AllReduceSum:
      n.shape = in(0).shape;
      return;
    case OpKind::AllGather: {
      const Shape& xs = in(0).shape;
      const int a = n.params.axis;
      const bool axis_ok = a >= 0 && a < xs.rank;
      const std::int64_t end = !axis_ok ? 0 : n.params.keep_end < 0 ? xs[a] : n.params.keep_end;
      if (!axis_ok || n.params.keep_begin < 0 || n.params.keep_begin > end || end > xs[a] || n.params.gathered < 0)
        shape_error(n.op, fmt::format("axis {}, kept {}..{} must fit the input", a, n.params.keep_begin, end), xs, xs);
      n.shape = xs;
      n.shape[a] = n.params.gathered;
      return;
    }
    case OpKind::SliceRows: {
      const Shape& xs = in(0).shape;
      const std::int64_t b = n.params.row_begin, e = n.params.row_end;
      if (xs.rank < 2 || b < 0 || b > e || e > xs[1])
        shape_error(n.op, fmt::format("rows {}..{} must be within dim 1", b, e), xs, xs);
      n.shape = xs;
      n.shape[1] = e - b;
      n.dtype = in(0).dtype;
      return;
    }
    case OpKind::Input:
    case OpKind::Weight:
    case OpKind::Count: break;
  }
  runtime_error("graph: no shape rule for op {}", static_cast<int>(n.op));
}

}  // namespace

void Graph::reshape_inputs(const std::function<void(const std::string& ref, Shape& shape)>& edit) {
  for (auto& n : nodes)
    if (n.op == OpKind::Input) edit(n.params.ref, n.shape);
  for (auto& n : nodes) infer(nodes, n);
}

GraphBuilder::Ref GraphBuilder::push(Node n) {
  for (int i : n.inputs) node(Ref{i});
  infer(g_.nodes, n);
  g_.nodes.push_back(std::move(n));
  return Ref{static_cast<int>(g_.nodes.size()) - 1};
}

GraphBuilder::Ref GraphBuilder::input(const std::string& ref, DType dtype, const Shape& shape) {
  Node n = make(OpKind::Input, {});
  n.shape = shape;
  n.dtype = dtype;
  n.params.ref = ref;
  n.names.push_back("input." + ref);
  used_names_.insert(n.names.back());
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::weight(const std::string& name) {
  const TensorView w = weights_(name);
  Node n = make(OpKind::Weight, {});
  n.shape = w.shape;
  n.dtype = w.dtype;
  n.params.ref = name;
  n.names.push_back(name);
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::embedding(Ref table, Ref ids) { return push(make(OpKind::Embedding, {table.id, ids.id})); }

GraphBuilder::Ref GraphBuilder::rms_norm(Ref x, Ref w, float eps) {
  Node n = make(OpKind::RmsNorm, {x.id, w.id});
  n.params.eps = eps;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::linear(Ref x, Ref w, std::optional<Ref> bias) {
  std::vector<int> in{x.id, w.id};
  if (bias) in.push_back(bias->id);
  return push(make(OpKind::Linear, std::move(in)));
}

GraphBuilder::Ref GraphBuilder::reshape(Ref x, const Shape& s) {
  Node n = make(OpKind::Reshape, {x.id});
  n.params.shape = s;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::rope(Ref x, Ref positions, double theta) {
  Node n = make(OpKind::Rope, {x.id, positions.id});
  n.params.theta = theta;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::attention(Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal) {
  return attention_like(OpKind::Attention, q, k, v, mask, causal);
}

GraphBuilder::Ref GraphBuilder::attention_pattern(Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal) {
  return attention_like(OpKind::AttentionPattern, q, k, v, mask, causal);
}

GraphBuilder::Ref GraphBuilder::attention_like(OpKind op, Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal) {
  std::vector<int> in{q.id, k.id, v.id};
  if (mask) in.push_back(mask->id);
  Node n = make(op, std::move(in));
  n.params.causal = causal;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::add(Ref a, Ref b) { return push(make(OpKind::Add, {a.id, b.id})); }

GraphBuilder::Ref GraphBuilder::silu_mul(Ref gate, Ref up) { return push(make(OpKind::SiluMul, {gate.id, up.id})); }

GraphBuilder::Ref GraphBuilder::concat1(Ref a, Ref b) { return push(make(OpKind::Concat, {a.id, b.id})); }

GraphBuilder::Ref GraphBuilder::slice_rows(Ref x, std::int64_t begin, std::int64_t end) {
  Node n = make(OpKind::SliceRows, {x.id});
  n.params.row_begin = begin;
  n.params.row_end = end;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::all_reduce_sum(Ref x) { return push(make(OpKind::AllReduceSum, {x.id})); }

GraphBuilder::Ref GraphBuilder::all_gather(Ref x, int axis, std::int64_t gathered, std::int64_t keep_begin,
                                           std::int64_t keep_end) {
  Node n = make(OpKind::AllGather, {x.id});
  n.params.axis = axis;
  n.params.gathered = gathered;
  n.params.keep_begin = keep_begin;
  n.params.keep_end = keep_end;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::attention_sharded(OpKind op, Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal,
                                                  std::int64_t q_head0, std::int64_t kv_head0, std::int64_t kv_group) {
  if (op != OpKind::Attention && op != OpKind::AttentionPattern) runtime_error("graph: attention_sharded of {}", op_name(op));
  std::vector<int> in{q.id, k.id, v.id};
  if (mask) in.push_back(mask->id);
  Node n = make(op, std::move(in));
  n.params.causal = causal;
  n.params.q_head0 = q_head0;
  n.params.kv_head0 = kv_head0;
  n.params.kv_group = kv_group;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::name(Ref r, const std::string& n) {
  if (!used_names_.insert(n).second) runtime_error("graph: the name '{}' is used twice", n);
  g_.nodes[static_cast<std::size_t>(r.id)].names.push_back(n);
  return r;
}

void GraphBuilder::output(const std::string& n, Ref r) {
  node(r);
  g_.outputs.emplace_back(n, r.id);
}

Graph GraphBuilder::finish() { return std::move(g_); }

}  // namespace sonde
