#!/usr/bin/python3
"""An independent PyTorch reference of Fast-dLLM v2 (NVlabs; Efficient-Large-Model/Fast_dLLM_v2_1.5B
and _7B, model_type Fast_dLLM_Qwen), written from its published modeling.py
(Fast_dLLM_QwenForCausalLM at inference) and generation_functions.py (batch_sample), not from
sonde's sources. Only the checkpoint reader is shared with qwen2_reference.py.

Forward (eval mode; Fast_dLLM_QwenModel.forward, Fast_dLLM_QwenAttention.forward):
    x = embed_tokens(ids)
    per layer:  h = input_layernorm(x)
                q, k, v = q_proj(h), k_proj(h), v_proj(h)         (biases on q, k, v only)
                q, k = rope(q, pos), rope(k, pos)                  (rotate_half; HF's default rope)
                keys, values = cache of earlier slots ++ k, v      (K after RoPE)
                att = softmax(q k^T / sqrt(d) + mask) v             (GQA: repeat_kv)
                x = x + o_proj(att)
                h = post_attention_layernorm(x)
                x = x + down_proj(silu(gate_proj(h)) * up_proj(h))
    logits = lm_head(norm(x))    (embed_tokens^T when tie_word_embeddings)
The slot of query t is a = P + t (P slots already in the cache) and its position is a
(cache_position = arange(past_seen, past_seen + T)); the mask is eval_block_diff_mask:
key slot u is visible from query slot a iff u // block <= a // block, block = bd_size (32; the
forward's block_size argument, whose default equals the published bd_size). So attention is
bidirectional inside a block and causal across blocks.

Generation (batch_sample): see `batch_sample` below; one prompt at a time (each row of the
published batch gets the result it gets alone when all rows have the same length). Greedy, or
sampled at a temperature as modeling.py's sample_with_top_p samples (`sample_with_top_p` below),
with the draw taken from sonde's documented counter-based generator instead of torch.multinomial
(docs/generation.md, "Seeds and the counter-based RNG"; re-implemented here from that text).
Everything runs in the compute dtype given (float64 for the goldens).
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen2_reference import read_safetensors  # noqa: E402  (the checkpoint reader only)
from counter_rng import TOKEN, counter_uniform  # noqa: E402  (docs/generation.md's draws)

PUBLISHED_MASK_ID = 151665  # batch_sample's mask_id default, |<MASK>| in the published tokenizer
PUBLISHED_STOP = 151645     # batch_sample's stop_token default, <|im_end|>
FORWARD_BLOCK = 32          # the forward's block_size default, which batch_sample's sub-block calls keep


class FdConfig:
    def __init__(self, raw):
        assert raw["model_type"] == "Fast_dLLM_Qwen"
        self.raw = raw
        self.H = raw["hidden_size"]
        self.L = raw["num_hidden_layers"]
        self.nh = raw["num_attention_heads"]
        self.nkv = raw["num_key_value_heads"]
        self.d = raw.get("head_dim") or self.H // self.nh
        self.I = raw["intermediate_size"]
        self.V = raw["vocab_size"]
        self.eps = raw["rms_norm_eps"]
        self.theta = raw["rope_theta"]
        self.tied = bool(raw.get("tie_word_embeddings", False))
        self.bd = raw["bd_size"]
        self.mask_id = raw.get("mask_token_id", PUBLISHED_MASK_ID)
        self.pad_id = raw.get("pad_token_id")
        assert raw.get("rope_scaling") in (None, {}) and not raw.get("use_sliding_window", False)


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = FdConfig(json.load(f))
    return cfg, read_safetensors(os.path.join(model_dir, "model.safetensors"))


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps))


def rope_tables(positions, d, theta, dtype):
    """HF's default rope: inv_freq = 1 / theta^(arange(0, d, 2) / d) and the angles in float32,
    then cos/sin of cat(angle, angle) taken in the compute dtype."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).to(torch.float32) / d))
    angle = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat([angle, angle], dim=-1).to(dtype)
    return emb.cos(), emb.sin()


