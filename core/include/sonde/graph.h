#pragma once
// A forward pass as a list of named nodes in execution order. Models build graphs; backends
// run single nodes; the executor plans and runs a whole graph. Every op is one OpKind entry,
// one reference kernel and one backend-ops test case.
#include <sonde/tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace sonde {

struct HostEdit;  // edits.h

enum class OpKind : std::uint8_t {
  Input,      // fed by the caller under params.ref (e.g. "ids", "positions", "mask")
  Weight,     // a model weight fetched by name (params.ref) from the backend
  Embedding,  // (table[V,H], ids[B,T] i32) -> [B,T,H]
  RmsNorm,    // (x[...,H], w[H]) -> w * x / sqrt(mean(x^2) + eps)
  Linear,     // (x[...,K], W[N,K] [, b[N]]) -> x W^T + b  (nn.Linear layout)
  Reshape,    // (x) -> same elements, shape params.shape
  Rope,       // (x[B,T,h,d], pos[B,T] i32) -> rotate_half RoPE with params.theta
  Attention,  // (q[B,T,nh,d], k[B,S,nkv,d], v[B,S,nkv,d] [, mask[B,S] u8]) -> [B,T,nh,d]
  Add,        // (a, b) -> a + b, same shapes
  SiluMul,    // (g, u) -> silu(g) * u
  AttentionPattern,  // Attention's inputs -> the softmax probabilities [B,T,nh,S] (slow path only)
  Concat,     // (a[B,P,...], b[B,T,...]) -> [B,P+T,...] along dim 1 (KV cache: past then new keys)
  // Edits (edits.h), inserted after a hooked node. x[B,T,*row] is seen as [B,T,G,E] (G groups of
  // E: the heads of a per-head hook, else G = 1); sel[B,T,G] u8 says which groups change.
  EditAffine,   // (x, sel [, v[G,E]]) -> sel ? edit_a * x + edit_b * v : x  (edit_a = 0: x dropped)
  EditReplace,  // (x, sel, v[G,E] or v[B,T,G,E]) -> sel ? v : x
  EditProject,  // (x, sel, d[G,E] unit) -> sel ? x - ((x . d) - edit_b) d : x  (dot over E)
  EditHost,     // (x, sel, pos[B,T] i32, step[1] i32) -> a copy of x that params.host rewrote (run by the executor)
  // Collectives over the ranks that hold one model copy (tensor parallelism). A backend without
  // a process group is a group of one: both are the identity there.
  AllReduceSum,  // (x) f32 -> the element-wise sum over the ranks, added in rank order
  AllGather,     // (x) f32 -> every rank's x[..., keep_begin:keep_end along params.axis, ...]
                 // concatenated in rank order along params.axis, params.gathered long
  SliceRows,  // (x[B,T,...]) -> x[:, row_begin:row_end, ...] along dim 1 (the LM head's rows only)
  // Sparse autoencoders (sae.h). Rows are the last dim; formulas in docs/sae.md.
  SaeActivation,  // (pre[...,N] [, t]) -> params.sae_act: relu(pre); jumprelu: pre > t[N] ? relu(pre) : 0;
                  // topk: the sae_k largest pre of each row relu'd, the rest 0 (ties: lower index);
                  // gated: t[...,N] > 0 ? relu(pre) : 0
  NormRescale,    // (x[...,E], ref[...,F]) -> x * (|ref| / sqrt(F))^params.norm_power per row (power +-1)
  Sub,            // (a, b) -> a - b, same shapes
  Count
};

std::string_view op_name(OpKind op);

enum class SaeAct : std::uint8_t { Relu, JumpRelu, TopK, Gated };

