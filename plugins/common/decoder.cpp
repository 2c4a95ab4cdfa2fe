// The forward pass of model-spec §1.3, top to bottom. Every intermediate is named where it is
// built, with the canonical hook names of design §4.
#include "decoder.h"

#include <fmt/core.h>

namespace sonde::common {
namespace {

using Ref = GraphBuilder::Ref;

struct Inputs {
  Ref ids, positions;
  std::optional<Ref> mask;
};

// q, k, v: x W^T + b, heads kept separate; RoPE on q and k only; attention over all heads;
// o_proj without bias.
Ref attention_block(const DecoderSpec& s, const BatchShape& bs, GraphBuilder& b, const Inputs& in,
                    const std::string& p, const std::string& w, const std::string& layer, Ref h) {
  const std::int64_t B = bs.batch, T = bs.tokens, d = s.head_dim;
  auto project = [&](const char* proj, std::int64_t heads, const char* hook) {
    Ref y = b.linear(h, b.weight(w + "self_attn." + proj + ".weight"), b.weight(w + "self_attn." + proj + ".bias"));
    return b.name(b.reshape(y, Shape{B, T, heads, d}), p + hook);
  };
  Ref q = project("q_proj", s.heads, "attn.hook_q");
  Ref k = project("k_proj", s.kv_heads, "attn.hook_k");
  Ref v = project("v_proj", s.kv_heads, "attn.hook_v");
  Ref rq = b.name(b.rope(q, in.positions, s.rope_theta), p + "attn.hook_rot_q");
  Ref rk = b.name(b.rope(k, in.positions, s.rope_theta), p + "attn.hook_rot_k");
  Ref keys = rk, values = v;
  if (bs.past_tokens > 0) {  // KV cache: earlier slots' keys first, then this call's
    const Shape past{B, bs.past_tokens, s.kv_heads, d};
    keys = b.concat1(b.input("past_k." + layer, DType::f32, past), rk);
    values = b.concat1(b.input("past_v." + layer, DType::f32, past), v);
  }
  Ref z = b.name(b.attention(rq, keys, values, in.mask, s.causal), p + "attn.hook_z");
  b.name(b.attention_pattern(rq, keys, values, in.mask, s.causal), p + "attn.hook_pattern");  // computed only if tapped
  Ref zf = b.reshape(z, Shape{B, T, s.heads * d});
  return b.name(b.linear(zf, b.weight(w + "self_attn.o_proj.weight")), p + "hook_attn_out");
}

// down( silu(gate(h)) * up(h) ), no biases.
Ref mlp_block(GraphBuilder& b, const std::string& p, const std::string& w, Ref h) {
  Ref gate = b.name(b.linear(h, b.weight(w + "mlp.gate_proj.weight")), p + "mlp.hook_pre");
  Ref up = b.name(b.linear(h, b.weight(w + "mlp.up_proj.weight")), p + "mlp.hook_pre_linear");
  Ref act = b.name(b.silu_mul(gate, up), p + "mlp.hook_post");
  return b.name(b.linear(act, b.weight(w + "mlp.down_proj.weight")), p + "hook_mlp_out");
}

Ref decoder_layer(const DecoderSpec& s, const BatchShape& bs, GraphBuilder& b, const Inputs& in, std::int64_t i, Ref x) {
  const std::string p = fmt::format("blocks.{}.", i), w = fmt::format("model.layers.{}.", i);
  b.name(x, p + "hook_resid_pre");
  Ref h = b.name(b.rms_norm(x, b.weight(w + "input_layernorm.weight"), s.rms_eps), p + "ln1.hook_out");
  Ref mid = b.name(b.add(x, attention_block(s, bs, b, in, p, w, std::to_string(i), h)), p + "hook_resid_mid");
  Ref h2 = b.name(b.rms_norm(mid, b.weight(w + "post_attention_layernorm.weight"), s.rms_eps), p + "ln2.hook_out");
  return b.name(b.add(mid, mlp_block(b, p, w, h2)), p + "hook_resid_post");
}

}  // namespace

void build_decoder(const DecoderSpec& s, const BatchShape& bs, GraphBuilder& b) {
  const Shape bt{bs.batch, bs.tokens};
  Inputs in{b.input("ids", DType::i32, bt), b.input("positions", DType::i32, bt), std::nullopt};
  if (bs.has_mask) in.mask = b.input("mask", DType::u8, Shape{bs.batch, bs.past_tokens + bs.tokens});

  Ref x = b.name(b.embedding(b.weight("model.embed_tokens.weight"), in.ids), "hook_embed");
  for (std::int64_t i = 0; i < s.layers; ++i) x = decoder_layer(s, bs, b, in, i, x);
  Ref xf = b.name(b.rms_norm(x, b.weight("model.norm.weight"), s.rms_eps), "ln_final.hook_out");
  if (!bs.need_logits) return;
  const char* head = s.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  b.output("logits", b.name(b.linear(xf, b.weight(head)), "hook_logits"));
}

}  // namespace sonde::common
