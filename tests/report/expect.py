#!/usr/bin/env python3
"""The values sonde report's page must show, read from the files with h5py and numpy alone (not
with sonde's reader): what tests/report/test_report_browser.mjs compares the page's DOM with.

Usage: expect.py acts|lens|stats FILE.h5  -> JSON on stdout
- acts: the run card's attributes; per prompt the commit step and confidence of every slot
  committed during diffusion (from the rows of kind 4, "committed at this step", and
  diffusion.hook_confidence: not from /steps, which the report reads), each step's canvas, the
  L2 norm of every row of every block hook, and each generated token's log-probability under the
  previous row's hook_logits (log-softmax).
- lens: the top token id and its probability per (layer, position) (per step for --diffusion).
- stats: per hook the mean and variance per feature and the outliers by the modified z-score
  (Iglewicz and Hoaglin 1993: |0.6745 (x - median) / MAD| > 3.5, of the mean or the variance).
"""
import json
import re
import sys

import h5py
import numpy as np


def string(P, name, e):
    off = P[name + "_offsets"]
    return bytes(P[name + "_bytes"][off[e]:off[e + 1]]).decode("utf-8", "replace")


def acts(f):
    attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items() if k not in ("layout",)}
    P, R = f["prompts"], f["rows"]
    out = {"attrs": attrs, "prompts": []}
    for e in range(P["prompt_idx"].shape[0]):
        a, n = int(P["row_start"][e]), int(P["row_count"][e])
        pos, step, kind = R["pos"][a:a + n], R["step"][a:a + n], R["kind"][a:a + n]
        p = {"entry": e, "id": string(P, "id", e), "commit": {}, "confidence": {}, "canvas": {}, "norms": [], "logprob": {}}
        if "acts/diffusion.hook_confidence" in f:
            conf = f["acts/diffusion.hook_confidence"][a:a + n]
            for r in np.flatnonzero(kind == 4):
                p["commit"][int(pos[r])] = int(step[r])
                p["confidence"][int(pos[r])] = float(conf[r])
        if "steps" in f:
            S = f["steps"]
            off = S["canvas_offsets"][:]
            for j in np.flatnonzero(S["prompt_idx"][:] == P["prompt_idx"][e]):
                p["canvas"][int(S["step"][j])] = S["canvas"][off[j]:off[j + 1]].tolist()
        for hook in f["acts"]:
            m = re.match(r"blocks\.(\d+)\.(.+)$", hook)
            if not m:
                continue
            x = f["acts"][hook][a:a + n].astype(np.float64).reshape(n, -1)
            norms = np.sqrt((x * x).sum(axis=1))
            for r in range(n):
                p["norms"].append({"hook": "blocks.*." + m.group(2), "layer": m.group(1), "pos": int(pos[r]),
                                   "step": int(step[r]), "norm": float(norms[r])})
        if "acts/hook_logits" in f and "steps" not in f:
            z = f["acts/hook_logits"][a:a + n].astype(np.float64)
            lse = z.max(axis=1) + np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1))
            tok = R["token_id"][a:a + n]
            row_at = {int(q): r for r, q in enumerate(pos)}
            for r in np.flatnonzero(kind == 1):
                prev = row_at.get(int(pos[r]) - 1)
                if prev is not None:
                    p["logprob"][int(pos[r])] = float(z[prev, tok[r]] - lse[prev])
        out["prompts"].append(p)
    return out


def lens(f):
    ids, probs = f["lens/top_ids"][:], f["lens/top_probs"][:]
    if ids.ndim == 3:
        ids, probs, steps = ids[None], probs[None], [0]
    else:
        steps = f["lens/steps"][:].tolist()
    cells = []
    for s, step in enumerate(steps):
        for l in range(ids.shape[1]):
            for t in range(ids.shape[2]):
                cells.append({"step": int(step), "layer": l, "pos": t, "top": int(ids[s, l, t, 0]), "prob": float(probs[s, l, t, 0])})
    return {"cells": cells}


def outliers(x):
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    if mad == 0:
        return set(np.flatnonzero(x != med).tolist())
    return set(np.flatnonzero(np.abs(0.6745 * (x - med) / mad) > 3.5).tolist())


def stats(f):
    out = {}
    for hook in f["stats"]:
        g = f["stats"][hook]
        mean, var = g["mean"][:].ravel(), g["var"][:].ravel()
        out[hook] = {"mean": mean.tolist(), "var": var.tolist(), "outliers": sorted(outliers(mean) | outliers(var))}
    return out


if __name__ == "__main__":
    kind, path = sys.argv[1], sys.argv[2]
    with h5py.File(path, "r") as f:
        print(json.dumps({"acts": acts, "lens": lens, "stats": stats}[kind](f)))
