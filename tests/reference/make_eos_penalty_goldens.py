#!/usr/bin/python3
"""Goldens for Dream-Coder's padding penalty (`eos_penalty`) in Dream's exact loop, from an
independent float64 PyTorch reference.

    /usr/bin/python3 tests/reference/make_eos_penalty_goldens.py --sonde build/bin/sonde \
        --out tests/data/eos-penalty-tiny-dream-f32.json

Written from docs/models.md ("Dream family", "Dream-Coder's padding penalty"), not from sonde's
sources: Dream's diffusion_generate (timesteps linspace(1, eps, steps + 1) in float32, the k most
confident masked slots per step, alg entropy, temperature 0), where before sampling every masked
slot's (shifted) logits get

    logits[:, pad_token_id] += eos_penalty * log(1 - t + 1e-3)        t = timesteps[step]

(Dream-Coder, arXiv 2509.01142 §4.1, as the public re-implementations state it): a large negative
bias on the pad token at the first step (t = 1), none at the last (t = eps).

A random checkpoint rarely predicts <|endoftext|>, so each case sets config.json's pad_token_id to
the token the unpenalized run commits most often (the test edits the same field): the penalty then
changes the output (and in the last case a weak penalty's output also changes with the formula's
constant, 1e-2 instead of 1e-3). Both runs are recorded (eos_penalty 0 and the case's), prompts re-drawn until
every decision clears make_generation_goldens.py's margins and the two outputs differ.

Only `sonde make-model` is taken from sonde (the weights, --variant dream-coder).
"""
import argparse
import collections
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_generation_goldens import (EPS, THRESHOLDS, Model, check_forward, draw_prompts,  # noqa: E402
                                     forward_batch, sample_tokens)
from make_goldens import lcg_ids, sha256  # noqa: E402

MAKE_MODEL = ["--arch", "dream", "--variant", "dream-coder", "--preset", "tiny", "--seed", "33"]
MAX_ATTEMPTS = 400
# name, prompt length, steps, max_new_tokens, eos_penalty, whether the output must also differ
# from the same penalty with log(1 - t + 1e-2) (a weak penalty: the formula's constant matters)
# (alg entropy, temperature 0)
CASES = [
    ("p6_steps16_penalty3", 6, 16, 16, 3.0, False),
    ("p5_steps8_len16_penalty1.5", 5, 8, 16, 1.5, False),
    ("p6_steps16_penalty0.4_constant", 6, 16, 16, 0.4, True),
]


def generate(m, prompt, steps, max_new, pad, eos_penalty, eps=EPS, const=1e-3):
    mask_id = m.cfg.raw["mask_token_id"]
    x = torch.tensor([prompt + [mask_id] * max_new], dtype=torch.long)
    N = x.shape[1]
    pos = torch.arange(N)[None]
    timesteps = torch.linspace(1, eps, steps + 1)  # float32
    min_gap, min_sel = float("inf"), float("inf")
    for i in range(steps):
        mask_index = x == mask_id
        logits = forward_batch(m, x, pos, None)
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # the shift
        t, s = timesteps[i], timesteps[i + 1]
        ml = logits[mask_index].clone()
        if eos_penalty:
            ml[:, pad] += eos_penalty * math.log(1 - float(t) + const)
        conf, x0, gap, _ = sample_tokens(ml, 0.0, None, None, False, True)
        n = mask_index.sum().to(torch.float32)
        k = int(n * (1 - s / t)) if i < steps - 1 else int(n)
        full = torch.full(x.shape, float("-inf"), dtype=torch.float64)
        full[mask_index] = conf
        x_ = torch.full_like(x, mask_id)
        x_[mask_index] = x0
        order = torch.sort(full[0], descending=True, stable=True).indices
        idx = order[:k]
        if k > 0:
            x[0, idx] = x_[0, idx]
            nxt = float(full[0, order[k]]) if k < N else float("-inf")
            if math.isfinite(nxt):
                min_sel = min(min_sel, float(full[0, idx[-1]]) - nxt)
            # the argmax decision of every committed slot
            gaps = torch.full(x.shape, float("inf"), dtype=torch.float64)
            gaps[mask_index] = gap
            min_gap = min(min_gap, float(gaps[0, idx].min()))
    return [int(v) for v in x[0, len(prompt):]], {"min_logit_gap": min_gap, "min_selection_margin": min_sel}


def safe(margins):
    return all(margins[k] >= THRESHOLDS[k] for k in margins)


def run_case(m, case, seed):
    name, plen, steps, max_new, penalty, sensitive = case
    default_pad = m.cfg.raw["pad_token_id"]
    for attempt in range(MAX_ATTEMPTS):
        prompt = draw_prompts(m, [plen], seed, attempt)[0]
        plain, mp = generate(m, prompt, steps, max_new, default_pad, 0.0)
        pad = collections.Counter(plain).most_common(1)[0][0]
        penalized, mq = generate(m, prompt, steps, max_new, pad, penalty)
        if sensitive and generate(m, prompt, steps, max_new, pad, penalty, const=1e-2)[0] == penalized:
            continue
        if safe(mp) and safe(mq) and penalized != plain:
            return dict(name=name, prompt=prompt, steps=steps, max_new_tokens=max_new, eos_penalty=penalty,
                        pad_token_id=pad, tokens_plain=plain, tokens_penalized=penalized, attempt=attempt,
                        margins_plain=mp, margins_penalized=mq)
    raise SystemExit(f"{name}: no prompt with safe margins and a changed output in {MAX_ATTEMPTS} attempts")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sonde-eos-penalty-") as tmp:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([a.sonde, "make-model", *MAKE_MODEL, "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
        m = Model(model_dir)
        check_forward(m, lcg_ids(5, 9, m.cfg.V - 8))
        out = {"make_model": MAKE_MODEL, "model_sha256": sha256(os.path.join(model_dir, "model.safetensors")),
               "alg": "entropy", "temperature": 0.0, "eps": EPS, "thresholds": THRESHOLDS,
               "cases": [run_case(m, c, 60 + i) for i, c in enumerate(CASES)]}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