def rope(x, cos, sin):  # x [T, heads, d]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def forward(W, cfg, ids, cache=None, block=None, dtype=torch.float64):
    """One sequence: ids [T] (list or tensor) after the P slots `cache` holds (a list per layer of
    (K [P, nkv, d], V [P, nkv, d]); None: P = 0). Returns (out, new_cache) where out holds logits
    [T, V], hidden_states [L+1, T, H] (HF convention), resid_post [L, T, H], attn_z_0, rot_q_0
    [T, nh, d], mlp_post_0 [T, I], and new_cache = cache ++ this call's K, V (the caller decides
    whether to keep it: update_past_key_values)."""
    block = block or cfg.bd
    ids = torch.as_tensor(ids, dtype=torch.long)
    T = ids.shape[0]
    P = 0 if cache is None else cache[0][0].shape[0]
    slots = torch.arange(P, P + T)
    cos, sin = rope_tables(slots, cfg.d, cfg.theta, dtype)
    keys_slots = torch.arange(P + T)
    visible = (keys_slots[None, :] // block) <= (slots[:, None] // block)  # eval_block_diff_mask
    group = cfg.nh // cfg.nkv
    x = W["model.embed_tokens.weight"][ids]
    hidden, resid, extras, new_cache = [x], [], {}, []
    for layer in range(cfg.L):
        p = f"model.layers.{layer}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps)

        def proj(name, heads):
            return (h @ W[p + f"self_attn.{name}.weight"].T + W[p + f"self_attn.{name}.bias"]).view(T, heads, cfg.d)

        q = rope(proj("q_proj", cfg.nh), cos, sin)
        k = rope(proj("k_proj", cfg.nkv), cos, sin)
        v = proj("v_proj", cfg.nkv)
        if cache is not None:
            k = torch.cat([cache[layer][0], k], dim=0)
            v = torch.cat([cache[layer][1], v], dim=0)
        new_cache.append((k, v))
        kj = k.repeat_interleave(group, dim=1)  # repeat_kv: query head j reads kv head j // group
        vj = v.repeat_interleave(group, dim=1)
        s = torch.einsum("thd,uhd->htu", q, kj) * cfg.d ** -0.5
        s = s.masked_fill(~visible[None], float("-inf"))
        z = torch.einsum("htu,uhd->thd", torch.softmax(s, dim=-1), vj)
        x = x + z.reshape(T, cfg.nh * cfg.d) @ W[p + "self_attn.o_proj.weight"].T
        h2 = rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        gate = h2 @ W[p + "mlp.gate_proj.weight"].T
        post = gate * torch.sigmoid(gate) * (h2 @ W[p + "mlp.up_proj.weight"].T)
        x = x + post @ W[p + "mlp.down_proj.weight"].T
        if layer == 0:
            extras = {"attn_z_0": z, "rot_q_0": q, "mlp_post_0": post}
        resid.append(x)
        if layer < cfg.L - 1:
            hidden.append(x)
    xf = rms_norm(x, W["model.norm.weight"], cfg.eps)
    hidden.append(xf)
    head = W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]
    out = {"logits": xf @ head.T, "hidden_states": torch.stack(hidden), "resid_post": torch.stack(resid), **extras}
    return out, new_cache


class Model:
    """A checkpoint in float64, with the forward batch_sample calls."""

    def __init__(self, model_dir, dtype=torch.float64):
        self.cfg, weights = load_model(model_dir)
        self.W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype) for k, v in weights.items()}
        self.dtype = dtype
        self.forwards = 0

    def __call__(self, ids, cache, block):
        self.forwards += 1
        out, new_cache = forward(self.W, self.cfg, ids, cache, block, self.dtype)
        return out["logits"], new_cache


def _note(margins, key, value):
    margins[key] = min(margins.get(key, float("inf")), float(value))


def _top2_gap(logits):
    top = torch.topk(logits, 2, dim=-1).values
    return (top[..., 0] - top[..., 1]).min()


TOKEN_STREAM = TOKEN


