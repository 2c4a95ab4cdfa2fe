#!/usr/bin/python3
"""An independent PyTorch reference of LLaDA (GSAI-ML/LLaDA-8B-Base, -Instruct, LLaDA-1.5), written
from the published modeling_llada.py (LLaDAModelLM with block_type "llama") and generate.py, not
from sonde's sources. Only the checkpoint reader is shared with qwen2_reference.py.

Forward (modeling_llada.py, LLaDAModel.forward and LLaDALlamaBlock.forward):
    x = wte(ids)                                         (no embedding scale or norm)
    per block:  h = attn_norm(x)
                q, k, v = q_proj(h), k_proj(h), v_proj(h)  (bias iff include_bias or include_qkv_bias)
                q, k = rope(q), rope(k)                  (rotate_half; inv_freq = 1 / theta^(arange(0, d, 2) / d)
                                                          and angles in float32, as RotaryEmbedding builds them)
                att = softmax(q k^T / sqrt(d)) v          (no mask: fully bidirectional; GQA by repeat_interleave)
                x = x + attn_out(att)
                h = ff_norm(x)
                x = x + ff_out(silu(ff_proj(h)) * up_proj(h))
    logits = ff_out(ln_f(x))  (wte^T when weight_tying); no logit shift, no scaling.
    RMSLayerNorm: w * x / sqrt(mean(x^2) + rms_norm_eps).
Everything runs in the compute dtype given (float64 for the goldens).

Generation (generate.py, generate()): see `generate` below.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen2_reference import read_safetensors  # noqa: E402  (the checkpoint reader only)


class LladaConfig:
    def __init__(self, raw):
        self.raw = raw
        self.H = raw["d_model"]
        self.L = raw["n_layers"]
        self.nh = raw["n_heads"]
        self.nkv = raw.get("n_kv_heads") or self.nh
        self.d = self.H // self.nh
        self.I = raw.get("mlp_hidden_size") or raw["mlp_ratio"] * self.H
        self.V = raw.get("embedding_size") or raw["vocab_size"]
        self.eps = raw["rms_norm_eps"]
        self.theta = raw["rope_theta"]
        self.tied = bool(raw.get("weight_tying", False))
        self.bias = bool(raw.get("include_bias", False))
        self.qkv_bias = self.bias or bool(raw.get("include_qkv_bias", False))
        self.mask_id = raw["mask_token_id"]
        assert raw["block_type"] == "llama" and raw.get("layer_norm_type", "rms") == "rms"
        assert not raw.get("alibi") and raw.get("rope", True) and not raw.get("scale_logits")


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = LladaConfig(json.load(f))
    return cfg, read_safetensors(os.path.join(model_dir, "model.safetensors"))


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps))


def rotary(T, d, theta, dtype):
    """RotaryEmbedding.get_rotary_embedding: inv_freq and the angle table in float32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    seq = torch.arange(T, dtype=torch.float32)
    freqs = torch.einsum("i , j -> i j", seq, inv_freq)
    pos = torch.cat((freqs, freqs), dim=-1).to(dtype)
    return pos.sin(), pos.cos()


def rotate_half(x):  # x [B, nh, T, d]
    B, nh, T, hs = x.shape
    x1, x2 = x.view(B, nh, T, 2, hs // 2).unbind(dim=-2)
    return torch.cat((-x2, x1), dim=-1)


def forward(W, cfg, ids, dtype=torch.float64):
    """ids: [B, T] long. Returns logits [B, T, V] and, for row 0, the hooks the goldens hold."""
    def lin(x, name, bias):
        y = x @ W[name + ".weight"].T
        return y + W[name + ".bias"] if bias else y

    B, T = ids.shape
    nh, nkv, d = cfg.nh, cfg.nkv, cfg.d
    sin, cos = rotary(T, d, cfg.theta, dtype)
    x = W["model.transformer.wte.weight"][ids]
    hidden, resid, out = [x], [], {}
    for i in range(cfg.L):
        p = f"model.transformer.blocks.{i}."
        h = rms_norm(x, W[p + "attn_norm.weight"], cfg.eps)
        q = lin(h, p + "q_proj", cfg.qkv_bias).view(B, T, nh, d).transpose(1, 2)
        k = lin(h, p + "k_proj", cfg.qkv_bias).view(B, T, nkv, d).transpose(1, 2)
        v = lin(h, p + "v_proj", cfg.qkv_bias).view(B, T, nkv, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v  # [B, nh, T, d]
        z = att.transpose(1, 2).contiguous()  # [B, T, nh, d]
        x = x + lin(z.view(B, T, nh * d), p + "attn_out", cfg.bias)
        h2 = rms_norm(x, W[p + "ff_norm.weight"], cfg.eps)
        act = F.silu(lin(h2, p + "ff_proj", cfg.bias)) * lin(h2, p + "up_proj", cfg.bias)
        x = x + lin(act, p + "ff_out", cfg.bias)
        if i == 0:
            out["attn_z_0"], out["rot_q_0"], out["mlp_post_0"] = z[0], q.transpose(1, 2)[0], act[0]
        resid.append(x)
        if i < cfg.L - 1:
            hidden.append(x)
    xf = rms_norm(x, W["model.transformer.ln_f.weight"], cfg.eps)
    hidden.append(xf)
    if cfg.tied:
        logits = xf @ W["model.transformer.wte.weight"].T
    else:
        logits = lin(xf, "model.transformer.ff_out", cfg.bias)
    out["logits"] = logits
    out["hidden_states"] = torch.stack([h[0] for h in hidden])
    out["resid_post"] = torch.stack([r[0] for r in resid])
    return out


class Model:
    """The weights as torch tensors in one compute dtype, and a logits function over [B, T] ids."""

    def __init__(self, model_dir, dtype=torch.float64):
        self.cfg, weights = load_model(model_dir)
        self.dtype = dtype
        self.W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype) for k, v in weights.items()}

    def __call__(self, ids):
        return forward(self.W, self.cfg, ids, self.dtype)["logits"]


