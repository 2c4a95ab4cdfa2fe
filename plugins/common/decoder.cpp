// The forward pass of model-spec §1.3, top to bottom. Every intermediate is named where it is
// built, with the canonical hook names of design §4.
#include "decoder.h"

#include <fmt/core.h>

#include <algorithm>

namespace sonde::common {
namespace {

using Ref = GraphBuilder::Ref;

struct Inputs {
  Ref ids, positions;
  std::optional<Ref> mask;
};

// Under tensor parallelism (s.shard) a rank computes its heads and MLP columns only: hooks of
// split values are gathered (nodes that run only when the hook is tapped), and the row-split
// o_proj and down_proj are summed over the ranks (the two allreduces of a layer), so the residual
// stream is whole and bit-identical on every rank.
struct Tp {
  const DecoderSpec& s;
  GraphBuilder& b;
  bool on() const { return s.shard.active(); }
  // Names `local` as the hook, or a gather of every rank's part along `axis` as the hook.
  Ref hook(Ref local, int axis, std::int64_t whole, const std::string& name, Range keep = {0, -1}) {
    if (!on()) return b.name(local, name);
    b.name(b.all_gather(local, axis, whole, keep.begin, keep.end), name);
    return local;
  }
  Ref sum(Ref partial) { return on() ? b.all_reduce_sum(partial) : partial; }
};

// x W^T, plus the bias when the family has one (DecoderSpec::qkv_bias, out_bias).
Ref linear(GraphBuilder& b, Ref x, const std::string& name, bool bias) {
  return bias ? b.linear(x, b.weight(name + ".weight"), b.weight(name + ".bias")) : b.linear(x, b.weight(name + ".weight"));
}

// Fast-dLLM v2's block-causal attention (its eval_block_diff_mask): the query in slot a (past
// slots first, then this call's) sees the key in slot u iff u / block <= a / block, so attention is
// bidirectional inside a block and causal across blocks. Built as one bidirectional attention per
// block of queries over the keys up to that block's end; a call that stays inside one block (block
// decoding over a cache of whole blocks) is one attention over every key, independent of the past
// length as BatchShape requires.
template <class Attend>
Ref block_causal(std::int64_t block, const BatchShape& bs, GraphBuilder& b, Ref q, Ref keys, Ref values,
                 std::optional<Ref> mask, const Attend& attend) {
  const std::int64_t P = bs.past_tokens, T = bs.tokens;
  std::optional<Ref> z;
  for (std::int64_t t = 0; t < T;) {
    const std::int64_t end = std::min(T, ((P + t) / block + 1) * block - P);  // this block's last query + 1
    const bool whole = t == 0 && end == T;
    Ref qs = whole ? q : b.slice_rows(q, t, end);
    Ref ks = end == T ? keys : b.slice_rows(keys, 0, P + end);
    Ref vs = end == T ? values : b.slice_rows(values, 0, P + end);
    std::optional<Ref> ms = mask;
    if (mask && end != T) ms = b.slice_rows(*mask, 0, P + end);
    Ref part = attend(OpKind::Attention, qs, ks, vs, ms);
    z = z ? b.concat1(*z, part) : part;
    t = end;
  }
  return *z;
}

// q, k, v: x W^T + b, heads kept separate; RoPE on q and k only; attention over all heads;
// o_proj (Qwen2: without bias).
Ref attention_block(const DecoderSpec& s, const BatchShape& bs, GraphBuilder& b, const Inputs& in,
                    const std::string& p, const std::string& w, const std::string& layer, Ref h) {
  const std::int64_t B = bs.batch, T = bs.tokens, d = s.head_dim;
  const ShardPlan& sh = s.shard;
  Tp tp{s, b};
  // Without parallelism the plan may be unset (a model built without load()): the whole model.
  const std::int64_t nq = tp.on() ? sh.q.size() : s.heads, nkv = tp.on() ? sh.kv.size() : s.kv_heads;
  const Range own{sh.kv_own.begin - sh.kv.begin, sh.kv_own.end - sh.kv.begin};  // in the local kv heads
  const WeightNames& n = s.names;
  auto project = [&](const std::string& proj, std::int64_t heads) {
    return b.reshape(linear(b, h, w + proj, s.qkv_bias), Shape{B, T, heads, d});
  };
  Ref q = tp.hook(project(n.q, nq), 2, s.heads, p + "attn.hook_q");
  Ref k = tp.hook(project(n.k, nkv), 2, s.kv_heads, p + "attn.hook_k", own);
  Ref v = tp.hook(project(n.v, nkv), 2, s.kv_heads, p + "attn.hook_v", own);
  Ref rq = tp.hook(b.rope(q, in.positions, s.rope_theta), 2, s.heads, p + "attn.hook_rot_q");
  Ref rk = tp.hook(b.rope(k, in.positions, s.rope_theta), 2, s.kv_heads, p + "attn.hook_rot_k", own);
  if (tp.on()) {  // what the KV cache keeps (ModelInfo::new_k, new_v)
    b.name(rk, p + "attn.hook_rot_k_shard");
    b.name(v, p + "attn.hook_v_shard");
  }
  Ref keys = rk, values = v;
  if (bs.past_tokens > 0) {  // KV cache: earlier slots' keys first, then this call's
    const Shape past{B, bs.past_tokens, nkv, d};
    keys = b.concat1(b.input("past_k." + layer, DType::f32, past), rk);
    values = b.concat1(b.input("past_v." + layer, DType::f32, past), v);
  }
  auto attend = [&](OpKind op, Ref qs, Ref ks, Ref vs, std::optional<Ref> mask) {
    if (!tp.on()) return op == OpKind::Attention ? b.attention(qs, ks, vs, mask, s.causal)
                                                 : b.attention_pattern(qs, ks, vs, mask, s.causal);
    return b.attention_sharded(op, qs, ks, vs, mask, s.causal, sh.q.begin, sh.kv.begin, sh.kv_group);
  };
  if (s.block_size > 0) {  // block-causal: no single pattern row length, so no attn.hook_pattern
    Ref z = tp.hook(block_causal(s.block_size, bs, b, rq, keys, values, in.mask, attend), 2, s.heads, p + "attn.hook_z");
    return b.name(tp.sum(linear(b, b.reshape(z, Shape{B, T, nq * d}), w + n.o, s.out_bias)), p + "hook_attn_out");
  }
  Ref z = tp.hook(attend(OpKind::Attention, rq, keys, values, in.mask), 2, s.heads, p + "attn.hook_z");
  tp.hook(attend(OpKind::AttentionPattern, rq, keys, values, in.mask), 2, s.heads, p + "attn.hook_pattern");  // computed only if tapped
  Ref zf = b.reshape(z, Shape{B, T, nq * d});
  return b.name(tp.sum(linear(b, zf, w + n.o, s.out_bias)), p + "hook_attn_out");
}

// down( silu(gate(h)) * up(h) ) (Qwen2: no biases).
Ref mlp_block(const DecoderSpec& s, GraphBuilder& b, const std::string& p, const std::string& w, Ref h) {
  Tp tp{s, b};
  const WeightNames& n = s.names;
  Ref gate = tp.hook(linear(b, h, w + n.gate, s.out_bias), 2, s.intermediate, p + "mlp.hook_pre");
  Ref up = tp.hook(linear(b, h, w + n.up, s.out_bias), 2, s.intermediate, p + "mlp.hook_pre_linear");
  Ref act = tp.hook(b.silu_mul(gate, up), 2, s.intermediate, p + "mlp.hook_post");
  return b.name(tp.sum(linear(b, act, w + n.down, s.out_bias)), p + "hook_mlp_out");
}

Ref decoder_layer(const DecoderSpec& s, const BatchShape& bs, GraphBuilder& b, const Inputs& in, std::int64_t i, Ref x) {
  const std::string p = fmt::format("blocks.{}.", i), w = s.names.layer(i);
  b.name(x, p + "hook_resid_pre");
  Ref h = b.name(b.rms_norm(x, b.weight(w + s.names.attn_norm + ".weight"), s.rms_eps), p + "ln1.hook_out");
  Ref mid = b.name(b.add(x, attention_block(s, bs, b, in, p, w, std::to_string(i), h)), p + "hook_resid_mid");
  Ref h2 = b.name(b.rms_norm(mid, b.weight(w + s.names.mlp_norm + ".weight"), s.rms_eps), p + "ln2.hook_out");
  return b.name(b.add(mid, mlp_block(s, b, p, w, h2)), p + "hook_resid_post");
}

}  // namespace

void build_decoder(const DecoderSpec& s, const BatchShape& bs, GraphBuilder& b) {
  const Shape bt{bs.batch, bs.tokens};
  Inputs in{b.input("ids", DType::i32, bt), b.input("positions", DType::i32, bt), std::nullopt};
  if (bs.has_mask) in.mask = b.input("mask", DType::u8, Shape{bs.batch, bs.past_tokens + bs.tokens});

  const WeightNames& n = s.names;
  Ref x = b.name(b.embedding(b.weight(n.embed + ".weight"), in.ids), "hook_embed");
  for (std::int64_t i = 0; i < s.layers; ++i) x = decoder_layer(s, bs, b, in, i, x);
  if (bs.head_slice()) x = b.slice_rows(x, bs.logits_from, bs.logits_to);
  Ref xf = b.name(b.rms_norm(x, b.weight(n.final_norm + ".weight"), s.rms_eps), "ln_final.hook_out");
  if (!bs.need_logits) return;
  if (s.shard.active()) {  // each rank's vocabulary rows (load_weights), gathered for sampling
    Ref part = linear(b, xf, n.head, s.out_bias && !s.tied_embeddings);
    b.output("logits", b.name(b.all_gather(part, 2, s.vocab), "hook_logits"));
    return;
  }
  Ref logits = s.tied_embeddings ? b.linear(xf, b.weight(n.embed + ".weight")) : linear(b, xf, n.head, s.out_bias);
  b.output("logits", b.name(logits, "hook_logits"));
}

}  // namespace sonde::common
