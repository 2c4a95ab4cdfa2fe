#!/usr/bin/python3
"""Fast-dLLM's cached and parallel generation for LLaDA (Wu et al. 2025, arXiv:2505.22618), written
from its published llada/generate.py (NVlabs/Fast-dLLM: generate, generate_with_prefix_cache,
generate_with_dual_cache, get_transfer_index) and the K/V cache of its modeling_llada.py, not
from sonde's sources. The model is llada_reference.py's forward, extended with a cache.

The published algorithms (prompt [1, T], canvas x of T + gen_length slots, blocks of block_length,
steps // blocks steps per block; get_num_transfer_tokens as in LLaDA's generate.py):

* threshold (parallel decoding, get_transfer_index): the candidates are the masked slots up to the
  block's end; all of them are ranked by confidence (torch.topk over the mask count) and the first
  always commits, each later one only if its confidence >= threshold. Without a threshold the top
  num_transfer_tokens[i] commit.
* generate (no cache, with threshold): each step a full forward; the block ends when it has no
  mask left (not after a fixed step count).
* generate_with_prefix_cache: a block's first step is a full forward that also returns every
  slot's K/V (post-RoPE); its candidates are the masked slots before the block's end; then the
  cache is cut to the slots before the block. Each later step runs the model on x[lo:] (the block
  and everything after it) at positions lo.. over that prefix cache; candidates: the block's
  masked slots. The published loop calls add_gumbel_noise once more on these logits before
  get_transfer_index (its result unused): at temperature > 0 that consumes a [1, N - lo, V]
  float64 draw per step, which a seeded reproduction must consume too.
* generate_with_dual_cache: the same first step; each later step runs the model on x[lo:hi] (the
  block alone), its K/V replacing the block's in the cache, so the queries attend to the prefix and
  the suffix as the first step cached them and to the block as computed now.
* In both cached loops the later steps run in `while True`: the forward first, then the check
  "block full -> next block". So every block has at least one cached step, even when the first
  step filled the block (it then commits nothing, but draws its noise). The cached step i uses
  num_transfer_tokens[:, i]; the published code indexes past the schedule when the first step
  fills a block without a threshold (steps per block 1); here that step commits nothing.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llada_reference as ref  # noqa: E402


def forward_range(model, ids, start, cache=None):
    """The model over ids [1, W] at positions start..start+W-1. cache: per layer (K, V) of every
    slot [1, nkv, N, d] (post-RoPE K); the range's own K/V replace the cache's slots
    [start, start + W) and the queries attend to all N slots (without a cache: to the range only,
    start 0). Returns logits [1, W, V] and the new per-layer (K, V) of the range."""
    W, cfg = model.W, model.cfg
    B, T = ids.shape
    nh, nkv, d = cfg.nh, cfg.nkv, cfg.d

    def lin(x, name, bias):
        y = x @ W[name + ".weight"].T
        return y + W[name + ".bias"] if bias else y

    sin, cos = ref.rotary(start + T, d, cfg.theta, model.dtype)
    sin, cos = sin[start:], cos[start:]
    x = W["model.transformer.wte.weight"][ids]
    kv = []
    for i in range(cfg.L):
        p = f"model.transformer.blocks.{i}."
        h = ref.rms_norm(x, W[p + "attn_norm.weight"], cfg.eps)
        q = lin(h, p + "q_proj", cfg.qkv_bias).view(B, T, nh, d).transpose(1, 2)
        k = lin(h, p + "k_proj", cfg.qkv_bias).view(B, T, nkv, d).transpose(1, 2)
        v = lin(h, p + "v_proj", cfg.qkv_bias).view(B, T, nkv, d).transpose(1, 2)
        q = q * cos + ref.rotate_half(q) * sin
        k = k * cos + ref.rotate_half(k) * sin
        kv.append((k, v))
        if cache is not None:
            ck, cv = cache[i]
            k = torch.cat([ck[:, :, :start], k, ck[:, :, start + T:]], dim=2)
            v = torch.cat([cv[:, :, :start], v, cv[:, :, start + T:]], dim=2)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v
        z = att.transpose(1, 2).contiguous().view(B, T, nh * d)
        x = x + lin(z, p + "attn_out", cfg.bias)
        h2 = ref.rms_norm(x, W[p + "ff_norm.weight"], cfg.eps)
        x = x + lin(F.silu(lin(h2, p + "ff_proj", cfg.bias)) * lin(h2, p + "up_proj", cfg.bias), p + "ff_out", cfg.bias)
    xf = ref.rms_norm(x, W["model.transformer.ln_f.weight"], cfg.eps)
    head = W["model.transformer.wte.weight"] if cfg.tied else W["model.transformer.ff_out.weight"]
    logits = xf @ head.T
    if not cfg.tied and cfg.bias:
        logits = logits + W["model.transformer.ff_out.bias"]
    return logits, kv


def summary(row):
    """A logits row as the goldens keep it: columns 0, 128, ..., the max and the logsumexp."""
    row = row.to(torch.float64)
    return [float(v) for v in row[::128]] + [float(row.max()), float(torch.logsumexp(row, 0))]


def transfer(logits, temperature, remasking, mask_index, x, k, threshold, margins):
    """get_transfer_index for one row: logits [W, V], mask_index/x [W]. Returns x0 and the chosen
    slots (indices into the W slots)."""
    noisy = ref.add_gumbel_noise(logits, temperature)
    x0 = torch.argmax(noisy, dim=-1)
    if remasking == "low_confidence":
        p = F.softmax(logits.to(torch.float64), dim=-1)
        x0_p = torch.gather(p, -1, x0.unsqueeze(-1)).squeeze(-1)
    else:
        x0_p = torch.rand(x0.shape[0])
    x0 = torch.where(mask_index, x0, x)
    conf = torch.where(mask_index, x0_p.to(torch.float64), torch.tensor(-np.inf, dtype=torch.float64))
    if threshold is not None:
        k = int(mask_index.sum())
    order = sorted(range(conf.shape[0]), key=lambda j: -float(conf[j]))[:k]  # ties to the lower slot
    chosen = [j for n, j in enumerate(order) if n == 0 or threshold is None or float(conf[j]) >= threshold]
    if margins is not None:
        record(margins, logits, noisy, conf, chosen, order, temperature, remasking, threshold)
    return x0, chosen


def record(m, logits, noisy, conf, chosen, order, temperature, remasking, threshold):
    def keep(key, value):
        m[key] = min(m.get(key, float("inf")), float(value))

    for j in order:  # every ranked slot's token (a chosen one commits it)
        if temperature == 0:
            top = torch.topk(logits[j].to(torch.float64), 2).values
            keep("min_logit_gap", top[0] - top[1])
        else:
            top = torch.topk(torch.log(noisy[j]), 2).values
            keep("min_gumbel_gap", top[0] - top[1])
    finite = [j for j in range(conf.shape[0]) if math.isfinite(float(conf[j]))]
    if threshold is not None:
        for j in order[1:]:
            keep("min_threshold_margin", abs(float(conf[j]) - threshold))
        if len(order) > 1:
            keep("min_first_margin", float(conf[order[0]]) - float(conf[order[1]]))
        return
    rest = [j for j in finite if j not in chosen]
    if chosen and rest:
        last = min(float(conf[j]) for j in chosen)
        first_out = max(float(conf[j]) for j in rest)
        key = "min_selection_margin_rel" if remasking == "low_confidence" else "min_random_margin"
        keep(key, (last - first_out) / last if remasking == "low_confidence" else last - first_out)


def generate(model, prompt, steps, gen_length, block_length, temperature=0.0, remasking="low_confidence",
             mask_id=126336, threshold=None, cache="none", margins=None, windows=None):
    """Fast-dLLM's generate (cache "none"), generate_with_prefix_cache ("prefix") or
    generate_with_dual_cache ("dual") for one prompt [1, T]. `windows` (a list, optional) gets one
    entry per forward: whether it was full, its first slot and width, and, for the cached ones,
    the summary of every row's logits."""
    T = prompt.shape[1]
    x = torch.full((1, T + gen_length), mask_id, dtype=torch.long)
    x[:, :T] = prompt.clone()
    N = x.shape[1]
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks

    def full_step(lo, hi, i, num, keep_cache):
        logits, kv = forward_range(model, x, 0)
        if windows is not None:
            windows.append({"refresh": keep_cache, "first": 0, "width": N})
        mask_index = x[0] == mask_id
        mask_index[hi:] = False
        x0, chosen = transfer(logits[0], temperature, remasking, mask_index, x[0],
                              int(num[0, i]) if threshold is None else None, threshold, margins)
        for j in chosen:
            x[0, j] = x0[j]
        return kv

    for b in range(num_blocks):
        lo, hi = T + b * block_length, T + (b + 1) * block_length
        num = ref.get_num_transfer_tokens(x[:, lo:hi] == mask_id, steps)
        if cache == "none":
            i = 0
            while True:
                full_step(lo, hi, i, num, False)
                i += 1
                if threshold is None and i == steps:  # LLaDA's original loop: exactly `steps`
                    break
                if threshold is not None and not (x[0, lo:hi] == mask_id).any():
                    break
            continue
        kv = full_step(lo, hi, 0, num, True)
        end = N if cache == "prefix" else hi
        i = 1
        while True:
            logits, new_kv = forward_range(model, x[:, lo:end], lo, kv)
            if cache == "dual":  # replace_position: the block's K/V are rewritten in the cache
                kv = [(torch.cat([ck[:, :, :lo], nk, ck[:, :, hi:]], 2), torch.cat([cv[:, :, :lo], nv, cv[:, :, hi:]], 2))
                      for (ck, cv), (nk, nv) in zip(kv, new_kv)]
            if windows is not None:
                windows.append({"refresh": False, "first": lo, "width": end - lo,
                                "rows": [[summary(logits[0, q]) for q in range(end - lo)]]})
            if cache == "prefix":
                ref.add_gumbel_noise(logits, temperature)  # the published loop's unused draw
            mask_index = x[0, lo:end] == mask_id
            mask_index[hi - lo:] = False
            k = (int(num[0, i]) if i < steps else 0) if threshold is None else None
            x0, chosen = transfer(logits[0], temperature, remasking, mask_index, x[0, lo:end], k, threshold,
                                  margins if bool(mask_index.any()) else None)
            if bool(mask_index.any()):
                for j in chosen:
                    x[0, lo + j] = x0[j]
            if not (x[0, lo:hi] == mask_id).any():
                break
            i += 1
    return x
