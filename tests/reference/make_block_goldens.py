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
                                     positions, sample_tokens)
from make_goldens import lcg_ids, sha256  # noqa: E402

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
]


def mix64(z):
    M = (1 << 64) - 1
    z = (z + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def counter_uniform(seed, step, slot, stream):
    h = mix64(seed)
    for w in (stream, step, slot):
        h = mix64(h ^ w)
    return (h >> 11) * 2.0 ** -53


REVEAL = 2


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
        logits = forward_batch(m, x, tok_idx, allowed)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        for r in range(B):
            b = cur[r]
            if b >= len(blocks):
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
                history=[[h[r] for h in hist] for r in range(B)], margins=mg)


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
            out["cases"].append({"name": case[0], "settings": s, "prompts": prompts, "sequences": res["sequences"],
                                 "history": res["history"], "margins": margins})
            print(f"  {case[0]}: prompts {[len(p) for p in prompts]} (attempt {attempt}) steps {len(res['history'][0])} "
                  + ", ".join(f"{k} {v:.3g}" for k, v in res["margins"].items() if v != float("inf")))
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