# ----------------------------------------------------------------------------- generate.py
def add_gumbel_noise(logits, temperature):
    """As published: Gumbel-max in float64, exp(logits) / (-log u)^temperature."""
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    noise = torch.rand_like(logits, dtype=torch.float64)
    gumbel_noise = (-torch.log(noise)) ** temperature
    return logits.exp() / gumbel_noise


def get_num_transfer_tokens(mask_index, steps):
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num[i, :remainder[i]] += 1
    return num


def generate(model, prompt, steps=128, gen_length=128, block_length=128, temperature=0.0, cfg_scale=0.0,
             remasking="low_confidence", mask_id=126336, margins=None):
    """generate.py's generate() for a prompt [B, T]. `margins` (a dict, optional) collects how far
    each decision is from a tie, for the goldens' robustness checks (not part of the algorithm):
    min_logit_gap (argmax, temperature 0), min_gumbel_gap (argmax of log(exp(l)/g), temperature > 0),
    min_selection_margin_rel (low_confidence: last chosen - first unchosen over the last chosen)."""
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt.clone()
    prompt_index = x != mask_id
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    for num_block in range(num_blocks):
        lo = prompt.shape[1] + num_block * block_length
        block_mask_index = x[:, lo:lo + block_length] == mask_id
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):
            mask_index = x == mask_id
            if cfg_scale > 0.0:
                un_x = x.clone()
                un_x[prompt_index] = mask_id
                logits = model(torch.cat([x, un_x], dim=0))
                logits, un_logits = torch.chunk(logits, 2, dim=0)
                logits = un_logits + (cfg_scale + 1) * (logits - un_logits)
            else:
                logits = model(x)
            logits_with_noise = add_gumbel_noise(logits, temperature=temperature)
            x0 = torch.argmax(logits_with_noise, dim=-1)
            if remasking == "low_confidence":
                p = F.softmax(logits.to(torch.float64), dim=-1)
                x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            elif remasking == "random":
                x0_p = torch.rand((x0.shape[0], x0.shape[1]))
            else:
                raise NotImplementedError(remasking)
            x0_p[:, lo + block_length:] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.tensor(-np.inf, dtype=x0_p.dtype))
            transfer_index = torch.zeros_like(x0, dtype=torch.bool)
            for j in range(confidence.shape[0]):
                k = int(num_transfer_tokens[j, i])
                _, select_index = torch.topk(confidence[j], k=k)
                transfer_index[j, select_index] = True
                if margins is not None:
                    record_margins(margins, logits[j], logits_with_noise[j], confidence[j], select_index,
                                   transfer_index[j], temperature, remasking)
            x[transfer_index] = x0[transfer_index]
    return x


def record_margins(m, logits, noisy, confidence, chosen, chosen_mask, temperature, remasking):
    def keep(key, value):
        m[key] = min(m.get(key, float("inf")), float(value))

    for j in chosen.tolist():  # the committed slots' token choice
        if temperature == 0:
            top = torch.topk(logits[j].to(torch.float64), 2).values
            keep("min_logit_gap", top[0] - top[1])
        else:
            top = torch.topk(torch.log(noisy[j]), 2).values
            keep("min_gumbel_gap", top[0] - top[1])
    finite = torch.isfinite(confidence) & ~chosen_mask
    if len(chosen) and finite.any():
        last = confidence[chosen].min().double()
        first_out = confidence[finite].max().double()
        if remasking == "low_confidence":
            keep("min_selection_margin_rel", (last - first_out) / last)
        else:
            keep("min_random_margin", last - first_out)
