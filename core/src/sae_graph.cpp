// SAEs as graph nodes (sae.h): hooks resolved against the model, the hook points they add, and
// their nodes inserted after the hooked node, the way edits are (edits_graph.cpp).
#include <sonde/error.h>
#include <sonde/hooks.h>
#include <sonde/sae.h>

#include <filesystem>

#include <algorithm>
#include <optional>

namespace sonde {
namespace {

const char* const kPoints[] = {"hook_sae_input", "hook_sae_acts_pre", "hook_sae_acts_post",
                               "hook_sae_recons", "hook_sae_error", "hook_sae_output"};

std::string point(const AttachedSae& a, const char* what) { return a.hook + "." + what; }

std::int64_t numel(const std::vector<std::int64_t>& row) {
  std::int64_t n = 1;
  for (auto d : row) n *= d;
  return n;
}

const HookPoint& find_hook(const std::string& name, const std::string& field, const SaeConfig& c,
                           const std::vector<HookPoint>& hooks, std::int64_t n_layers, std::string& canonical) {
  canonical = canonical_hook_name(name, n_layers);
  for (const auto& h : hooks)
    if (h.name == canonical && !h.per_sequence()) return h;
  std::vector<std::string> names;
  for (const auto& h : hooks) names.push_back(h.name);
  std::string hint;
  for (const auto& n : closest_names(canonical, names)) hint += (hint.empty() ? "" : ", ") + n;
  bad_input("{}/cfg.json: field '{}' is '{}': the model has no such hook point (closest: {})", c.folder, field, name, hint);
}

// Block-building: nodes appended to `block`, inputs given as graph ids (<= the insertion point)
// or as block-local references made by local().
struct Block {
  int at;  // the insertion point: block node j becomes graph node at + 1 + j
  std::vector<Node> nodes;
  int local(std::size_t j) const { return -1 - static_cast<int>(j); }
  int push(Node n) {
    nodes.push_back(std::move(n));
    return local(nodes.size() - 1);
  }
  const Node& get(const Graph& g, int ref) const {
    return ref < 0 ? nodes[static_cast<std::size_t>(-1 - ref)] : g.nodes[static_cast<std::size_t>(ref)];
  }
};

Node op(OpKind k, std::vector<int> in, const Shape& shape) {
  Node n;
  n.op = k;
  n.inputs = std::move(in);
  n.shape = shape;
  n.dtype = DType::f32;
  return n;
}

int weight(Block& b, const std::string& name, const GraphBuilder::WeightLookup& lookup) {
  const TensorView w = lookup(name);
  Node n = op(OpKind::Weight, {}, w.shape);
  n.dtype = w.dtype;
  n.params.ref = name;
  n.names.push_back(name);
  return b.push(std::move(n));
}

// Inserts the block after node b.at; with `splice_from` (a block reference), every later reader
// of node b.at (and the graph's outputs) reads that node instead.
void insert(Graph& g, Block& b, std::optional<int> splice_from) {
  const int m = static_cast<int>(b.nodes.size()), at = b.at, first = at + 1;
  for (auto& n : g.nodes)
    for (int& in : n.inputs)
      if (in > at) in += m;
  for (auto& n : b.nodes)
    for (int& in : n.inputs)
      if (in < 0) in = first + (-1 - in);
  if (splice_from) {
    const int to = first + (-1 - *splice_from);
    for (std::size_t i = static_cast<std::size_t>(first); i < g.nodes.size(); ++i)
      for (int& in : g.nodes[i].inputs)
        if (in == at) in = to;
    for (auto& [name, id] : g.outputs) id = id > at ? id + m : (id == at ? to : id);
  } else {
    for (auto& [name, id] : g.outputs) id = id > at ? id + m : id;
  }
  g.nodes.insert(g.nodes.begin() + first, std::make_move_iterator(b.nodes.begin()), std::make_move_iterator(b.nodes.end()));
}

void insert_one(Graph& g, const AttachedSae& a, const GraphBuilder::WeightLookup& lookup) {
  const SaeConfig& c = a.sae->config();
  const auto in_id = g.find(a.hook), out_id = g.find(a.hook_out);
  if (!in_id || !out_id) runtime_error("SAE {}: the graph has no node '{}'", c.folder, !in_id ? a.hook : a.hook_out);
  if (*in_id > *out_id) runtime_error("SAE {}: its input hook '{}' comes after its output hook '{}'", c.folder, a.hook, a.hook_out);
  const Shape xs = g.nodes[static_cast<std::size_t>(*in_id)].shape, ys = g.nodes[static_cast<std::size_t>(*out_id)].shape;
  if (xs.rank < 3 || ys.rank < 3) runtime_error("SAE {}: hook '{}' is {}, not [B,T,*row]", c.folder, a.hook, xs.str());
  g.nodes[static_cast<std::size_t>(*in_id)].names.push_back(point(a, "hook_sae_input"));

  Block b{*out_id, {}};
  const auto rows = [&](std::int64_t n) { return Shape{xs[0], xs[1], n}; };
  int x = *in_id;
  if (xs.rank != 3) {  // a per-head hook (hook_z): the SAE reads the heads concatenated
    Node r = op(OpKind::Reshape, {x}, rows(c.d_in));
    r.params.shape = rows(c.d_in);
    x = b.push(std::move(r));
  }
  int xn = x;
  if (c.norm == SaeNorm::ConstantNormRescale) {
    Node n = op(OpKind::NormRescale, {x, x}, rows(c.d_in));
    n.params.norm_power = -1;  // x * sqrt(d_in) / |x|
    xn = b.push(std::move(n));
  }
  const int enc = weight(b, a.prefix + "enc", lookup), enc_bias = weight(b, a.prefix + "enc_bias", lookup);
  Node act = op(OpKind::SaeActivation, {}, rows(c.d_sae));
  int pre;
  if (c.arch == SaeArch::Gated) {
    const int gate = b.push(op(OpKind::Linear, {xn, enc, enc_bias}, rows(c.d_sae)));
    const int mag = weight(b, a.prefix + "mag", lookup), mag_bias = weight(b, a.prefix + "mag_bias", lookup);
    pre = b.push(op(OpKind::Linear, {xn, mag, mag_bias}, rows(c.d_sae)));
    act.inputs = {pre, gate};
    act.params.sae_act = SaeAct::Gated;
  } else {
    pre = b.push(op(OpKind::Linear, {xn, enc, enc_bias}, rows(c.d_sae)));
    act.inputs = {pre};
    if (c.arch == SaeArch::JumpRelu) {
      act.inputs.push_back(weight(b, a.prefix + "threshold", lookup));
      act.params.sae_act = SaeAct::JumpRelu;
    } else if (c.arch == SaeArch::TopK) {
      act.params.sae_act = SaeAct::TopK;
      act.params.sae_k = c.k;
    }
  }
  b.nodes[static_cast<std::size_t>(-1 - pre)].names.push_back(point(a, "hook_sae_acts_pre"));
  act.names.push_back(point(a, "hook_sae_acts_post"));
  const int post = b.push(std::move(act));
  const int dec = weight(b, a.prefix + "dec", lookup), b_dec = weight(b, a.prefix + "b_dec", lookup);
  const Node act_copy = b.nodes[static_cast<std::size_t>(-1 - post)];
  // acts_post -> the output hook's value: W_dec^T, b_dec, constant_norm_rescale undone, heads.
  const auto decode = [&](int acts, bool named) {
    Node rec = op(OpKind::Linear, {acts, dec, b_dec}, rows(c.d_out));
    if (named) rec.names.push_back(point(a, "hook_sae_recons"));
    int out = b.push(std::move(rec));
    if (c.norm == SaeNorm::ConstantNormRescale && !c.transcoder) {  // / (sqrt(d_in) / |x|)
      Node n = op(OpKind::NormRescale, {out, x}, rows(c.d_out));
      n.params.norm_power = 1;
      out = b.push(std::move(n));
    }
    if (ys.rank != 3) {
      Node r = op(OpKind::Reshape, {out}, ys);
      r.params.shape = ys;
      out = b.push(std::move(r));
    }
    return out;
  };
  const int out = decode(post, true);
  b.nodes[static_cast<std::size_t>(-1 - out)].names.push_back(point(a, "hook_sae_output"));
  // With the error term spliced in, the error comes from a decode of the activations as encoded
  // (unnamed copies, so an edit of hook_sae_acts_post changes the output and not the error): as
  // SAELens's HookedSAETransformer computes it, without hooks. Otherwise from the output itself.
  int clean = out;
  if (a.splice && a.error_term) {
    Node copy = act_copy;
    copy.names.clear();
    clean = decode(b.push(std::move(copy)), false);
  }
  Node err = op(OpKind::Sub, {*out_id, clean}, ys);
  err.names.push_back(point(a, "hook_sae_error"));
  const int error = b.push(std::move(err));
  std::optional<int> splice;
  if (a.splice) splice = a.error_term ? b.push(op(OpKind::Add, {out, error}, ys)) : out;
  insert(g, b, splice);
}

}  // namespace

AttachedSae resolve_sae(std::shared_ptr<const Sae> sae, const std::vector<HookPoint>& hooks, std::int64_t n_layers,
                        std::size_t index, bool splice, bool error_term) {
  const SaeConfig& c = sae->config();
  AttachedSae a;
  const HookPoint& in = find_hook(c.hook_name, "hook_name", c, hooks, n_layers, a.hook);
  const HookPoint& out = c.transcoder ? find_hook(c.hook_name_out, "hook_name_out", c, hooks, n_layers, a.hook_out) : in;
  if (!c.transcoder) a.hook_out = a.hook;
  if (numel(in.row_shape) != c.d_in)
    bad_input("{}/cfg.json: field 'd_in' is {}, but hook '{}' has rows of {}", c.folder, c.d_in, a.hook, numel(in.row_shape));
  if (numel(out.row_shape) != c.d_out)
    bad_input("{}/cfg.json: field '{}' is {}, but hook '{}' has rows of {}", c.folder, c.transcoder ? "d_out" : "d_in",
              c.d_out, a.hook_out, numel(out.row_shape));
  if (a.hook.find(".hook_sae_") != std::string::npos || a.hook.find(".pre_edit") != std::string::npos)
    bad_input("{}/cfg.json: field 'hook_name' is '{}': an SAE reads a model's hook point", c.folder, c.hook_name);
  a.in_row = in.row_shape;
  a.out_row = out.row_shape;
  a.sae = std::move(sae);
  a.prefix = "sae." + std::to_string(index) + ".";
  a.splice = splice;
  a.error_term = error_term;
  return a;
}

std::vector<HookPoint> sae_hook_points(const AttachedSae& a) {
  const SaeConfig& c = a.sae->config();
  return {{point(a, kPoints[0]), a.in_row},  {point(a, kPoints[1]), {c.d_sae}}, {point(a, kPoints[2]), {c.d_sae}},
          {point(a, kPoints[3]), {c.d_out}}, {point(a, kPoints[4]), a.out_row}, {point(a, kPoints[5]), a.out_row}};
}

void insert_saes(Graph& g, const std::vector<AttachedSae>& saes, const GraphBuilder::WeightLookup& weights) {
  for (const auto& a : saes) insert_one(g, a, weights);
}

nlohmann::json saes_json(const std::vector<AttachedSae>& saes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : saes) {
    const SaeConfig& c = a.sae->config();
    nlohmann::json j{{"folder", c.folder}, {"path", std::filesystem::absolute(c.folder).lexically_normal().string()},
                     {"architecture", c.architecture}, {"hook_name", c.hook_name}, {"hook", a.hook}, {"d_in", c.d_in},
                     {"d_sae", c.d_sae}, {"weights_sha256", c.weights_sha256}, {"splice", a.splice},
                     {"error_term", a.error_term}};
    if (c.transcoder) {
      j["hook_name_out"] = c.hook_name_out;
      j["hook_out"] = a.hook_out;
      j["d_out"] = c.d_out;
    }
    if (c.arch == SaeArch::TopK) j["k"] = c.k;
    out.push_back(j);
  }
  return out;
}

std::vector<SaeWeightView> sae_weight_views(const AttachedSae& a) {
  const SaeWeights& w = a.sae->weights();
  std::vector<SaeWeightView> v{{.name = a.prefix + "enc", .view = w.enc.view(), .keep_packed = true},
                               {a.prefix + "enc_bias", w.enc_bias.view()},
                               {a.prefix + "dec", w.dec.view()},
                               {a.prefix + "b_dec", w.b_dec.view()}};
  if (!w.mag.empty()) {
    v.push_back({.name = a.prefix + "mag", .view = w.mag.view(), .keep_packed = true});
    v.push_back({a.prefix + "mag_bias", w.mag_bias.view()});
  }
  if (!w.threshold.empty()) v.push_back({a.prefix + "threshold", w.threshold.view()});
  return v;
}

void upload_sae_weights(Backend& backend, const AttachedSae& a) {
  for (const SaeWeightView& w : sae_weight_views(a)) {
    backend.upload(w.name, w.view, Split::None);
    if (w.keep_packed) backend.hint(w.name, WeightHint::KeepPacked);
  }
}

}  // namespace sonde
