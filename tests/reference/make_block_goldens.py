#!/usr/bin/python3
"""Goldens for Dream's block-wise decoding modes from an independent float64 PyTorch reference.

    /usr/bin/python3 tests/reference/make_block_goldens.py --sonde build/bin/sonde \
        --out tests/data/block-tiny-dream-f32.json

Written from docs/generation.md ("Block mode", "Parallel unmasking"), not from sonde's sources:

* block mode: the generation cut into blocks of `block_size` slots (the last one shorter), filled
  left to right; block b gets floor(S*end_b/G) - floor(S*start_b/G) of the S steps, and its step j
  commits floor((j+1)*L/S_b) - floor(j*L/S_b) of its L slots: the most confident masked slots of
  the block (ties to the lower slot) for maskgit_plus / topk_margin / entropy; for origin each
  masked slot of the block is revealed when counter_uniform(seed, step, slot, Reveal) < k / n
  (1 on the block's last step), n = the block's masked slots.
* confidence_threshold: every masked slot of the current block whose top probability is >= the
  threshold, and at least the most confident one; a row moves to its next block when its block is
  full and the loop ends when every row is done.
* tokens_per_step K: min(K, masked slots of the block) per step, by confidence.
* block-cache / dual-cache (Fast-dLLM's prefix and dual caches, arXiv 2505.22618 Algorithm 1,
  as docs/generation.md "Cached modes" states them): block mode whose forwards change. A block's
  first step is the full forward, and it keeps every slot's post-RoPE K and V (per layer). Each
  later step of the block computes only slots [lo - 1, N) (block-cache) or [lo - 1, hi)
  (dual-cache), lo..hi the block's slots (lo - 1: Dream's slot lo is predicted from slot lo - 1);
  its queries attend over all N keys, the range's computed afresh and the others' from the cache,
  and the range's K/V replace theirs in the cache. The batch works on one block: without a
  schedule a row whose block is full waits (commits nothing) until every row's is. The logits of
  every recomputed window are recorded (16 columns, the max and the logsumexp of each row).
* refresh_every N (dKV-Cache's periodic refresh, arXiv 2505.15781, as docs/generation.md states
  it): the steps N, 2N, ... of a block (counted from its first step, 0) are full forwards that
  refresh the whole cache too; the steps between compute the range above over that cache.

Only `sonde make-model` is taken from sonde (the weights), and counter_uniform's definition (the
documented splitmix64 chain) for origin's reveals. The forward is make_generation_goldens.py's
(checked against qwen2_reference.forward). Decoding is greedy (temperature 0); prompts are re-drawn
until every decision clears the margins below, so an f32 engine must agree token for token.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_generation_goldens import (Model, check_forward, draw_prompts, forward_batch, left_pad,  # noqa: E402
                                     positions, ref, rope_cos_sin_at, sample_tokens)
from make_goldens import lcg_ids, sha256  # noqa: E402
from counter_rng import REVEAL, counter_uniform  # noqa: E402

MAKE_MODEL = ["--arch", "dream", "--preset", "tiny", "--seed", "33"]
THRESHOLDS = {"min_logit_gap": 1e-3, "min_selection_margin_rel": 1e-3, "min_selection_margin": 1e-4,
              "min_threshold_margin_rel": 1e-3, "min_top_p_margin": 1e-6}
MAX_ATTEMPTS = 400

# name, prompt lengths, settings (CLI names without dashes); temperature 0 throughout.
CASES = [
    ("block8_maskgit_plus_steps24", [6], dict(alg="maskgit_plus", steps=24, max_new_tokens=24, block_size=8)),
    ("block8_topk_margin_len20_steps7", [7], dict(alg="topk_margin", steps=7, max_new_tokens=20, block_size=8)),
    ("block8_entropy_topp0.9_steps12", [6], dict(alg="entropy", steps=12, max_new_tokens=24, block_size=8, top_p=0.9)),
    ("block8_origin_steps12_seed5", [6], dict(alg="origin", steps=12, max_new_tokens=24, block_size=8, seed=5)),
    ("batch2_block8_entropy_steps12", [5, 12], dict(alg="entropy", steps=12, max_new_tokens=24, block_size=8)),
    ("block8_threshold", [6], dict(alg="confidence_threshold", max_new_tokens=24, block_size=8, threshold="auto")),
    ("exact_threshold", [6], dict(alg="confidence_threshold", max_new_tokens=16, threshold="auto")),
    ("batch2_block8_threshold", [9, 4], dict(alg="confidence_threshold", max_new_tokens=24, block_size=8,
                                             threshold="auto")),
    ("block8_threshold1", [6], dict(alg="confidence_threshold", max_new_tokens=16, block_size=8, threshold=1.0)),
    ("block8_maskgit_plus_tps3", [6], dict(alg="maskgit_plus", max_new_tokens=24, block_size=8, tokens_per_step=3)),
    ("blockcache8_maskgit_plus_steps24", [6], dict(mode="block-cache", alg="maskgit_plus", steps=24, max_new_tokens=24,
                                                   block_size=8)),
    ("dualcache8_maskgit_plus_steps24", [6], dict(mode="dual-cache", alg="maskgit_plus", steps=24, max_new_tokens=24,
                                                  block_size=8)),
    ("dualcache8_topk_margin_len20_steps10", [7], dict(mode="dual-cache", alg="topk_margin", steps=10, max_new_tokens=20,
                                                       block_size=8)),
    ("batch2_blockcache8_entropy_steps12", [5, 12], dict(mode="block-cache", alg="entropy", steps=12, max_new_tokens=24,
                                                         block_size=8)),
    ("batch2_dualcache8_threshold", [9, 4], dict(mode="dual-cache", alg="confidence_threshold", max_new_tokens=24,
                                                 block_size=8, threshold="auto")),
    ("blockcache8_threshold", [6], dict(mode="block-cache", alg="confidence_threshold", max_new_tokens=24, block_size=8,
                                        threshold="auto")),
    ("dualcache8_entropy_tps4", [6], dict(mode="dual-cache", alg="entropy", max_new_tokens=24, block_size=8,
                                          tokens_per_step=4)),
    ("blockcache8_maskgit_plus_steps24_refresh3", [6], dict(mode="block-cache", alg="maskgit_plus", steps=24,
                                                            max_new_tokens=24, block_size=8, refresh_every=3)),
    ("dualcache8_entropy_tps2_refresh2", [6], dict(mode="dual-cache", alg="entropy", max_new_tokens=24, block_size=8,
                                                   tokens_per_step=2, refresh_every=2)),
    ("batch2_dualcache8_threshold_refresh2", [9, 4], dict(mode="dual-cache", alg="confidence_threshold",
                                                          max_new_tokens=24, block_size=8, threshold="auto",
                                                          refresh_every=2)),
]
LOGIT_COLUMNS = list(range(0, 2048, 128))  # the tiny preset's vocabulary is 2048




def forward_kv(m, ids, pos, allowed, cache=None, first=0):
    """Logits [B, W, V] (float64) of slots [first, first + W) given their ids, pos [B, W], and the
    per-layer post-RoPE (K, V) [B, N, nkv, d] of the whole sequence after the call. cache None:
    the full forward (W = N). Otherwise the range's K/V are computed and the other slots' read
    from `cache`; queries are the range's rows. allowed: [B, N, N] bool over all slots, or None."""
    cfg, W = m.cfg, m.W
    B, Wn = ids.shape
    nh, nkv, d = cfg.nh, cfg.nkv, cfg.d
    x = W["model.embed_tokens.weight"][ids]
    cos, sin = rope_cos_sin_at(pos, d, cfg.theta, torch.float64)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    kv_of = torch.arange(nh) // (nh // nkv)
    half = d // 2

    def rope(t):
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin

    qa = allowed[:, first:first + Wn] if allowed is not None else None
    out = []
    for layer in range(cfg.L):
        p = f"model.layers.{layer}."
        h = ref.rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T + W[p + "self_attn.q_proj.bias"]).view(B, Wn, nh, d)
        k = (h @ W[p + "self_attn.k_proj.weight"].T + W[p + "self_attn.k_proj.bias"]).view(B, Wn, nkv, d)
        v = (h @ W[p + "self_attn.v_proj.weight"].T + W[p + "self_attn.v_proj.bias"]).view(B, Wn, nkv, d)
        q, k = rope(q), rope(k)
        if cache is None:
            K, V = k, v
        else:
            K, V = cache[layer][0].clone(), cache[layer][1].clone()
            K[:, first:first + Wn], V[:, first:first + Wn] = k, v
        out.append((K, V))
        s = torch.einsum("bthd,buhd->bhtu", q, K[:, :, kv_of, :]) * d ** -0.5
        if qa is not None:
            s = s.masked_fill(~qa[:, None], float("-inf"))
        prob = torch.softmax(s, dim=-1)
        if qa is not None:
            prob = prob.masked_fill(~qa.any(-1)[:, None, :, None], 0.0)
        z = torch.einsum("bhtu,buhd->bthd", prob, V[:, :, kv_of, :])
        x = x + z.reshape(B, Wn, nh * d) @ W[p + "self_attn.o_proj.weight"].T
        h2 = ref.rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        g = h2 @ W[p + "mlp.gate_proj.weight"].T
        x = x + (g * torch.sigmoid(g) * (h2 @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    xf = ref.rms_norm(x, W["model.norm.weight"], cfg.eps)
    head = W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]
    return xf @ head.T, out


def summary(rows):
    """What the goldens keep of logits rows [R, V]: LOGIT_COLUMNS, the max and the logsumexp,
    rounded to 1e-7 (the test's tolerance is 1e-4)."""
    return [[round(float(v), 7) for v in list(r[LOGIT_COLUMNS]) + [r.max(), torch.logsumexp(r, 0)]] for r in rows]


def block_decode(m, prompts, st, seeds):
    """Greedy block-wise decoding; returns per-row sequences, per-step canvases and margins."""
    cfg = m.cfg.raw
    mask_id, pad = cfg["mask_token_id"], cfg.get("pad_token_id", 0)
    G, alg = st["max_new_tokens"], st["alg"]
    pids, pmask = left_pad(prompts, pad)
    B, T = pids.shape
    N = T + G
    x = torch.cat([pids, torch.full((B, G), mask_id, dtype=torch.long)], dim=1)
    am = torch.cat([pmask, torch.ones(B, G, dtype=torch.long)], dim=1)
    if (pmask == 0).any():
        tok_idx, allowed = positions(am), (am[:, None, :] == 1) & (am[:, :, None] == 1)
    else:
        tok_idx, allowed = torch.arange(N)[None].expand(B, N), None
    L = st.get("block_size", G)
    blocks = [(s, min(s + L, G)) for s in range(0, G, L)]
    dynamic = alg == "confidence_threshold" or "tokens_per_step" in st
    if not dynamic:
        S = st["steps"]
        bsteps = [S * e // G - S * s // G for s, e in blocks]
        first = [sum(bsteps[:b]) for b in range(len(blocks))]
    pads = [T - len(p) for p in prompts]
    mode = st.get("mode", "block")
    cached = mode in ("block-cache", "dual-cache")
    cache, cache_block, in_block = None, -1, 0
    windows = []  # cached modes: per step, the forward's first slot, width and per row summaries
    cur = [0] * B
    hist = []
    mg = {k: float("inf") for k in THRESHOLDS}
    i = 0
    while True:
        if not dynamic:
            if i == S:
                break
            cur = [max(b for b in range(len(blocks)) if first[b] <= i)] * B
        else:
            for r in range(B):
                while cur[r] < len(blocks) and not (x[r, T + blocks[cur[r]][0]:T + blocks[cur[r]][1]] == mask_id).any():
                    cur[r] += 1
            if all(c >= len(blocks) for c in cur):
                break
        if cached:
            bb = min(cur)  # the batch's block: rows whose block is full wait
            in_block = 0 if bb != cache_block else in_block + 1
            every = st.get("refresh_every", 0)
            if bb != cache_block or (every > 0 and in_block % every == 0):
                full, cache = forward_kv(m, x, tok_idx, allowed)
                cache_block = bb
                logits = torch.cat([full[:, :1], full[:, :-1]], dim=1)
                windows.append(dict(first=0, width=N, refresh=True))
            else:
                lo, hi = T + blocks[bb][0], T + blocks[bb][1]
                f0, end = lo - 1, (hi if mode == "dual-cache" else N)
                part, cache = forward_kv(m, x[:, f0:end], tok_idx[:, f0:end], allowed, cache, f0)
                logits = torch.full((B, N, part.shape[2]), float("nan"), dtype=torch.float64)
                logits[:, f0 + 1:end + 1] = part[:, :N - f0 - 1]  # slot j's logits are slot j - 1's
                windows.append(dict(first=f0, width=end - f0, refresh=False,
                                    rows=[summary(part[r, :hi - 1 - f0]) for r in range(B)]))
        else:
            logits = forward_batch(m, x, tok_idx, allowed)
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        for r in range(B):
            b = min(cur) if cached else cur[r]
            if cur[r] >= len(blocks):
                continue
            lo, hi = T + blocks[b][0], T + blocks[b][1]
            masked = [j for j in range(lo, hi) if int(x[r, j]) == mask_id]
            if not masked:
                continue
            conf, x0, gap, topp = sample_tokens(logits[r, masked], 0.0, st.get("top_p"), None,
                                                alg == "topk_margin", alg == "entropy")
            mg["min_top_p_margin"] = min(mg["min_top_p_margin"], float(topp.min()))
            n = len(masked)
            if alg == "origin":
                jb, Sb, Lb = i - first[b], bsteps[b], hi - lo
                k = (jb + 1) * Lb // Sb - jb * Lb // Sb
                p = 1.0 if jb == Sb - 1 else min(1.0, k / n)
                for q, j in enumerate(masked):
                    if counter_uniform(seeds[r], i, j - pads[r], REVEAL) < p:
                        x[r, j] = x0[q]
                        mg["min_logit_gap"] = min(mg["min_logit_gap"], float(gap[q]))
                continue
            if alg == "confidence_threshold":
                thr = st["threshold"]
                k = max(1, int((conf >= thr).sum()))
                scale = float(conf.abs().max())
                mg["min_threshold_margin_rel"] = min(mg["min_threshold_margin_rel"],
                                                     float((conf - thr).abs().min()) / scale)
            elif "tokens_per_step" in st:
                k = min(st["tokens_per_step"], n)
            else:
                jb, Sb, Lb = i - first[b], bsteps[b], hi - lo
                k = min(n, (jb + 1) * Lb // Sb - jb * Lb // Sb)
            order = torch.sort(conf, descending=True, stable=True).indices
            chosen = order[:k]
            for q in chosen:
                x[r, masked[int(q)]] = x0[int(q)]
            mg["min_logit_gap"] = min(mg["min_logit_gap"], float(gap[chosen].min()))
            if k < n:
                margin = float(conf[chosen[-1]] - conf[order[k]])
                mg["min_selection_margin"] = min(mg["min_selection_margin"], margin)
                mg["min_selection_margin_rel"] = min(mg["min_selection_margin_rel"], margin / float(conf.abs().max()))
        hist.append([x[r, pads[r]:].tolist() for r in range(B)])
        i += 1
    return dict(sequences=[x[r, pads[r]:].tolist() for r in range(B)],
                history=[[h[r] for h in hist] for r in range(B)], margins=mg, windows=windows)


def safe(margins, alg):
    keys = ["min_logit_gap", "min_top_p_margin"]
    if alg == "confidence_threshold":
        keys += ["min_threshold_margin_rel", "min_selection_margin_rel"]
    elif alg == "entropy":
        keys += ["min_selection_margin"]
    elif alg != "origin":
        keys += ["min_selection_margin_rel"]
    return all(margins[k] >= THRESHOLDS[k] for k in keys)


def auto_threshold(m, prompts, st):
    """A threshold between the largest confidences of the first step, so that it commits a few
    slots at once: the mean of the 3rd and 4th largest top probabilities of the first block."""
    cfg = m.cfg.raw
    x = torch.tensor([prompts[0] + [cfg["mask_token_id"]] * st["max_new_tokens"]])
    logits = forward_batch(m, x, torch.arange(x.shape[1])[None], None)
    logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    T, L = len(prompts[0]), st.get("block_size", st["max_new_tokens"])
    p = torch.softmax(logits[0, T:T + L], dim=-1).max(dim=-1).values
    top = torch.sort(p, descending=True).values
    return float((top[2] + top[3]) / 2)


def run_case(m, case, seed):
    name, lengths, st = case
    for attempt in range(MAX_ATTEMPTS):
        prompts = draw_prompts(m, lengths, seed, attempt)
        s = dict(st)
        if s.get("threshold") == "auto":
            s["threshold"] = round(auto_threshold(m, prompts, s), 6)
        seeds = [s.get("seed", 0) + r for r in range(len(prompts))]
        res = block_decode(m, prompts, s, seeds)
        if len(prompts) > 1 and s["alg"] != "origin":  # a batch gives each row its result alone
            for r, p in enumerate(prompts):
                assert block_decode(m, [p], s, [seeds[r]])["sequences"][0] == res["sequences"][r], (name, r)
        if safe(res["margins"], s["alg"]):
            return prompts, attempt, s, res
    raise SystemExit(f"{name}: no prompts with safe margins in {MAX_ATTEMPTS} attempts")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="sonde-block-golden-") as tmp:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([a.sonde, "make-model", *MAKE_MODEL, "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
        m = Model(model_dir)
        check_forward(m, lcg_ids(5, 9, m.cfg.V - 8))
        out = {"about": "tests/reference/make_block_goldens.py: greedy block-wise Dream decoding, float64 reference",
               "make_model_args": MAKE_MODEL,
               "model_sha256": sha256(os.path.join(model_dir, "model.safetensors")), "cases": []}
        for ci, case in enumerate(CASES):
            prompts, attempt, s, res = run_case(m, case, 3300 + ci)
            margins = {k: (v if v != float("inf") else None) for k, v in res["margins"].items()}
            c = {"name": case[0], "settings": s, "prompts": prompts, "sequences": res["sequences"],
                 "history": res["history"], "margins": margins}
            if res["windows"]:
                c["windows"] = res["windows"]
                plain = dict(s)
                plain.pop("mode")  # the same case in block mode, for the report beside exact
                plain.pop("refresh_every", None)
                c["block_mode_sequences"] = block_decode(m, prompts, plain, [s.get("seed", 0) + r for r in
                                                                             range(len(prompts))])["sequences"]
            out["cases"].append(c)
            print(f"  {case[0]}: prompts {[len(p) for p in prompts]} (attempt {attempt}) steps {len(res['history'][0])} "
                  + ", ".join(f"{k} {v:.3g}" for k, v in res["margins"].items() if v != float("inf")))
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
