#include <sonde/error.h>
#include <sonde/graph.h>

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

GraphBuilder::Ref GraphBuilder::push(Node n) {
  g_.nodes.push_back(std::move(n));
  return Ref{static_cast<int>(g_.nodes.size()) - 1};
}

const Node& GraphBuilder::node(Ref r) const {
  if (r.id < 0 || static_cast<std::size_t>(r.id) >= g_.nodes.size()) runtime_error("graph: invalid node reference {}", r.id);
  return g_.nodes[static_cast<std::size_t>(r.id)];
}

const Shape& GraphBuilder::shape(Ref r) const { return node(r).shape; }

namespace {
Node make(OpKind op, std::vector<int> inputs, const Shape& shape, DType dtype = DType::f32) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.shape = shape;
  n.dtype = dtype;
  return n;
}

[[noreturn]] void shape_error(OpKind op, const std::string& what, const Shape& a, const Shape& b) {
  runtime_error("graph: {}: {} ({} vs {})", op_name(op), what, a.str(), b.str());
}
}  // namespace

GraphBuilder::Ref GraphBuilder::input(const std::string& ref, DType dtype, const Shape& shape) {
  Node n = make(OpKind::Input, {}, shape, dtype);
  n.params.ref = ref;
  n.names.push_back("input." + ref);
  used_names_.insert(n.names.back());
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::weight(const std::string& name) {
  const TensorView w = weights_(name);
  Node n = make(OpKind::Weight, {}, w.shape, w.dtype);
  n.params.ref = name;
  n.names.push_back(name);
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::embedding(Ref table, Ref ids) {
  const Shape& t = shape(table);
  const Shape& i = shape(ids);
  if (t.rank != 2 || i.rank != 2) shape_error(OpKind::Embedding, "expects table [V,H] and ids [B,T]", t, i);
  return push(make(OpKind::Embedding, {table.id, ids.id}, Shape{i[0], i[1], t[1]}));
}

GraphBuilder::Ref GraphBuilder::rms_norm(Ref x, Ref w, float eps) {
  const Shape& xs = shape(x);
  const Shape& ws = shape(w);
  if (ws.rank != 1 || ws[0] != xs.last()) shape_error(OpKind::RmsNorm, "weight must be [H] of the last dim", xs, ws);
  Node n = make(OpKind::RmsNorm, {x.id, w.id}, xs);
  n.params.eps = eps;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::linear(Ref x, Ref w, std::optional<Ref> bias) {
  const Shape& xs = shape(x);
  const Shape& ws = shape(w);
  if (ws.rank != 2 || ws[1] != xs.last()) shape_error(OpKind::Linear, "weight must be [N, K] with K the input's last dim", xs, ws);
  std::vector<int> in{x.id, w.id};
  if (bias) {
    const Shape& bs = shape(*bias);
    if (bs.rank != 1 || bs[0] != ws[0]) shape_error(OpKind::Linear, "bias must be [N]", ws, bs);
    in.push_back(bias->id);
  }
  Shape out = xs;
  out[out.rank - 1] = ws[0];
  return push(make(OpKind::Linear, std::move(in), out));
}

GraphBuilder::Ref GraphBuilder::reshape(Ref x, const Shape& s) {
  if (s.numel() != shape(x).numel()) shape_error(OpKind::Reshape, "element count differs", shape(x), s);
  Node n = make(OpKind::Reshape, {x.id}, s, node(x).dtype);
  n.params.shape = s;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::rope(Ref x, Ref positions, double theta) {
  const Shape& xs = shape(x);
  const Shape& ps = shape(positions);
  if (xs.rank != 4 || ps.rank != 2 || xs[0] != ps[0] || xs[1] != ps[1] || xs[3] % 2)
    shape_error(OpKind::Rope, "expects x [B,T,h,d] with even d and positions [B,T]", xs, ps);
  Node n = make(OpKind::Rope, {x.id, positions.id}, xs);
  n.params.theta = theta;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::attention(Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal) {
  const Shape& qs = shape(q);
  const Shape& ks = shape(k);
  if (qs.rank != 4 || ks.rank != 4 || shape(v) != ks || qs[0] != ks[0] || qs[3] != ks[3] || ks[2] == 0 ||
      qs[2] % ks[2] != 0 || ks[1] < qs[1])
    shape_error(OpKind::Attention, "expects q [B,T,nh,d], k and v [B,S,nkv,d] with nkv dividing nh and S >= T", qs, ks);
  std::vector<int> in{q.id, k.id, v.id};
  if (mask) {
    const Shape& ms = shape(*mask);
    if (ms.rank != 2 || ms[0] != ks[0] || ms[1] != ks[1]) shape_error(OpKind::Attention, "mask must be [B,S]", ks, ms);
    in.push_back(mask->id);
  }
  Node n = make(OpKind::Attention, std::move(in), qs);
  n.params.causal = causal;
  return push(std::move(n));
}

GraphBuilder::Ref GraphBuilder::attention_pattern(Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal) {
  Ref a = attention(q, k, v, mask, causal);  // same checks and inputs; replaced below
  Node& n = g_.nodes[static_cast<std::size_t>(a.id)];
  n.op = OpKind::AttentionPattern;
  n.shape = Shape{shape(q)[0], shape(q)[1], shape(q)[2], shape(k)[1]};
  return a;
}

GraphBuilder::Ref GraphBuilder::add(Ref a, Ref b) {
  if (shape(a) != shape(b)) shape_error(OpKind::Add, "shapes differ", shape(a), shape(b));
  return push(make(OpKind::Add, {a.id, b.id}, shape(a)));
}

GraphBuilder::Ref GraphBuilder::silu_mul(Ref gate, Ref up) {
  if (shape(gate) != shape(up)) shape_error(OpKind::SiluMul, "shapes differ", shape(gate), shape(up));
  return push(make(OpKind::SiluMul, {gate.id, up.id}, shape(gate)));
}

GraphBuilder::Ref GraphBuilder::concat1(Ref a, Ref b) {
  const Shape& as = shape(a);
  const Shape& bs = shape(b);
  bool same = as.rank == bs.rank && as.rank >= 2 && node(a).dtype == node(b).dtype;
  for (int i = 0; same && i < as.rank; ++i) same = i == 1 || as[i] == bs[i];
  if (!same) shape_error(OpKind::Concat, "expects equal dtypes and shapes except dim 1", as, bs);
  Shape out = as;
  out[1] = as[1] + bs[1];
  Node n = make(OpKind::Concat, {a.id, b.id}, out);
  n.dtype = node(a).dtype;
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
