#include "decoder.h"

#include <sonde/error.h>
#include <sonde/log.h>

#include <algorithm>

namespace sonde::common {
namespace {

// The items [r.begin, r.end) of dimension `dim` (a strided view when dim > 0: the backend copies it).
TensorView narrow(TensorView v, int dim, Range r) {
  v.data = static_cast<std::byte*>(v.data) + r.begin * v.strides[static_cast<std::size_t>(dim)] * static_cast<std::int64_t>(dtype_size(v.dtype));
  v.shape[dim] = r.size();
  return v;
}

Range times(Range r, std::int64_t k) { return {r.begin * k, r.end * k}; }

// This rank's part of a weight (Megatron): q, k, v and gate, up by output rows (whole heads; kv
// heads replicated where ranks share one), o_proj and down_proj by input columns, the head by
// vocabulary rows; norms and the embedding whole.
TensorView shard_of(const DecoderSpec& s, const ExpectedWeight& e, const TensorView& v) {
  const ShardPlan& p = s.shard;
  switch (e.part) {
    case Part::QRows: return narrow(v, 0, times(p.q, s.head_dim));
    case Part::KvRows: return narrow(v, 0, times(p.kv, s.head_dim));
    case Part::QCols: return narrow(v, 1, times(p.q, s.head_dim));
    case Part::MlpRows: return narrow(v, 0, p.mlp);
    case Part::MlpCols: return narrow(v, 1, p.mlp);
    case Part::VocabRows: return narrow(v, 0, p.vocab);
    case Part::Whole: break;
  }
  return v;
}

}  // namespace

DecoderSpec DecoderSpec::from_config(const ModelConfig& c, bool causal) {
  DecoderSpec s;
  s.hidden = c.hidden_size;
  s.layers = c.num_hidden_layers;
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.intermediate = c.intermediate_size;
  s.vocab = c.vocab_size;
  s.rms_eps = static_cast<float>(c.rms_norm_eps);
  s.rope_theta = c.rope_theta;
  s.tied_embeddings = c.tie_word_embeddings;
  s.causal = causal;
  return s;
}

std::vector<ExpectedWeight> expected_weights(const DecoderSpec& s) {
  const std::int64_t H = s.hidden, I = s.intermediate, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const std::string hq = fmt::format("num_attention_heads {} x head_dim {}", s.heads, s.head_dim);
  const std::string hkv = fmt::format("num_key_value_heads {} x head_dim {}", s.kv_heads, s.head_dim);
  const std::string hh = fmt::format("hidden_size {}", H), hi = fmt::format("intermediate_size {}", I);
  const WeightNames& n = s.names;
  std::vector<ExpectedWeight> w{{n.embed + ".weight", Shape{s.vocab, H}, Split::None,
                                 fmt::format("vocab_size {}, hidden_size {}", s.vocab, H), Part::Whole}};
  // A projection [out, in] and, when the family has one, its bias [out] (split like its rows).
  const auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in, Split split, const std::string& why,
                          Part part, bool bias) {
    w.push_back({name + ".weight", Shape{out, in}, split, why, part});
    if (bias) {
      const bool by_rows = split == Split::Rows;  // a column-split layer's bias is whole
      w.push_back({name + ".bias", Shape{out}, by_rows ? Split::Rows : Split::None, why, by_rows ? part : Part::Whole});
    }
  };
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string p = n.layer(i);
    w.push_back({p + n.attn_norm + ".weight", Shape{H}, Split::None, hh, Part::Whole});
    linear(p + n.q, q, H, Split::Rows, hq + ", " + hh, Part::QRows, s.qkv_bias);
    linear(p + n.k, kv, H, Split::Rows, hkv + ", " + hh, Part::KvRows, s.qkv_bias);
    linear(p + n.v, kv, H, Split::Rows, hkv + ", " + hh, Part::KvRows, s.qkv_bias);
    linear(p + n.o, H, q, Split::Cols, hh + ", " + hq, Part::QCols, s.out_bias);
    w.push_back({p + n.mlp_norm + ".weight", Shape{H}, Split::None, hh, Part::Whole});
    linear(p + n.gate, I, H, Split::Rows, hi + ", " + hh, Part::MlpRows, s.out_bias);
    linear(p + n.up, I, H, Split::Rows, hi + ", " + hh, Part::MlpRows, s.out_bias);
    linear(p + n.down, H, I, Split::Cols, hh + ", " + hi, Part::MlpCols, s.out_bias);
  }
  w.push_back({n.final_norm + ".weight", Shape{H}, Split::None, hh, Part::Whole});
  // Tied (model-spec §1.2): the embedding is the head and the head's tensor, if present, is ignored.
  if (!s.tied_embeddings)
    linear(n.head, s.vocab, H, Split::Rows,
           fmt::format("vocab_size {}, hidden_size {}, untied embeddings", s.vocab, H), Part::VocabRows, s.out_bias);
  return w;
}

