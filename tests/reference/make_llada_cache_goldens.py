#!/usr/bin/python3
"""Goldens of Fast-dLLM's cached and parallel LLaDA generation (llada_cache_reference.py, float64),
never from sonde's output.

    /usr/bin/python3 tests/reference/make_llada_cache_goldens.py --sonde build/bin/sonde \
        --out tests/data/cache-tiny-llada-f32.json

One JSON file: the make-model arguments and checkpoint hash (the only thing taken from sonde), and
per case the prompt, the settings under sonde's names, the seed, the completion of the published
algorithm run alone after torch.manual_seed(seed), the margins its decisions clear, and every
forward's window (full or cached, first slot, width; for a cached one the summary of each row's
logits: columns 0, 128, ..., the max and the logsumexp). Prompts are redrawn until every decision
clears THRESHOLDS, so an f32 engine must agree token for token.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llada_cache_reference as cref  # noqa: E402
import llada_reference as ref  # noqa: E402
from make_goldens import lcg_ids, sha256  # noqa: E402

MAKE_MODEL = ["--arch", "llada", "--preset", "tiny", "--seed", "41"]
THRESHOLDS = {"min_logit_gap": 1e-3, "min_gumbel_gap": 1e-3, "min_selection_margin_rel": 1e-3,
              "min_random_margin": 1e-7, "min_threshold_margin": 1e-6, "min_first_margin": 1e-7}
MAX_ATTEMPTS = 300

# name, prompt length, settings (sonde's names: diffusion_mode, steps, max_new_tokens, block_length,
# remasking, temperature, threshold), seed.
CASES = [
    ("prefix_greedy_lowconf_steps16_block8", 6,
     dict(diffusion_mode="block-cache", steps=16, max_new_tokens=16, block_length=8), 0),
    ("dual_greedy_lowconf_steps8_block4", 5,
     dict(diffusion_mode="dual-cache", steps=8, max_new_tokens=16, block_length=4), 0),
    ("dual_greedy_random_steps16_block8_seed3", 6,
     dict(diffusion_mode="dual-cache", steps=16, max_new_tokens=16, block_length=8, remasking="random"), 3),
    ("prefix_temp0.8_lowconf_steps8_block8_seed5", 6,
     dict(diffusion_mode="block-cache", steps=8, max_new_tokens=16, block_length=8, temperature=0.8), 5),
    ("dual_temp0.8_lowconf_steps8_block8_seed6", 9,
     dict(diffusion_mode="dual-cache", steps=8, max_new_tokens=16, block_length=8, temperature=0.8), 6),
    ("exact_threshold_greedy_block8", 6,
     dict(diffusion_mode="exact", steps=16, max_new_tokens=16, block_length=8, threshold="T"), 0),
    ("prefix_threshold_greedy_block8", 6,
     dict(diffusion_mode="block-cache", steps=16, max_new_tokens=16, block_length=8, threshold="T"), 0),
    ("dual_threshold_greedy_block8", 7,
     dict(diffusion_mode="dual-cache", steps=16, max_new_tokens=16, block_length=8, threshold="T"), 0),
    ("dual_threshold_temp0.5_random_block4_seed8", 5,
     dict(diffusion_mode="dual-cache", steps=16, max_new_tokens=16, block_length=4, threshold=0.5,
          remasking="random", temperature=0.5), 8),
    ("dual_threshold_temp0.5_random_block4_seed9", 8,
     dict(diffusion_mode="dual-cache", steps=16, max_new_tokens=16, block_length=4, threshold=0.5,
          remasking="random", temperature=0.5), 9),
    # steps = blocks: the first step fills each block; the published loop still runs (and draws for)
    # one cached step per block, which commits nothing
    ("prefix_steps2_block8_temp1_seed10", 6,
     dict(diffusion_mode="block-cache", steps=2, max_new_tokens=16, block_length=8, temperature=1.0), 10),
]


def run_case(model, cfg, length, settings, seed, case_seed):
    s = dict(settings)
    cache = {"exact": "none", "block-cache": "prefix", "dual-cache": "dual"}[s["diffusion_mode"]]
    for attempt in range(MAX_ATTEMPTS):
        prompt = lcg_ids(1000 * case_seed + attempt, length, cfg.V - 8)
        margins, windows = {}, []
        torch.manual_seed(seed)
        x = cref.generate(model, torch.tensor([prompt]), s["steps"], s["max_new_tokens"], s["block_length"],
                          s.get("temperature", 0.0), s.get("remasking", "low_confidence"), cfg.mask_id,
                          s.get("threshold"), cache, margins, windows)
        if all(v >= THRESHOLDS[k] for k, v in margins.items()):
            return {"prompt": prompt, "settings": s, "seed": seed, "completion": [int(t) for t in x[0, length:]],
                    "margins": margins, "attempt": attempt, "windows": windows}
    raise SystemExit(f"no prompt of length {length} clears the thresholds for {settings}")


def greedy_threshold(model, cfg):
    """A threshold the tiny random model's confidences cross now and then: the 90th percentile of
    the top probability over a first full forward (random weights are never 0.9-confident)."""
    x = torch.full((1, 22), cfg.mask_id, dtype=torch.long)
    x[0, :6] = torch.tensor(lcg_ids(7, 6, cfg.V - 8))
    p = torch.softmax(cref.forward_range(model, x, 0)[0][0], -1).max(-1).values
    return round(float(torch.quantile(p, 0.9)), 4)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="sonde-llada-cache-") as tmp:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([a.sonde, "make-model", *MAKE_MODEL, "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
        model = ref.Model(model_dir)
        cfg = model.cfg
        thr = greedy_threshold(model, cfg)
        cases = []
        for i, (name, length, settings, seed) in enumerate(CASES):
            s = {k: (thr if v == "T" else v) for k, v in settings.items()}
            e = run_case(model, cfg, length, s, seed, i + 1)
            e["name"] = name
            cases.append(e)
            cached = sum(1 for w in e["windows"] if w["first"] > 0)
            print(f"{name}: attempt {e['attempt']}, {len(e['windows'])} forwards ({cached} cached), completion "
                  f"{e['completion']}, margins " + ", ".join(f"{k} {v:.2e}" for k, v in e["margins"].items()))
        out = {"make_model_args": MAKE_MODEL, "model_sha256": sha256(os.path.join(model_dir, "model.safetensors")),
               "torch_version": str(torch.__version__),
               "reference": "tests/reference/llada_cache_reference.py (Fast-dLLM llada/generate.py), float64",
               "cases": cases}
    with open(a.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"-> {a.out} ({os.path.getsize(a.out)} B)")


if __name__ == "__main__":
    main()