def sample_with_top_p(logits, temperature, top_p, top_k, u, margins):
    """One slot's sampled choice, as modeling.py's sample_with_top_p (temperature > 0):
    probs = softmax(logits / T); sorted descending, every token after the first whose cumulative
    mass before it exceeds top_p is dropped (the first always stays); top_k (not in the published
    code; sonde applies it after top-p as Dream's sampler does) keeps the k most probable of the
    rest (ties kept); the rest are renormalised. The token is the inverse CDF over token ids at u
    (the first id whose cumulative probability exceeds u) instead of torch.multinomial, and its
    confidence is its renormalised probability (the published x1_p). Records the decision margins:
    the cut's distance to top_p, the k-th/(k+1)-th logit gap, and u's distance to the CDF steps
    around the drawn id."""
    probs = torch.softmax(logits / temperature, dim=-1).numpy()
    lg = logits.numpy()
    V = probs.shape[0]
    ids = np.arange(V)
    order = np.lexsort((ids, -probs))  # descending probability, equal ones by id
    cum = np.cumsum(probs[order])
    keep = np.ones(V, dtype=bool)
    if top_p < 1:
        drop_sorted = np.zeros(V, dtype=bool)
        drop_sorted[1:] = cum[:-1] > top_p
        keep[order] = ~drop_sorted
        _note(margins, "min_top_p_margin", np.abs(cum - top_p).min())
    if top_k is not None and top_k < keep.sum():
        kept = ids[keep]
        ranked = kept[np.lexsort((kept, -lg[kept]))]
        kth = lg[ranked[top_k - 1]]
        _note(margins, "min_top_k_gap", kth - lg[ranked[top_k]])
        keep &= lg >= kth
    p = np.where(keep, probs, 0.0)
    p = p / p.sum()
    cdf = np.cumsum(p)
    x = min(int(np.searchsorted(cdf, u, side="right")), V - 1)
    while p[x] == 0:  # rounding left u past the total: the last nonzero id
        x -= 1
    below = cdf[x - 1] if x > 0 else 0.0
    _note(margins, "min_cdf_margin", min(u - below, cdf[x] - u))
    return x, float(p[x])