void load_weights(const DecoderSpec& s, const WeightSource& src, Backend& backend) {
  const auto expected = expected_weights(s);
  for (const auto& e : expected) {
    if (!src.has(e.name)) {
      if (e.name == s.names.head + ".weight")
        bad_input("{}: missing tensor '{}' (config.json says the embeddings are not tied)", src.root().string(), e.name);
      bad_input("{}: missing tensor '{}'", src.root().string(), e.name);
    }
    const WeightInfo& info = src.info(e.name);
    if (info.dtype != DType::f32 && info.dtype != DType::bf16 && info.dtype != DType::f16)
      bad_input("{}: tensor '{}' has dtype {}; weights must be F32, BF16 or F16", info.file.string(), e.name,
                dtype_to_safetensors(info.dtype));
    if (info.shape != e.shape)
      bad_input("{}: tensor '{}' has shape {} but config.json ({}) implies {}", info.file.string(), e.name,
                info.shape.str(), e.why, e.shape.str());
  }
  if (s.shard.active() && s.out_bias)
    bad_input("{}: tensor parallelism with biases on o_proj, the MLP and the head (include_bias) is not supported",
              src.root().string());
  if (!s.shard.active()) {
    for (const auto& e : expected) backend.upload(e.name, src.view(e.name), e.split);
  } else {
    for (const auto& e : expected) backend.upload(e.name, shard_of(s, e, src.view(e.name)), e.split);
    // Tied: the head is the embedding's rows of this rank's vocabulary, under the head's name.
    if (s.tied_embeddings)
      backend.upload(s.names.head + ".weight", narrow(src.view(s.names.embed + ".weight"), 0, s.shard.vocab), Split::Rows);
  }
  spdlog::debug("uploaded {} tensors to backend {}", expected.size(), backend.info().name);
}

ShardPlan shard_plan(const DecoderSpec& s, const Backend& backend) {
  const BackendInfo i = backend.info();
  return ShardPlan::make(s, i.tensor_rank, std::max(1, i.tensor_parallel));
}

std::vector<HookPoint> hook_points(const DecoderSpec& s) {
  const std::int64_t H = s.hidden;
  std::vector<HookPoint> h{{"hook_embed", {H}}};
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string p = fmt::format("blocks.{}.", i);
    h.push_back({p + "hook_resid_pre", {H}});
    h.push_back({p + "ln1.hook_out", {H}});
    h.push_back({p + "attn.hook_q", {s.heads, s.head_dim}});
    h.push_back({p + "attn.hook_k", {s.kv_heads, s.head_dim}});
    h.push_back({p + "attn.hook_v", {s.kv_heads, s.head_dim}});
    h.push_back({p + "attn.hook_rot_q", {s.heads, s.head_dim}});
    h.push_back({p + "attn.hook_rot_k", {s.kv_heads, s.head_dim}});
    h.push_back({p + "attn.hook_z", {s.heads, s.head_dim}});
    if (s.block_size == 0) h.push_back({p + "attn.hook_pattern", {s.heads, kKeysDim}});
    h.push_back({p + "hook_attn_out", {H}});
    h.push_back({p + "hook_resid_mid", {H}});
    h.push_back({p + "ln2.hook_out", {H}});
    h.push_back({p + "mlp.hook_pre", {s.intermediate}});
    h.push_back({p + "mlp.hook_pre_linear", {s.intermediate}});
    h.push_back({p + "mlp.hook_post", {s.intermediate}});
    h.push_back({p + "hook_mlp_out", {H}});
    h.push_back({p + "hook_resid_post", {H}});
  }
  h.push_back({"ln_final.hook_out", {H}});
  h.push_back({"hook_logits", {s.vocab}});
  return h;
}

}  // namespace sonde::common
