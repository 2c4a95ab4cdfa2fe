#pragma once
// The Qwen2 decoder stack shared by the qwen2 and dream plugins (model-spec §1). The two
// families differ only in data: causal or bidirectional attention, tied or untied head.
#include "shard.h"

#include <sonde/backend.h>
#include <sonde/config.h>
#include <sonde/graph.h>
#include <sonde/model.h>
#include <sonde/safetensors.h>

#include <string>
#include <vector>

namespace sonde::common {

// A family's published tensor names (Qwen2's by default, model-spec §1.2), without ".weight" /
// ".bias". Block i's tensors are `layer_prefix` + i + "." + the block-relative name.
struct WeightNames {
  std::string embed = "model.embed_tokens", final_norm = "model.norm", head = "lm_head";
  std::string layer_prefix = "model.layers.";
  std::string attn_norm = "input_layernorm", q = "self_attn.q_proj", k = "self_attn.k_proj", v = "self_attn.v_proj",
              o = "self_attn.o_proj", mlp_norm = "post_attention_layernorm", gate = "mlp.gate_proj",
              up = "mlp.up_proj", down = "mlp.down_proj";
  std::string layer(std::int64_t i) const { return layer_prefix + std::to_string(i) + "."; }
};

struct DecoderSpec {
  std::int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  float rms_eps = 0;
  double rope_theta = 0;
  bool tied_embeddings = false;
  bool causal = true;
  // > 0: block-causal attention over blocks of this many slots (Fast-dLLM v2's bd_size) instead
  // of `causal`: bidirectional inside a block, causal across blocks; no attn.hook_pattern.
  std::int64_t block_size = 0;
  WeightNames names;
  bool qkv_bias = true;   // q, k, v carry a bias (Qwen2)
  bool out_bias = false;  // o, gate, up, down and an untied head carry one too (OLMo's include_bias)
  ShardPlan shard;  // this rank's part under tensor parallelism (load() asks the backend)

  static DecoderSpec from_config(const ModelConfig& c, bool causal);
};

// Which part of a weight a tensor-parallel rank holds (ShardPlan): whole, or its rows or
// columns of the query heads, kv heads, MLP columns or vocabulary.
enum class Part { Whole, QRows, KvRows, QCols, MlpRows, MlpCols, VocabRows };

struct ExpectedWeight {
  std::string name;
  Shape shape;
  Split split = Split::None;
  std::string why;  // which config fields give the shape, for error messages
  Part part = Part::Whole;
};

// Every tensor the forward reads, with the shape config.json implies.
std::vector<ExpectedWeight> expected_weights(const DecoderSpec& s);
// Checks presence, dtype (f32, f16, bf16) and shape of each, then uploads it to the backend:
// the whole tensor, or under tensor parallelism (s.shard) this rank's slice of it.
void load_weights(const DecoderSpec& s, const WeightSource& w, Backend& backend);
// The plan of the rank `backend` is in its model copy (the whole model without parallelism).
ShardPlan shard_plan(const DecoderSpec& s, const Backend& backend);
std::vector<HookPoint> hook_points(const DecoderSpec& s);
// The whole forward: embedding, blocks, final norm, and logits when shape.need_logits.
void build_decoder(const DecoderSpec& s, const BatchShape& shape, GraphBuilder& b);

}  // namespace sonde::common