def batch_sample(model, prompt, block_size, max_new_tokens, small_block_size, threshold, stop_token, pad_id,
                 mask_id, margins=None, temperature=0.0, top_p=0.95, top_k=None, seed=0):
    """generation_functions.py's batch_sample for one prompt (seq_len = min_len = len(prompt)),
    use_block_cache False; greedy at temperature 0 (top_p plays no part), else sampled by
    `sample_with_top_p` with the draw counter_uniform(seed, step, slot, Token): step counts this
    prompt's block forwards before the current one (sub-block iterations and closing forwards, from
    0; the prompt's prefill is not one), slot is the slot's index in the sequence (the prompt's
    first token is slot 0). The token after a full block is its argmax at any temperature, as
    published. Returns the token list
    batch_sample returns for the row: prompt + generated slots (pad after the stop token, and the
    one token the last block's closing forward predicted when the row never stopped).

    The published steps, in words:
    * num_blocks = max_new_tokens // block_size + len // block_size; blocks before len // block_size
      hold only prompt.
    * len > block_size: one forward over the prompt's whole blocks fills the KV cache; when len is
      a multiple of block_size, the argmax of its last logits is appended (the next block's first
      slot). Otherwise (len <= block_size) the cache starts empty, even when len == block_size: the
      first decoded block is then forwarded without the prompt (the published code's behaviour).
    * Each block: the sequence so far, masks up to the block's end. Sub-blocks of small_block_size
      in order; while a sub-block has masks: forward the block's block_size slots over the cache
      (not kept; this call passes no block_size, so its mask uses the forward's default 32, which
      differs from the block only when block_size > 32), shift the logits right by one inside the block (slot i reads logits[i - 1], slot
      0 its own), and for the sub-block's masked slots take x = argmax and p = softmax(logits)[x];
      commit every masked slot with p > threshold and always the masked slot of highest p (the
      first of equal ones); a committed stop_token marks the row finished (the block is still
      completed).
    * When the block has no mask left: a finished row has every slot after its first stop_token
      (from the prompt's end on) set to pad and stops; otherwise one forward of the block over the
      cache appends its K/V to the cache, and the argmax of its last logits is appended.
    margins (dict, optional) collects the smallest top-1/top-2 logit gap of any argmax decision,
    the smallest |p - threshold| of any masked slot, and the smallest gap between the most
    confident masked slot and the next when that slot commits only for being the most confident
    (p <= threshold), so a caller can reject near-ties; sampled runs add the draws' margins
    (`sample_with_top_p`).
    """
    margins = {} if margins is None else margins
    bs, sbs = block_size, small_block_size
    assert bs % sbs == 0 and sbs >= 1
    L = len(prompt)
    x = list(prompt)
    num_blocks = max_new_tokens // bs + L // bs
    cache = None
    if L > bs:
        full = L // bs * bs
        logits, cache = model(x[:full], None, bs)
        if L % bs == 0:
            _note(margins, "min_logit_gap", _top2_gap(logits[-1:]))
            x.append(int(logits[-1].argmax()))
    finished = False
    step = 0
    for block_idx in range(L // bs, num_blocks):
        end = (block_idx + 1) * bs
        x = x[:end] + [mask_id] * max(0, end - len(x))
        lo = end - bs
        while True:
            if mask_id not in x[lo:end]:
                if finished:
                    if L < end:
                        stop_at = x.index(stop_token, L)
                        x = x[: stop_at + 1] + [pad_id] * (len(x) - stop_at - 1)
                    return x
                logits, cache = model(x[lo:end], cache, bs)
                _note(margins, "min_logit_gap", _top2_gap(logits[-1:]))
                x.append(int(logits[-1].argmax()))
                step += 1
                break
            for sb in range(0, bs, sbs):
                while True:
                    masked = [lo + sb + i for i in range(sbs) if x[lo + sb + i] == mask_id]
                    if not masked:
                        break
                    logits, _ = model(x[lo:end], cache, FORWARD_BLOCK)
                    shifted = torch.cat([logits[:1], logits[:-1]], dim=0)[sb : sb + sbs]
                    if temperature > 0:
                        picked = {s: sample_with_top_p(shifted[s - lo - sb], temperature, top_p, top_k,
                                                       counter_uniform(seed, step, s, TOKEN_STREAM), margins)
                                  for s in masked}
                        choice = torch.tensor([picked[lo + sb + i][0] if lo + sb + i in picked else 0
                                               for i in range(sbs)])
                        conf = torch.tensor([picked[lo + sb + i][1] if lo + sb + i in picked else 0.0
                                             for i in range(sbs)], dtype=torch.float64)
                    else:
                        probs = torch.softmax(shifted, dim=-1)
                        choice = probs.argmax(dim=-1)
                        conf = probs.gather(-1, choice[:, None])[:, 0]
                    step += 1
                    committed = []
                    best, best_p = None, -1.0
                    for i in range(sbs):
                        slot = lo + sb + i
                        if slot not in masked:
                            continue
                        if temperature == 0:
                            _note(margins, "min_logit_gap", _top2_gap(shifted[i : i + 1]))
                        _note(margins, "min_threshold_margin", abs(float(conf[i]) - threshold))
                        if float(conf[i]) > threshold:
                            committed.append(slot)
                        if float(conf[i]) > best_p:
                            best, best_p = slot, float(conf[i])
                    others = [float(conf[s - lo - sb]) for s in masked if s != best]
                    if others and best_p <= threshold:  # only then does being the best decide a commit
                        _note(margins, "min_best_margin", best_p - max(others))
                    if best not in committed:
                        committed.append(best)
                    for slot in committed:
                        x[slot] = int(choice[slot - lo - sb])
                        finished = finished or x[slot] == stop_token
    return x


def completion_of(sequence, prompt_len, stop_token):
    """What a user is given: the generated slots up to and including the first stop token."""
    gen = sequence[prompt_len:]
    if stop_token in gen:
        gen = gen[: gen.index(stop_token) + 1]
    return gen