struct OpParams {
  float eps = 0.0f;          // RmsNorm
  double theta = 0.0;        // Rope
  bool causal = false;       // Attention: key u allowed for query t iff u <= t + (S - T)
  std::string ref;           // Input / Weight: the name looked up
  Shape shape;               // Reshape target
  float edit_a = 1.0f, edit_b = 0.0f;  // Edit*: see the OpKinds
  std::int64_t edit_groups = 1;        // Edit*: G
  std::shared_ptr<const HostEdit> host;  // EditHost: the callback (edits.h)
  // AllGather: the dimension gathered along, its length after the gather, and the part of it
  // this rank contributes (a rank holding a replicated kv head gives it only once); keep_end
  // < 0: to the end. Only the axis is fixed: the other dims follow the input (reshape_inputs).
  int axis = 0;
  std::int64_t gathered = 0, keep_begin = 0, keep_end = -1;
  // Attention, AttentionPattern under tensor parallelism: the local query heads are global heads
  // q_head0.. and the local kv heads global kv_head0..; query head q reads kv head q / kv_group.
  // kv_group 0: the usual nh / nkv contiguous groups.
  std::int64_t q_head0 = 0, kv_head0 = 0, kv_group = 0;
  std::int64_t row_begin = 0, row_end = 0;  // SliceRows: rows [row_begin, row_end) of dim 1
  SaeAct sae_act = SaeAct::Relu;  // SaeActivation
  std::int64_t sae_k = 0;         // SaeActivation topk: features kept per row
  int norm_power = 1;             // NormRescale: +1 multiplies by |ref| / sqrt(F), -1 divides
};

struct Node {
  OpKind op = OpKind::Input;
  std::vector<int> inputs;   // node indices; always smaller than this node's index
  OpParams params;
  std::vector<std::string> names;  // hook and debug names; the first is the primary name
  DType dtype = DType::f32;
  Shape shape;
  const std::string& name() const;
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<std::pair<std::string, int>> outputs;  // ("logits", node)
  std::optional<int> find(std::string_view name) const;  // by any of a node's names
  std::optional<int> output(std::string_view name) const;
  // Lets `edit` change the shape of any Input node (it is shown each one's ref), then recomputes
  // every other node's shape and checks it as the builder did: a graph reused for another past
  // length. Throws a Runtime error naming the op whose inputs no longer fit.
  void reshape_inputs(const std::function<void(const std::string& ref, Shape& shape)>& edit);
};

// Builds a graph with shape inference; every shape error is a Runtime error naming the node.
class GraphBuilder {
 public:
  struct Ref { int id = -1; };
  using WeightLookup = std::function<TensorView(const std::string&)>;

  explicit GraphBuilder(WeightLookup weights);

  Ref input(const std::string& ref, DType dtype, const Shape& shape);
  Ref weight(const std::string& name);
  Ref embedding(Ref table, Ref ids);
  Ref rms_norm(Ref x, Ref w, float eps);
  Ref linear(Ref x, Ref w, std::optional<Ref> bias = std::nullopt);
  Ref reshape(Ref x, const Shape& shape);
  Ref rope(Ref x, Ref positions, double theta);
  Ref attention(Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal);
  // The probabilities Attention(q, k, v, mask, causal) weighs v with: [B,T,nh,S]. Only tapped
  // (nothing reads it), so the executor computes it only when the hook is asked for.
  Ref attention_pattern(Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal);
  Ref add(Ref a, Ref b);
  Ref silu_mul(Ref gate, Ref up);
  Ref concat1(Ref a, Ref b);  // along dim 1; all other dims equal
  Ref slice_rows(Ref x, std::int64_t begin, std::int64_t end);  // x[:, begin:end] along dim 1
  Ref all_reduce_sum(Ref x);
  // `gathered`: the axis's length after the gather (every rank's kept part, summed).
  Ref all_gather(Ref x, int axis, std::int64_t gathered, std::int64_t keep_begin = 0, std::int64_t keep_end = -1);
  // Attention / AttentionPattern whose local heads are a slice of the model's (OpParams).
  Ref attention_sharded(OpKind op, Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal, std::int64_t q_head0,
                        std::int64_t kv_head0, std::int64_t kv_group);

  // Names the intermediate where it is built: b.name(x, "blocks.3.hook_resid_post").
  Ref name(Ref r, const std::string& name);
  void output(const std::string& name, Ref r);
  const Shape& shape(Ref r) const;
  Graph finish();

 private:
  Ref push(Node n);  // infers the node's shape and dtype
  Ref attention_like(OpKind op, Ref q, Ref k, Ref v, std::optional<Ref> mask, bool causal);
  const Node& node(Ref r) const;
  WeightLookup weights_;
  Graph g_;
  std::unordered_set<std::string> used_names_;
};

}  // namespace sonde
