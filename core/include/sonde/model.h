#pragma once
// A model plugin turns a checkpoint into graphs. It validates and uploads weights by name, lists
// its hook points, and builds a forward graph for a batch shape. It never runs kernels.
#include <sonde/backend.h>
#include <sonde/config.h>
#include <sonde/graph.h>
#include <sonde/plugin.h>
#include <sonde/safetensors.h>
#include <sonde/sampling.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sonde {

enum class DecodingKind { Autoregressive, MaskedDiffusion };
inline const char* decoding_name(DecodingKind k) {
  return k == DecodingKind::MaskedDiffusion ? "masked diffusion" : "autoregressive";
}

struct ModelInfo {
  std::string arch;              // "qwen2", "dream"
  DecodingKind decoding = DecodingKind::Autoregressive;
  bool causal = true;
  int prediction_shift = 0;      // 1 for Dream: the logits at slot p predict token p+1
  std::int64_t mask_token_id = -1;
  DiffusionLoop diffusion_loop = DiffusionLoop::DreamTimesteps;  // masked diffusion: its published generation
  // Names the core and the app read here instead of knowing a family's (design idiom 8).
  std::string embedding_weight;         // the token embedding table: read one row per token
  // The final norm (RMSNorm weight and eps) and the unembedding [V, H]: the logit lens applies
  // them to any layer's residual stream.
  std::string final_norm_weight, head_weight;
  double final_norm_eps = 0;
  std::vector<std::string> end_tokens;  // diffusion: a completion's text ends before the first of these
  // The KV cache as the graph names it, per layer (BatchShape): the past Inputs and the hooks that
  // hold this call's post-RoPE K and V. Empty for a model without a KV cache.
  std::vector<std::string> past_k, past_v, new_k, new_v;
  // The kv heads a layer's cache holds here: a tensor-parallel shard's (0: config.json's).
  std::int64_t cache_kv_heads = 0;

  // Front ends ask this, not which DecodingKind: one place decides what counts as diffusion.
  bool diffusion() const { return decoding == DecodingKind::MaskedDiffusion; }
};

// A row dimension that is the number of keys the query attends over (attn.hook_pattern): it
// varies with the sequence, so such hooks are captured only by `sonde forward`.
constexpr std::int64_t kKeysDim = -1;

// A hook point and the shape of one row of it (one token position).
struct HookPoint {
  std::string name;
  std::vector<std::int64_t> row_shape;  // e.g. {896} or {14, 64}; {14, kKeysDim} for patterns
  bool per_sequence() const;            // has a kKeysDim dimension
};

// A tensor the model reads: its name, the shape config.json implies, and how it may be split.
struct WeightSpec {
  std::string name;
  Shape shape;
  Split split = Split::None;
};

// The graph's inputs, all [B, T]: "ids" (i32), "positions" (i32), and "mask" (u8, 1 = real
// token) when has_mask. Logits are built only when need_logits; with logits_from < logits_to
// (within [0, T], not the whole of it) they are [B, logits_to - logits_from, V], the slots
// [logits_from, logits_to) of every row alone: the final norm and the LM head run on those slots
// only (a generation prefill reads the last slot's, a denoising step the masked slots'; at 0.5B
// the head over every slot is a third of the forward, at 7-8B a thirteenth).
// KV cache (autoregressive): with past_tokens P > 0 the graph also reads, per layer i,
// "past_k.{i}" and "past_v.{i}" [B, P, nkv, d] f32 (post-RoPE K and V of earlier slots), and the
// mask covers every key: [B, P + T].
struct BatchShape {
  std::int64_t batch = 1;
  std::int64_t tokens = 0;
  bool has_mask = false;
  bool need_logits = true;
  std::int64_t past_tokens = 0;
  std::int64_t logits_from = 0, logits_to = 0;  // equal (0, 0): every slot's logits
  bool head_slice() const { return need_logits && logits_from < logits_to && (logits_from > 0 || logits_to < tokens); }
};

class ModelPlugin : public Plugin {
 public:
  virtual ModelInfo info() const = 0;
  // Validates the config (fields present and consistent); throws Error(BadInput).
  virtual void configure(const ModelConfig& config) = 0;
  virtual std::vector<HookPoint> hook_points() const = 0;
  // Every tensor load() reads: one list serves validation, loading, sharding and make-model.
  virtual std::vector<WeightSpec> weight_specs() const = 0;
  // Checks every tensor's presence, dtype and shape against the config, then uploads.
  virtual void load(const WeightSource& weights, Backend& backend) = 0;
  // Builds the forward graph; outputs "logits" [B,T,V] when need_logits. For past_tokens > 0 the
  // nodes must not depend on past_tokens beyond the shapes of the past_k.* / past_v.* / mask
  // Inputs: the session reuses the graph for the next past length (Graph::reshape_inputs).
  virtual void build(const BatchShape& shape, GraphBuilder& b) const = 0;
};

}  // namespace sonde
